// Listeners: which subsystems each admits, what the discovery log advertises, how many
// connections the target takes.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "target_fixture.h"

namespace sens::testing {
namespace {

namespace st = nvme::status;

std::string trimmed(const char* s, size_t n) {
  std::string t(s, strnlen(s, n));
  while (!t.empty() && t.back() == ' ') t.pop_back();
  return t;
}

// I/O listener on 0.0.0.0 and a discovery listener beside it.
class WildcardListenerTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.listen = {{"0.0.0.0", 0}};
    c.discovery_port = free_port();
    return c;
  }
  uint16_t discovery_port() const {
    for (auto& b : target_->bound())
      if (b.discovery) return b.port;
    return 0;
  }
};

// An NVM subsystem cannot be reached through the discovery port; the discovery subsystem can.
TEST_F(WildcardListenerTest, DiscoveryListenerAdmitsOnlyDiscovery) {
  RawClient c;
  ASSERT_TRUE(c.connect(discovery_port()));
  ASSERT_TRUE(c.ic(0));
  Result r = c.connect_queue(0, kNqn);
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << r.describe();
  RawClient d;
  ASSERT_TRUE(d.connect(discovery_port()));
  ASSERT_TRUE(d.ic(0));
  EXPECT_TRUE(d.connect_queue(0, nvme::kDiscoveryNqn).ok());
}

// The discovery log names the address the host reached, never 0.0.0.0 (which a host on
// another machine could not connect to).
TEST_F(WildcardListenerTest, DiscoveryLogAdvertisesTheReachedAddress) {
  RawClient d;
  ASSERT_TRUE(d.connect(discovery_port()));
  ASSERT_TRUE(d.ic(0));
  ASSERT_TRUE(d.connect_queue(0, nvme::kDiscoveryNqn).ok());
  ASSERT_TRUE(d.enable().ok());
  std::vector<nvme::DiscoveryLogEntry> page(4);
  Result r = d.exec(nvme::make_get_log_page(nvme::log_page::kDiscovery, 0, 4096, 0), nullptr, 0,
                    page.data(), 4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  auto& hdr = reinterpret_cast<nvme::DiscoveryLogHeader&>(page[0]);
  ASSERT_GE(hdr.numrec, 2u);
  int nvm = 0;
  for (uint64_t i = 1; i <= std::min<uint64_t>(hdr.numrec, 3); ++i) {
    EXPECT_EQ(trimmed(page[i].traddr, sizeof(page[i].traddr)), "127.0.0.1");
    if (page[i].subtype == nvme::kSubtypeNvme) ++nvm;
  }
  EXPECT_EQ(nvm, 1);
}

class ConnectionLimitTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.max_connections = 4;
    return c;
  }
};

// At the limit the next connection is closed at once; the open ones keep working, and a slot
// freed by a host that leaves is usable again.
TEST_F(ConnectionLimitTest, RefusesBeyondTheLimitAndKeepsServing) {
  Session a, b;
  ASSERT_EQ(a.open(port_, kNqn), "");
  ASSERT_EQ(b.open(port_, kNqn), "");
  RawClient extra;
  ASSERT_TRUE(extra.connect(port_));
  EXPECT_TRUE(extra.wait_closed(2000)) << "a fifth connection was kept";
  ASSERT_EQ(write_read(a.io, 0, 4096, 1, true), "");
  ASSERT_EQ(write_read(b.io, 8, 65536, 2, false), "");
  b.io.close();
  b.admin.close();
  // The target notices the close on its own time: retry until a new host gets in.
  bool in = false;
  for (int i = 0; i < 100 && !in; ++i) {
    Session c;
    in = c.open(port_, kNqn) == "";
    if (!in) usleep(20 * 1000);
  }
  EXPECT_TRUE(in);
  ASSERT_EQ(write_read(a.io, 0, 4096, 3, true), "");
}

}  // namespace
}  // namespace sens::testing
