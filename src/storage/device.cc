#include <cerrno>
#include <string>

#include "common/units.h"
#include "storage/backends.h"
#include "storage/device.h"

namespace sens::storage {

namespace {

constexpr uint32_t kMemoryBlockSize = 512;
constexpr const char* kSpecHelp = "expected ram:SIZE, null:SIZE, file:PATH or rbd:POOL/IMAGE";
constexpr const char* kNoRbd =
    "this sens was built without librbd (install librbd-dev and librados-dev, then rebuild)";

// Parses the SIZE of "ram:SIZE" / "null:SIZE" with every way it can be wrong named.
bool parse_memory_size(std::string_view kind, std::string_view text, uint64_t* size,
                       std::string* error) {
  std::string spec = std::string(kind) + ":" + std::string(text);
  if (text.empty()) {
    *error = spec + ": missing size (e.g. " + std::string(kind) + ":1G)";
    return false;
  }
  auto parsed = parse_size(text);
  if (!parsed) {
    *error = spec + ": '" + std::string(text) + "' is not a size (e.g. 512, 4k, 64M, 1G, 1GiB)";
    return false;
  }
  if (*parsed == 0) {
    *error = spec + ": size must be greater than zero";
    return false;
  }
  if (*parsed % kMemoryBlockSize != 0) {
    *error = spec + ": size " + std::to_string(*parsed) + " B is not a multiple of the " +
             std::to_string(kMemoryBlockSize) + "-byte block size";
    return false;
  }
  *size = *parsed;
  return true;
}

}  // namespace

int check_request(const Request& req, uint64_t device_size, uint32_t block_size, bool read_only) {
  if (req.op == Op::kFlush) return 0;
  if (req.op != Op::kRead && read_only) return -EROFS;
  if (req.length == 0 || req.offset % block_size != 0 || req.length % block_size != 0)
    return -EINVAL;
  if (req.offset > device_size || req.length > device_size - req.offset) return -EINVAL;
  if ((req.op == Op::kRead || req.op == Op::kWrite) && req.length > kMaxTransfer) return -EINVAL;
  return 0;
}

std::string check_spec(std::string_view spec) {
  std::string error;
  auto colon = spec.find(':');
  std::string_view kind = spec.substr(0, colon);
  std::string_view rest =
      colon == std::string_view::npos ? std::string_view() : spec.substr(colon + 1);
  uint64_t size = 0;
  if (kind == "ram" || kind == "null") {
    parse_memory_size(kind, rest, &size, &error);
    return error;
  }
  if (kind == "file") return rest.empty() ? "file: missing path (e.g. file:/dev/nvme0n1)" : "";
  if (kind == "rbd") {
    RbdSpec rbd;
    if (!parse_rbd_spec(rest, &rbd, &error)) return error;
    if (!rbd_supported()) return std::string(spec) + ": " + kNoRbd;
    return "";
  }
  if (spec.empty()) return std::string("empty namespace spec (") + kSpecHelp + ")";
  return "unknown namespace kind '" + std::string(kind) + "' (" + kSpecHelp + ")";
}

std::unique_ptr<Device> Device::open(std::string_view spec, std::string* error, bool read_only) {
  std::string scratch;
  if (error == nullptr) error = &scratch;
  auto colon = spec.find(':');
  std::string_view kind = spec.substr(0, colon);
  std::string_view rest =
      colon == std::string_view::npos ? std::string_view() : spec.substr(colon + 1);
  if (kind == "ram" || kind == "null") {
    uint64_t size = 0;
    if (!parse_memory_size(kind, rest, &size, error)) return nullptr;
    if (kind == "ram") return open_ram(size, read_only, error);
    return open_null(size, read_only);
  }
  if (kind == "file") {
    if (rest.empty()) {
      *error = "file: missing path (e.g. file:/dev/nvme0n1 or file:/var/tmp/disk.img)";
      return nullptr;
    }
    return open_file(std::string(rest), read_only, error);
  }
  if (kind == "rbd") {
    RbdSpec rbd;
    if (!parse_rbd_spec(rest, &rbd, error)) return nullptr;
    if (!rbd_supported()) {
      *error = std::string(spec) + ": " + kNoRbd;
      return nullptr;
    }
    return open_rbd(rbd, read_only, error);
  }
  if (spec.empty()) {
    *error = std::string("empty namespace spec (") + kSpecHelp + ")";
  } else {
    *error = "unknown namespace kind '" + std::string(kind) + "' in '" + std::string(spec) + "' (" +
             kSpecHelp + ")";
  }
  return nullptr;
}

}  // namespace sens::storage
