// ANA (Identify fields, the ANA log page 0Ch, path status, the ANA change AEN on a run-time
// change) and reservations (register, acquire, conflicts, preempt, release, clear, report),
// over real TCP with the raw client, checked against NVMe Base 2.0's field offsets.
#include <gtest/gtest.h>

#include <cstring>

#include "target_fixture.h"

namespace sens::testing {
namespace {

namespace st = nvme::status;
constexpr uint8_t kLogAna = 0x0C;
const uint8_t kHostB[16] = {0xb0, 0xb0, 1, 2, 3, 4, 0x40, 5, 0x80, 6, 7, 8, 9, 10, 11, 12};
constexpr const char* kHostBNqn =
    "nqn.2014-08.org.nvmexpress:uuid:b0b00102-0304-4005-8006-0708090a0b0c";

template <class T>
T get(const std::vector<uint8_t>& b, size_t at) {
  T v{};
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

class AnaTest : public TargetFixture {
 protected:
  // Listener 0 optimized; listener 1 non-optimized for group 1, inaccessible for group 2.
  // Namespace 1 in group 1, namespaces 2 and 3 in group 2.
  target::TargetConfig config() override {
    auto c = test_config();
    target::ListenAddress second{"127.0.0.1", free_port()};
    second.ana_state = target::ana::kNonOptimized;
    second.ana_groups = {{2, target::ana::kInaccessible}};
    c.listen.push_back(second);
    c.subsystems[0].namespaces = {"ram:16M", "ram:1M,anagrpid=2", "null:1M,anagrpid=2"};
    return c;
  }
  uint16_t second_port() {
    int n = 0;
    for (auto& b : target_->bound())
      if (!b.discovery && n++ == 1) return b.port;
    return 0;
  }
  std::vector<uint8_t> ana_log(RawClient& admin, uint32_t len, uint64_t offset = 0,
                               bool rgo = false, bool rae = false) {
    std::vector<uint8_t> page(len, 0xEE);
    auto sqe = nvme::make_get_log_page(kLogAna, 0xFFFFFFFF, len, offset);
    if (rgo) sqe.cdw10 |= 1u << 8;
    if (rae) sqe.cdw10 |= 1u << 15;
    Result r = admin.exec(sqe, nullptr, 0, page.data(), len);
    EXPECT_TRUE(r.ok()) << r.describe();
    return page;
  }
};

TEST_F(AnaTest, IdentifyReportsMultiControllerAnaAndReservations) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  nvme::IdentifyController idc{};
  ASSERT_TRUE(s.admin.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof idc).ok());
  EXPECT_EQ(idc.cmic, (1u << 1) | (1u << 3));
  EXPECT_TRUE(idc.oaes & (1u << 11));
  EXPECT_EQ(idc.anacap & 0x1F, 0x1F);
  EXPECT_GT(idc.anatt, 0);
  EXPECT_EQ(idc.anagrpmax, 32u);
  EXPECT_EQ(idc.nanagrpid, 32u);
  EXPECT_EQ(idc.mnan, 1024u);
  EXPECT_TRUE(idc.oncs & (1u << 5));
  nvme::IdentifyNamespace idn{};
  ASSERT_TRUE(s.admin.exec(nvme::make_identify(0, 2), nullptr, 0, &idn, sizeof idn).ok());
  EXPECT_EQ(idn.nmic, 1);
  EXPECT_EQ(idn.rescap, 0x7E);
  EXPECT_EQ(idn.anagrpid, 2u);
  // Offsets the Linux host reads (struct nvme_id_ctrl / nvme_id_ns).
  EXPECT_EQ(offsetof(nvme::IdentifyController, cmic), 76u);
  EXPECT_EQ(offsetof(nvme::IdentifyController, anatt), 342u);
  EXPECT_EQ(offsetof(nvme::IdentifyController, anagrpmax), 344u);
  EXPECT_EQ(offsetof(nvme::IdentifyController, nanagrpid), 348u);
  EXPECT_EQ(offsetof(nvme::IdentifyController, mnan), 540u);
  EXPECT_EQ(offsetof(nvme::IdentifyNamespace, anagrpid), 92u);
  EXPECT_EQ(offsetof(nvme::IdentifyNamespace, nmic), 30u);
}

TEST_F(AnaTest, LogPageLayoutPerListenerAndRgo) {
  Session a, b;
  ASSERT_EQ(a.open(port_, kNqn), "");
  ASSERT_EQ(b.open(second_port(), kNqn), "");
  auto p = ana_log(a.admin, 4096);
  EXPECT_EQ(get<uint16_t>(p, 8), 2);  // NUMANAGD
  // Group 1: nsid 1, optimized; group 2: nsids 2, 3, optimized (listener 0).
  EXPECT_EQ(get<uint32_t>(p, 16), 1u);
  EXPECT_EQ(get<uint32_t>(p, 20), 1u);
  EXPECT_EQ(p[32], target::ana::kOptimized);
  EXPECT_EQ(get<uint32_t>(p, 48), 1u);
  EXPECT_EQ(get<uint32_t>(p, 52), 2u);
  EXPECT_EQ(get<uint32_t>(p, 56), 2u);
  EXPECT_EQ(p[68], target::ana::kOptimized);
  EXPECT_EQ(get<uint32_t>(p, 84), 2u);
  EXPECT_EQ(get<uint32_t>(p, 88), 3u);
  EXPECT_EQ(p[92], 0);  // zero past the page's end
  auto q = ana_log(b.admin, 4096);
  EXPECT_EQ(q[32], target::ana::kNonOptimized);
  EXPECT_EQ(q[68], target::ana::kInaccessible);
  // RGO: descriptors without nsids.
  auto g = ana_log(b.admin, 4096, 0, true);
  EXPECT_EQ(get<uint16_t>(g, 8), 2);
  EXPECT_EQ(get<uint32_t>(g, 20), 0u);
  EXPECT_EQ(get<uint32_t>(g, 48), 2u);
  EXPECT_EQ(g[64], target::ana::kInaccessible);
  // A window at an offset, and a length shorter than the page.
  auto w = ana_log(b.admin, 8, 16);
  EXPECT_EQ(get<uint32_t>(w, 0), 1u);
  EXPECT_EQ(get<uint32_t>(w, 4), 1u);
  // An offset past the page is refused.
  auto sqe = nvme::make_get_log_page(kLogAna, 0xFFFFFFFF, 4, 4096);
  std::vector<uint8_t> tmp(4);
  EXPECT_EQ(b.admin.exec(sqe, nullptr, 0, tmp.data(), 4).status(), st::kInvalidField);
}

TEST_F(AnaTest, InaccessiblePathGetsAnaStatusWithoutDnr) {
  Session b;
  ASSERT_EQ(b.open(second_port(), kNqn), "");
  std::vector<uint8_t> buf(4096);
  Result r = b.io.exec(nvme::make_io(nvme::io_op::kRead, 2, 0, 8, nvme::Xfer::kTransport, 4096),
                       nullptr, 0, buf.data(), 4096);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), 0x302) << r.describe();  // SCT 3, Asymmetric Access Inaccessible
  EXPECT_FALSE(r.cqe.dnr());
  // Group 1 through the same listener (non-optimized) works.
  EXPECT_EQ(write_read(b.io, 0, 4096, 7, true), "");
  // A broadcast Flush flushes group 1 here and says that group 2 was not reached.
  auto broadcast = nvme::make_io(nvme::io_op::kFlush, 0xFFFFFFFF, 0, 0, nvme::Xfer::kTransport, 0);
  r = b.io.exec(broadcast);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), 0x302) << r.describe();
  Session a;  // the optimized listener reaches every group
  ASSERT_EQ(a.open(port_, kNqn), "");
  EXPECT_TRUE(a.io.exec(broadcast).ok());
}

TEST_F(AnaTest, RunTimeChangeSendsAenAndChangesState) {
  Session a;
  ASSERT_EQ(a.open(port_, kNqn), "");
  ASSERT_TRUE(
      a.admin.exec(nvme::make_set_features(nvme::feature::kAsyncEventConfig, 1u << 11)).ok());
  uint64_t before = get<uint64_t>(ana_log(a.admin, 4096), 0);
  uint16_t aer = a.admin.next_cid();
  auto aer_sqe = nvme::make_async_event();
  aer_sqe.cid = aer;
  ASSERT_TRUE(a.admin.send_bytes(a.admin.capsule_bytes(aer_sqe)));
  EXPECT_TRUE(a.admin.quiet(200));  // nothing to tell yet
  EXPECT_EQ(target_->set_ana_state(0, 1, target::ana::kInaccessible), 1);
  Result e = a.admin.await(aer, nullptr, 0, nullptr, 0);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_EQ(e.cqe.dw0, 0x000C0302u);                // notice, ANA change, log page 0Ch
  auto p = ana_log(a.admin, 4096, 0, false, true);  // RAE: keep it masked
  EXPECT_EQ(get<uint64_t>(p, 0), before + 1);
  EXPECT_EQ(p[32], target::ana::kInaccessible);
  std::vector<uint8_t> buf(4096);
  Result r = a.io.exec(nvme::make_io(nvme::io_op::kRead, 1, 0, 8, nvme::Xfer::kTransport, 4096),
                       nullptr, 0, buf.data(), 4096);
  EXPECT_EQ(r.status(), 0x302) << r.describe();
  // Masked until the log is read without RAE: the next change waits for that read.
  aer = a.admin.next_cid();
  aer_sqe.cid = aer;
  ASSERT_TRUE(a.admin.send_bytes(a.admin.capsule_bytes(aer_sqe)));
  EXPECT_EQ(target_->set_ana_state(0, 1, target::ana::kOptimized), 1);
  EXPECT_TRUE(a.admin.quiet(200));
  std::vector<uint8_t> page(4096);
  uint16_t log_cid = a.admin.next_cid();
  auto log = nvme::make_get_log_page(kLogAna, 0xFFFFFFFF, 4096, 0);
  log.cid = log_cid;
  ASSERT_TRUE(a.admin.send_bytes(a.admin.capsule_bytes(log)));
  // Both the log page and the AER (its change pending) answer now, in either order.
  bool got_log = false, got_aer = false;
  for (int i = 0; i < 8 && !(got_log && got_aer); ++i) {
    Pdu pdu;
    ASSERT_EQ(a.admin.recv_pdu(&pdu), RecvStatus::kOk);
    if (pdu.type() != uint8_t(pdu::Type::kCapsuleResp)) continue;
    auto resp = pdu.as<pdu::CapsuleResp>();
    if (resp.cqe.cid == aer) {
      EXPECT_EQ(resp.cqe.dw0, 0x000C0302u);
      got_aer = true;
    }
    if (resp.cqe.cid == log_cid) got_log = true;
  }
  EXPECT_TRUE(got_aer);
  EXPECT_TRUE(got_log);
  EXPECT_EQ(write_read(a.io, 0, 4096, 9, true), "");
}

// ---------------------------------------------------------------------------- reservations

Result resv(RawClient& io, uint8_t op, uint32_t cdw10, uint64_t k1, uint64_t k2 = 0) {
  uint8_t data[16];
  std::memcpy(data, &k1, 8);
  std::memcpy(data + 8, &k2, 8);
  uint32_t len = op == 0x15 ? 8 : 16;
  auto sqe = nvme::make_io(op, 1, 0, 0, nvme::Xfer::kInCapsule, len);
  sqe.cdw10 = cdw10;
  return io.exec(sqe, data, len);
}
uint16_t read_status(RawClient& io) {
  std::vector<uint8_t> buf(4096);
  return io
      .exec(nvme::make_io(nvme::io_op::kRead, 1, 0, 8, nvme::Xfer::kTransport, 4096), nullptr, 0,
            buf.data(), 4096)
      .status();
}
uint16_t write_status(RawClient& io) {
  std::vector<uint8_t> buf(4096, 1);
  return io
      .exec(nvme::make_io(nvme::io_op::kWrite, 1, 0, 8, nvme::Xfer::kInCapsule, 4096), buf.data(),
            4096)
      .status();
}
std::vector<uint8_t> report(RawClient& io, uint32_t len = 4096) {
  std::vector<uint8_t> out(len);
  auto sqe = nvme::make_io(0x0E, 1, 0, 0, nvme::Xfer::kTransport, len);
  sqe.cdw10 = len / 4 - 1;
  sqe.cdw11 = 1;  // EDS
  Result r = io.exec(sqe, nullptr, 0, out.data(), len);
  EXPECT_TRUE(r.ok()) << r.describe();
  return out;
}

class ReservationTest : public TargetFixture {
 protected:
  void SetUp() override {
    TargetFixture::SetUp();
    ASSERT_EQ(a.open(port_, kNqn), "");
    b.hostnqn = kHostBNqn;
    b.hostid = kHostB;
    ASSERT_EQ(b.open(port_, kNqn), "");
  }
  Session a, b;
};

constexpr uint8_t kRegister = 0x0D, kAcquire = 0x11, kRelease = 0x15;

TEST_F(ReservationTest, WriteExclusiveLetsOthersReadOnly) {
  EXPECT_TRUE(resv(a.io, kRegister, 0, 0, 0xAAAA).ok());
  EXPECT_TRUE(resv(b.io, kRegister, 0, 0, 0xBBBB).ok());
  // A wrong key is a conflict; the right one acquires.
  EXPECT_EQ(resv(a.io, kAcquire, 1u << 8, 0x1234).status(), 0x083);
  EXPECT_TRUE(resv(a.io, kAcquire, 1u << 8, 0xAAAA).ok());
  EXPECT_EQ(write_status(a.io), 0);
  EXPECT_EQ(read_status(b.io), 0);
  EXPECT_EQ(write_status(b.io), 0x083);
  // A broadcast Flush is a write to reservations: B's is refused for namespace 1, A's runs.
  auto broadcast = nvme::make_io(nvme::io_op::kFlush, 0xFFFFFFFF, 0, 0, nvme::Xfer::kTransport, 0);
  EXPECT_EQ(b.io.exec(broadcast).status(), 0x083);
  EXPECT_TRUE(a.io.exec(broadcast).ok());
  // B cannot acquire what A holds.
  EXPECT_EQ(resv(b.io, kAcquire, 1u << 8, 0xBBBB).status(), 0x083);
  // Release with the wrong type is an invalid field; with the right one it ends it.
  EXPECT_EQ(resv(a.io, kRelease, 2u << 8, 0xAAAA).status(), st::kInvalidField);
  EXPECT_TRUE(resv(a.io, kRelease, 1u << 8, 0xAAAA).ok());
  EXPECT_EQ(write_status(b.io), 0);
}

TEST_F(ReservationTest, ExclusiveAccessBlocksReadsPreemptTakesOver) {
  EXPECT_TRUE(resv(a.io, kRegister, 0, 0, 0xAAAA).ok());
  EXPECT_TRUE(resv(b.io, kRegister, 0, 0, 0xBBBB).ok());
  EXPECT_TRUE(resv(a.io, kAcquire, 2u << 8, 0xAAAA).ok());
  EXPECT_EQ(read_status(b.io), 0x083);
  EXPECT_EQ(write_status(b.io), 0x083);
  EXPECT_EQ(read_status(a.io), 0);
  // B preempts A (PRKEY = A's key): A is unregistered, B holds it, as write exclusive.
  EXPECT_TRUE(resv(b.io, kAcquire, 1 | (1u << 8), 0xBBBB, 0xAAAA).ok());
  EXPECT_EQ(write_status(a.io), 0x083);
  EXPECT_EQ(read_status(a.io), 0);
  EXPECT_EQ(write_status(b.io), 0);
  auto r = report(b.io);
  EXPECT_EQ(get<uint16_t>(r, 5), 1);  // REGCTL: only B is left
  EXPECT_EQ(r[4], 1);                 // RTYPE write exclusive
  EXPECT_EQ(get<uint64_t>(r, 64 + 8), 0xBBBBu);
  EXPECT_EQ(std::memcmp(r.data() + 64 + 16, kHostB, 16), 0);
  EXPECT_EQ(r[64 + 2] & 1, 1);  // RCSTS: holds it
  // A's old key no longer works anywhere.
  EXPECT_EQ(resv(a.io, kRelease, 1u << 8, 0xAAAA).status(), 0x083);
}

TEST_F(ReservationTest, ReportLayoutGenerationAndClear) {
  EXPECT_TRUE(resv(a.io, kRegister, 0, 0, 0x1111).ok());
  EXPECT_TRUE(resv(b.io, kRegister, 0, 0, 0x2222).ok());
  EXPECT_TRUE(resv(b.io, kRegister, 2, 0x2222, 0x3333).ok());  // replace
  EXPECT_TRUE(resv(a.io, kAcquire, 3u << 8, 0x1111).ok());     // WE registrants only
  auto r = report(a.io);
  EXPECT_EQ(get<uint32_t>(r, 0), 3u);  // GEN: two registers and a replace
  EXPECT_EQ(r[4], 3);
  EXPECT_EQ(get<uint16_t>(r, 5), 2);
  EXPECT_EQ(get<uint16_t>(r, 64), 0xFFFF);  // dynamic controllers
  EXPECT_EQ(get<uint64_t>(r, 64 + 8), 0x1111u);
  EXPECT_EQ(r[64 + 2] & 1, 1);
  EXPECT_EQ(get<uint64_t>(r, 128 + 8), 0x3333u);
  EXPECT_EQ(r[128 + 2] & 1, 0);
  // Registrants-only: B, registered, may write.
  EXPECT_EQ(write_status(b.io), 0);
  // A short buffer gets the start of the structure only.
  auto s = report(a.io, 64);
  EXPECT_EQ(get<uint16_t>(s, 5), 2);
  // Without EDS: host IDs are 128-bit over Fabrics.
  auto sqe = nvme::make_io(0x0E, 1, 0, 0, nvme::Xfer::kTransport, 64);
  sqe.cdw10 = 15;
  std::vector<uint8_t> out(64);
  EXPECT_EQ(a.io.exec(sqe, nullptr, 0, out.data(), 64).status(), 0x018);
  // Clear (by B, a registrant): no reservation, no registrant.
  EXPECT_TRUE(resv(b.io, kRelease, 1, 0x3333).ok());
  auto c = report(a.io);
  EXPECT_EQ(c[4], 0);
  EXPECT_EQ(get<uint16_t>(c, 5), 0);
  EXPECT_EQ(get<uint32_t>(c, 0), 4u);
  // Unregistered now: its key is gone.
  EXPECT_EQ(resv(a.io, kRelease, 0, 0x1111).status(), 0x083);
  // Host Identifier (Get Features 81h) gives back the Connect host ID.
  auto gf = nvme::make_get_features(0x81);
  gf.cdw11 = 1;
  gf.sgl.length = 16;
  uint8_t id[16]{};
  Result h = b.admin.exec(gf, nullptr, 0, id, 16);
  ASSERT_TRUE(h.ok()) << h.describe();
  EXPECT_EQ(std::memcmp(id, kHostB, 16), 0);
}

}  // namespace
}  // namespace sens::testing
