// Regression tests for defects a production host met (issue 10): each failed before its fix.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "target_fixture.h"

namespace sens::testing {
namespace {

namespace st = nvme::status;
using nvme::Xfer;

// The Linux host's block layer sends Dataset Management with a 4 KiB buffer (room for all 256
// ranges) and NR = ranges - 1; the target used to insist on NR x 16 bytes and failed every
// blkdiscard / mkfs discard with Data SGL Length Invalid.
TEST_F(TargetFixture, DeallocateWithLinuxSized4KiBBuffer) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  ASSERT_EQ(write_read(s.io, 64, 65536, 5, false), "");
  for (Xfer xfer : {Xfer::kTransport, Xfer::kInCapsule}) {
    std::vector<uint8_t> buf(4096, 0xEE);  // unused ranges hold garbage, as they may
    nvme::DsmRange range{0, 16, 64};
    std::memcpy(buf.data(), &range, sizeof(range));
    auto sqe = nvme::make_dsm_deallocate(1, 1, xfer);
    sqe.sgl.length = 4096;
    Result d = s.io.exec(sqe, buf.data(), 4096);
    ASSERT_TRUE(d.ok()) << (xfer == Xfer::kTransport ? "R2T: " : "in-capsule: ") << d.describe();
    std::vector<uint8_t> back(8192);
    Result r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 1, 64, 16, Xfer::kTransport, 8192),
                         nullptr, 0, back.data(), 8192);
    ASSERT_TRUE(r.ok()) << r.describe();
    EXPECT_EQ(first_difference(std::vector<uint8_t>(8192, 0), back), -1);
    ASSERT_EQ(write_read(s.io, 64, 65536, 6, false), "");
  }
  // Fewer bytes than NR ranges need, or more than 256 ranges' worth: still an error.
  std::vector<uint8_t> buf(8192, 0);
  auto sqe = nvme::make_dsm_deallocate(1, 2, Xfer::kTransport);
  sqe.sgl.length = 16;
  Result e = s.io.exec(sqe, buf.data(), 16);
  EXPECT_EQ(e.status(), st::kSglInvalidDataLength) << e.describe();
  sqe.sgl.length = 8192;
  e = s.io.exec(sqe, buf.data(), 8192);
  EXPECT_EQ(e.status(), st::kSglInvalidDataLength) << e.describe();
}

}  // namespace
}  // namespace sens::testing
