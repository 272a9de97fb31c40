#pragma once
// The TLS tests' set-up: a server and a client context for one PSK, and a handshake of two
// channels over blocking sockets.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "transport/tls.h"

namespace sens::transport {

// `hash` 1: TLS_AES_128_GCM_SHA256 (a 32-byte PSK), 2: TLS_AES_256_GCM_SHA384 (48 bytes).
struct TlsContexts {
  explicit TlsContexts(uint8_t hash = 1) {
    psk.identity = "NVMe1R01 host subsys";
    psk.key.assign(hash == 2 ? 48 : 32, 0x5a);
    psk.hash = hash;
    std::string err;
    server = TlsContext::server(
        [this](const std::string& id, TlsPsk* out, std::string*) {
          *out = psk;
          return id == psk.identity;
        },
        &err);
    EXPECT_TRUE(server) << err;
    client = TlsContext::client(psk, &err);
    EXPECT_TRUE(client) << err;
  }
  TlsPsk psk;
  std::unique_ptr<TlsContext> server, client;
};

// Blocking sockets: each side's handshake waits for the other's messages.
inline void tls_handshake(TlsChannel& s, TlsChannel& c) {
  std::thread peer([&] { EXPECT_EQ(s.handshake(), TlsChannel::Io::kOk) << s.error(); });
  EXPECT_EQ(c.handshake(), TlsChannel::Io::kOk) << c.error();
  peer.join();
}

}  // namespace sens::transport
