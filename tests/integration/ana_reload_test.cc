// Run-time ANA through `sens target`'s SIGHUP: the config file's listener options are
// re-read, the ANA log page changes, and a host that enabled ANA change notices gets an AER.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>

#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

std::string config_text(uint16_t port, const char* state) {
  return std::string("{\"listen\": [\"127.0.0.1:") + std::to_string(port) + ",ana=" + state +
         "\"], \"discovery_port\": 0, \"subsystems\": [{\"nqn\": \"nqn.2026-11.dev.sens:hup\", "
         "\"namespaces\": [\"ram:4M\"]}]}";
}

uint8_t group1_state(RawClient& admin) {
  uint8_t page[64]{};
  Result r = admin.exec(nvme::make_get_log_page(0x0C, 0xFFFFFFFF, 64, 0), nullptr, 0, page, 64);
  EXPECT_TRUE(r.ok()) << r.describe();
  return page[32];
}

TEST(AnaReload, SighupAppliesListenerStatesAndSendsAen) {
  TempDir dir;
  Child child;
  uint16_t port = 0;
  for (int attempt = 0; attempt < 5 && !child.running(); ++attempt) {
    port = free_port();
    ASSERT_TRUE(write_file(dir.file("t.json"), config_text(port, "optimized")));
    ASSERT_TRUE(child.start({SENS_BINARY, "target", "--config", dir.file("t.json")},
                            dir.file("out"), dir.file("err")));
    if (!child.wait_for_text(dir.file("out"), "listening on", 5000)) child.kill_now();
  }
  ASSERT_TRUE(child.running()) << read_file(dir.file("err"));
  Session s;
  ASSERT_EQ(s.open(port, "nqn.2026-11.dev.sens:hup"), "");
  EXPECT_EQ(group1_state(s.admin), 0x01);
  ASSERT_TRUE(s.admin.exec(nvme::make_set_features(0x0B, 1u << 11)).ok());
  auto aer = nvme::make_async_event();
  aer.cid = s.admin.next_cid();
  ASSERT_TRUE(s.admin.send_bytes(s.admin.capsule_bytes(aer)));

  ASSERT_TRUE(write_file(dir.file("t.json"), config_text(port, "non-optimized")));
  ASSERT_TRUE(child.signal(SIGHUP));
  Result e = s.admin.await(aer.cid, nullptr, 0, nullptr, 0, 5000);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_EQ(e.cqe.dw0, 0x000C0302u);
  EXPECT_EQ(group1_state(s.admin), 0x02);
  // A file that does not parse changes nothing (and the target keeps running).
  ASSERT_TRUE(write_file(dir.file("t.json"), "{not json"));
  ASSERT_TRUE(child.signal(SIGHUP));
  EXPECT_TRUE(child.wait_for_text(dir.file("err"), "nothing changed", 5000))
      << read_file(dir.file("err"));
  EXPECT_EQ(group1_state(s.admin), 0x02);
  ASSERT_TRUE(child.signal(SIGINT));
  EXPECT_EQ(child.wait(5000), 0);
}

}  // namespace
}  // namespace sens::testing
