#pragma once
// Command-line parsing shared by every subcommand: --help exits 0, any usage error exits 2
// (CLI11's own codes would leak through otherwise).
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace sens::tools {

// Parses argv into `app`. Returns the exit status when the command must stop now (help was
// printed, or the usage error was reported), nullopt when it should run.
inline std::optional<int> parse_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

// The host's authentication options, named as nvme-cli names them (discover, identify,
// perf): the DH-HMAC-CHAP secrets and the TLS PSK file.
inline void add_host_security_options(CLI::App& app, std::string& dhchap_secret,
                                      std::string& dhchap_ctrl_secret, std::string& tls_psk_file) {
  app.add_option("--dhchap-secret", dhchap_secret,
                 "DH-HMAC-CHAP host secret (DHHC-1:xx:...:), used when the controller asks");
  app.add_option("--dhchap-ctrl-secret", dhchap_ctrl_secret,
                 "the controller's DH-HMAC-CHAP secret: authenticate the controller too");
  app.add_option("--tls", tls_psk_file,
                 "TLS 1.3 with the first PSK of this file (NVMeTLSkey-1:..., nvme gen-tls-key)")
      ->type_name("PSKFILE");
}

// --tls-aes-gcm, as sens target, sens perf and sens_limit take it (their callers parse it).
inline void add_tls_aes_gcm_option(CLI::App& app, std::string& name) {
  app.add_option("--tls-aes-gcm", name,
                 "who computes TLS records' AES-GCM, for the whole process: auto (Intel's "
                 "ipsec-mb with the CPU's widest AES code where it runs, else OpenSSL), ipsec-mb, "
                 "openssl (OpenSSL's EVP: a FIPS-validated provider, say)")
      ->capture_default_str();
}

// --tls-records, as sens target and sens perf take it (their callers parse it).
inline void add_tls_records_option(CLI::App& app, std::string& name) {
  app.add_option("--tls-records", name,
                 "who protects TLS records after the handshake, for the whole process: auto "
                 "(the kernel's TLS, kTLS, where the kernel has the tls module, else sens in "
                 "user space), kernel (kTLS, or the connection fails), sens")
      ->capture_default_str();
}

}  // namespace sens::tools
