#pragma once
// What the target itself reads from a namespace spec, beside the backend's own words: the
// namespace's identity (uuid=, nguid=), its ANA group (anagrpid=) and nsid (nsid=), as trailing
// ",key=value" options: "file:/srv/disk.img,uuid=0f1e...,anagrpid=2". They are taken off
// before the backend sees the spec, so every backend (ram, null, file, rbd...) has them.
#include <cstdint>
#include <string>

namespace sens::target {

struct NamespaceOptions {
  std::string backend;  // the spec without the options above
  bool has_uuid = false, has_nguid = false;
  uint8_t uuid[16]{};
  uint8_t nguid[16]{};
  uint32_t anagrpid = 1;
  uint32_t nsid = 0;  // nsid=N (1..1024); 0: the one after the previous namespace's
};

// Splits `spec`; false (and a precise error) on a bad value.
bool parse_namespace_options(const std::string& spec, NamespaceOptions* out, std::string* error);
// The whole check of a --ns value: the options, then the backend's syntax. "" or the error.
std::string check_namespace_spec(const std::string& spec);
// The nsid a subsystem's spec gets: its nsid=N, or the one after `previous` (the nsid of the
// spec before it), as the registry and validate() number them.
uint32_t spec_nsid(const std::string& spec, uint32_t previous);
// `spec` with nsid=N, so that a saved configuration keeps the nsid however many namespaces
// before it were removed.
std::string spec_with_nsid(const std::string& spec, uint32_t nsid);
// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (or 32 hex digits) to 16 bytes.
bool parse_uuid(const std::string& text, uint8_t out[16]);

// The identity every gateway reports alike for the same backing store (NVMe Base 2.0 4.5.1:
// a namespace's NGUID and UUID must not differ between the controllers that share it).
// In order: the uuid= option; the backend's own ids (storage::Device::stable_identity(), an
// RBD image's, from the cluster fsid, pool and image id); else a seed: for a file, its resolved
// path and the subsystem NQN; for memory namespaces (never shared), the NQN and nsid. Both ids are
// SHA-256 of the seed, so they do not depend on the build.
void derive_namespace_ids(const std::string& seed, uint8_t nguid[16], uint8_t uuid[16]);

}  // namespace sens::target
