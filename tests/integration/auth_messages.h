#pragma once
// DH-HMAC-CHAP messages built by hand, for the tests that speak the protocol themselves.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "wire/nvme_auth.h"

namespace sens::testing {

// An AUTH_Negotiate payload offering DH-HMAC-CHAP with `hashes` and `groups` (NVMe Base 2.0
// 8.13.5.2: one protocol descriptor, 30 bytes of hash ids, then 30 of DH group ids). Tests
// that break a field do so on the returned bytes.
inline std::vector<uint8_t> negotiate_message(uint16_t t_id, const std::vector<uint8_t>& hashes,
                                              const std::vector<uint8_t>& groups) {
  namespace wa = nvme::auth;
  std::vector<uint8_t> m(8 + 64, 0);
  m[0] = wa::kTypeCommon;
  m[1] = wa::kIdNegotiate;
  m[4] = uint8_t(t_id);
  m[5] = uint8_t(t_id >> 8);
  m[7] = 1;  // napd
  m[8] = wa::kAuthIdDhchap;
  m[10] = uint8_t(hashes.size());
  m[11] = uint8_t(groups.size());
  std::copy(hashes.begin(), hashes.end(), m.begin() + 12);
  std::copy(groups.begin(), groups.end(), m.begin() + 12 + 30);
  return m;
}

}  // namespace sens::testing
