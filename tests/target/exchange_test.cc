// A whole host/controller exchange against an in-process target, PDU by PDU: IC, admin queue
// bring-up and every admin command a fabrics host sends, an I/O queue with every I/O command
// and the errors they can end in, shutdown and Disconnect. The I/O part is repeated with
// header and data digests and with SQ flow control disabled (C2HData DATA_SUCCESS).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "target_fixture.h"

namespace sens::testing {
namespace {

namespace st = nvme::status;
using nvme::Xfer;

std::string trimmed(const char* s, size_t n) {
  std::string out(s, n);
  while (!out.empty() && (out.back() == ' ' || out.back() == '\0')) out.pop_back();
  return out;
}

uint64_t property(RawClient& admin, uint32_t offset, bool eight) {
  Result r = admin.exec(nvme::make_property_get(offset, eight));
  EXPECT_TRUE(r.ok()) << "Property Get 0x" << std::hex << offset << ": " << r.describe();
  return uint64_t(r.cqe.dw0) | (uint64_t(r.cqe.dw1) << 32);
}

// The I/O part of the exchange on a connected I/O queue. `data_success`: the queue was
// connected with SQ flow control disabled, so reads end with a DATA_SUCCESS C2HData and no
// CapsuleResp.
void io_suite(RawClient& io, bool data_success) {
  SCOPED_TRACE(data_success ? "SQ flow control disabled" : "SQ flow control on");
  const uint64_t blocks = kNsBytes / 512;

  // Write 4 KiB in-capsule, read it back.
  auto small = pattern(4096, 1);
  Result w = io.exec(nvme::make_io(nvme::io_op::kWrite, 1, 8, 8, Xfer::kInCapsule, 4096),
                     small.data(), 4096);
  ASSERT_TRUE(w.ok()) << w.describe();
  EXPECT_TRUE(w.have_cqe) << "a write always ends with a CapsuleResp";
  EXPECT_TRUE(w.r2ts.empty()) << "in-capsule data needs no R2T";
  EXPECT_EQ(w.cqe.sqid, 1);
  std::vector<uint8_t> back(4096);
  Result r = io.exec(nvme::make_io(nvme::io_op::kRead, 1, 8, 8, Xfer::kTransport, 4096), nullptr, 0,
                     back.data(), 4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.c2h_bytes, 4096u);
  EXPECT_EQ(first_difference(small, back), -1);
  ASSERT_FALSE(r.c2h.empty());
  const auto& last = r.c2h.back();
  EXPECT_TRUE(last.ch.flags & pdu::flag::kDataLast);
  if (data_success) {
    EXPECT_TRUE(r.data_success);
    EXPECT_FALSE(r.have_cqe);
    EXPECT_TRUE(io.quiet(50)) << "a CapsuleResp followed a DATA_SUCCESS C2HData";
  } else {
    EXPECT_FALSE(last.ch.flags & pdu::flag::kDataSuccess);
    EXPECT_TRUE(r.have_cqe);
  }

  // Write 64 KiB after an R2T, in H2CData PDUs no larger than maxh2cdata.
  auto big = pattern(65536, 2);
  auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, 1024, 128, Xfer::kTransport, 65536);
  sqe.cid = io.next_cid();
  w = io.exec(sqe, big.data(), 65536, nullptr, 0, /*keep_cid=*/true);
  ASSERT_TRUE(w.ok()) << w.describe();
  ASSERT_EQ(w.r2ts.size(), 1u);
  const auto& r2t = w.r2ts[0];
  EXPECT_EQ(r2t.cccid, sqe.cid);
  EXPECT_EQ(r2t.r2to, 0u);
  EXPECT_EQ(r2t.r2tl, 65536u);
  EXPECT_LT(r2t.ttag, kQueueSize);
  ASSERT_GE(w.h2c_sizes.size(), 4u);
  uint32_t sum = 0;
  for (size_t i = 0; i < w.h2c_sizes.size(); ++i) {
    EXPECT_LE(w.h2c_sizes[i], io.maxh2cdata());
    sum += w.h2c_sizes[i];
    EXPECT_EQ(bool(w.h2c_flags[i] & pdu::flag::kDataLast), i + 1 == w.h2c_sizes.size());
  }
  EXPECT_EQ(sum, 65536u);

  // Read the 64 KiB back.
  std::vector<uint8_t> big_back(65536);
  r = io.exec(nvme::make_io(nvme::io_op::kRead, 1, 1024, 128, Xfer::kTransport, 65536), nullptr, 0,
              big_back.data(), 65536);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.c2h_bytes, 65536u);
  EXPECT_EQ(first_difference(big, big_back), -1);

  // Flush (one namespace, then all namespaces).
  Result f = io.exec(nvme::make_io(nvme::io_op::kFlush, 1, 0, 0, Xfer::kTransport, 0));
  EXPECT_TRUE(f.ok()) << f.describe();
  f = io.exec(nvme::make_io(nvme::io_op::kFlush, 0xFFFFFFFF, 0, 0, Xfer::kTransport, 0));
  EXPECT_TRUE(f.ok()) << "broadcast flush: " << f.describe();

  // Write Zeroes over the first 16 KiB of the big write, then read zeroes there (and the
  // pattern behind them).
  Result z = io.exec(nvme::make_io(nvme::io_op::kWriteZeroes, 1, 1024, 32, Xfer::kTransport, 0));
  ASSERT_TRUE(z.ok()) << z.describe();
  r = io.exec(nvme::make_io(nvme::io_op::kRead, 1, 1024, 128, Xfer::kTransport, 65536), nullptr, 0,
              big_back.data(), 65536);
  ASSERT_TRUE(r.ok()) << r.describe();
  std::vector<uint8_t> expect = big;
  std::memset(expect.data(), 0, 16384);
  EXPECT_EQ(first_difference(expect, big_back), -1);

  // Dataset Management deallocate of the next 16 KiB (ranges in the capsule): reads zeroes.
  nvme::DsmRange range{0, 32, 1024 + 32};
  Result d = io.exec(nvme::make_dsm_deallocate(1, 1, Xfer::kInCapsule), &range, sizeof(range));
  ASSERT_TRUE(d.ok()) << d.describe();
  // ... and with the ranges sent after an R2T.
  nvme::DsmRange range2{0, 8, 8};
  d = io.exec(nvme::make_dsm_deallocate(1, 1, Xfer::kTransport), &range2, sizeof(range2));
  ASSERT_TRUE(d.ok()) << d.describe();
  EXPECT_EQ(d.r2ts.size(), 1u);
  r = io.exec(nvme::make_io(nvme::io_op::kRead, 1, 1024, 128, Xfer::kTransport, 65536), nullptr, 0,
              big_back.data(), 65536);
  ASSERT_TRUE(r.ok()) << r.describe();
  std::memset(expect.data() + 16384, 0, 16384);
  EXPECT_EQ(first_difference(expect, big_back), -1);
  r = io.exec(nvme::make_io(nvme::io_op::kRead, 1, 8, 8, Xfer::kTransport, 4096), nullptr, 0,
              back.data(), 4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(first_difference(std::vector<uint8_t>(4096, 0), back), -1);

  // Errors: each answered with a CapsuleResp (even with SQ flow control off) and DNR.
  std::vector<uint8_t> scratch(8192);
  Result e = io.exec(nvme::make_io(nvme::io_op::kRead, 1, blocks - 4, 8, Xfer::kTransport, 4096),
                     nullptr, 0, scratch.data(), 4096);
  ASSERT_TRUE(e.have_cqe) << e.describe();
  EXPECT_EQ(e.status(), st::kLbaOutOfRange) << e.describe();
  EXPECT_TRUE(e.cqe.dnr());
  e = io.exec(nvme::make_io(nvme::io_op::kRead, 1, blocks, 1, Xfer::kTransport, 512), nullptr, 0,
              scratch.data(), 512);
  EXPECT_EQ(e.status(), st::kLbaOutOfRange) << e.describe();
  e = io.exec(nvme::make_io(nvme::io_op::kWrite, 1, blocks - 1, 2, Xfer::kInCapsule, 1024),
              scratch.data(), 1024);
  EXPECT_EQ(e.status(), st::kLbaOutOfRange) << "write beyond the end: " << e.describe();
  e = io.exec(nvme::make_io(nvme::io_op::kRead, 2, 0, 1, Xfer::kTransport, 512), nullptr, 0,
              scratch.data(), 512);
  EXPECT_EQ(e.status(), st::kInvalidNamespace) << e.describe();
  e = io.exec(nvme::make_io(nvme::io_op::kWrite, 7, 0, 1, Xfer::kInCapsule, 512), scratch.data(),
              512);
  EXPECT_EQ(e.status(), st::kInvalidNamespace) << e.describe();
  auto bad = nvme::make_io(0x55, 1, 0, 1, Xfer::kTransport, 0);
  e = io.exec(bad);
  EXPECT_EQ(e.status(), st::kInvalidOpcode) << e.describe();
  EXPECT_TRUE(e.cqe.dnr());

  // The queue still works after the errors.
  EXPECT_EQ(write_read(io, 2048, 8192, 3, true), "");
}

TEST_F(TargetFixture, IcRespMirrorsDigestsAndAdvertisesLimits) {
  for (uint8_t digest : {0, 1, 2, 3}) {
    RawClient c;
    ASSERT_TRUE(c.connect(port_)) << c.last_error();
    pdu::ICResp resp{};
    ASSERT_TRUE(c.ic(digest, &resp)) << c.last_error();
    EXPECT_EQ(resp.ch.type, uint8_t(pdu::Type::kICResp));
    EXPECT_EQ(resp.ch.hlen, 128);
    EXPECT_EQ(resp.ch.plen, 128u);
    EXPECT_EQ(resp.ch.flags, 0);
    EXPECT_EQ(resp.ch.pdo, 0);
    EXPECT_EQ(resp.pfv, 0);
    EXPECT_EQ(resp.cpda, 0);
    EXPECT_EQ(resp.digest, digest);
    EXPECT_EQ(resp.maxh2cdata, kMaxH2C);
  }
}

TEST_F(TargetFixture, FullExchange) {
  RawClient admin;
  ASSERT_TRUE(admin.connect(port_)) << admin.last_error();
  ASSERT_TRUE(admin.ic(0)) << admin.last_error();

  // Admin Connect: a fresh cntlid in dw0.
  Result r = admin.connect_queue(0, kNqn, 0xFFFF, 0);
  ASSERT_TRUE(r.ok()) << r.describe();
  const uint16_t cntlid = uint16_t(r.cqe.dw0);
  EXPECT_NE(cntlid, 0);
  EXPECT_LT(cntlid, 0xFFF0);
  EXPECT_EQ(r.cqe.sqid, 0);

  // Properties: CAP, VS, CC.EN=1, CSTS.RDY.
  uint64_t cap = property(admin, nvme::reg::kCap, true);
  EXPECT_EQ(cap & 0xFFFF, kQueueSize - 1) << "CAP.MQES";
  EXPECT_TRUE(cap & (1ull << 16)) << "CAP.CQR";
  EXPECT_NE((cap >> 24) & 0xFF, 0u) << "CAP.TO";
  EXPECT_TRUE(cap & (1ull << 37)) << "CAP.CSS NVM";
  uint32_t vs = uint32_t(property(admin, nvme::reg::kVs, false));
  EXPECT_EQ(vs >> 16, 1u) << "VS major";
  EXPECT_GE(vs, 0x00010200u);
  EXPECT_EQ(property(admin, nvme::reg::kCsts, false) & 1, 0u) << "ready before CC.EN";
  r = admin.exec(nvme::make_property_set(nvme::reg::kCc, 0x00460001, false));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(property(admin, nvme::reg::kCc, false), 0x00460001u);
  EXPECT_EQ(property(admin, nvme::reg::kCsts, false) & 1, 1u) << "CSTS.RDY";
  r = admin.exec(nvme::make_property_get(0x40, false));
  EXPECT_EQ(r.status(), st::kInvalidField) << "unknown property: " << r.describe();

  // Identify Controller.
  nvme::IdentifyController idc{};
  r = admin.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof(idc));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.c2h_bytes, 4096u);
  EXPECT_EQ(trimmed(idc.mn, sizeof(idc.mn)), "sens");
  EXPECT_FALSE(trimmed(idc.sn, sizeof(idc.sn)).empty());
  EXPECT_EQ(std::string(nvme::fixed_string(idc.subnqn, sizeof(idc.subnqn))), kNqn);
  EXPECT_EQ(idc.ioccsz, (64 + kInline) / 16);
  EXPECT_EQ(idc.iorcsz, 1u);
  EXPECT_EQ(idc.icdoff, 0);
  EXPECT_TRUE(idc.sgls & 1) << "SGL support";
  EXPECT_EQ(4096u << idc.mdts, kMaxIo) << "MDTS in 4 KiB units";
  EXPECT_EQ(idc.nn, 1024u);  // nsids 1..1024: namespaces come and go live
  EXPECT_EQ(idc.cntrltype, 1) << "I/O controller";
  EXPECT_EQ(idc.maxcmd, kQueueSize);
  EXPECT_EQ(idc.cntlid, cntlid);
  EXPECT_EQ(idc.sqes, 0x66);
  EXPECT_EQ(idc.cqes, 0x44);
  EXPECT_GE(idc.msdbd, 1);

  // Identify Namespace 1.
  nvme::IdentifyNamespace idn{};
  r = admin.exec(nvme::make_identify(0, 1), nullptr, 0, &idn, sizeof(idn));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(idn.nsze, kNsBytes / 512);
  EXPECT_EQ(idn.ncap, kNsBytes / 512);
  EXPECT_EQ(idn.flbas & 0xF, 0);
  EXPECT_EQ(idn.lbaf[0].lbads, 9);
  // An inactive nsid (within NN) identifies as zeroes; past NN it is Invalid Namespace.
  nvme::IdentifyNamespace inactive{};
  std::memset(&inactive, 0xEE, sizeof inactive);
  r = admin.exec(nvme::make_identify(0, 2), nullptr, 0, &inactive, sizeof(inactive));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(inactive.nsze, 0u);
  r = admin.exec(nvme::make_identify(0, 1025), nullptr, 0, &inactive, sizeof(inactive));
  EXPECT_EQ(r.status(), st::kInvalidNamespace) << r.describe();

  // CNS 2: active namespace list.
  uint32_t list[1024];
  std::memset(list, 0xFF, sizeof(list));
  r = admin.exec(nvme::make_identify(2, 0), nullptr, 0, list, sizeof(list));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(list[0], 1u);
  EXPECT_EQ(list[1], 0u);
  r = admin.exec(nvme::make_identify(2, 1), nullptr, 0, list, sizeof(list));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(list[0], 0u) << "no active namespace above nsid 1";

  // CNS 3: namespace identification descriptors (NGUID matches Identify Namespace).
  uint8_t desc[4096];
  r = admin.exec(nvme::make_identify(3, 1), nullptr, 0, desc, sizeof(desc));
  ASSERT_TRUE(r.ok()) << r.describe();
  bool saw_nguid = false, saw_csi = false;
  for (size_t off = 0; off + 4 <= sizeof(desc) && desc[off] != 0;) {
    uint8_t type = desc[off], len = desc[off + 1];
    ASSERT_GE(type, 1);
    ASSERT_LE(type, 4);
    if (type == nvme::kNidtNguid) {
      EXPECT_EQ(len, 16);
      EXPECT_EQ(std::memcmp(desc + off + 4, idn.nguid, 16), 0);
      saw_nguid = true;
    }
    if (type == nvme::kNidtCsi) {
      EXPECT_EQ(len, 1);
      EXPECT_EQ(desc[off + 4], 0) << "NVM command set";
      saw_csi = true;
    }
    off += 4 + len;
  }
  EXPECT_TRUE(saw_nguid);
  EXPECT_TRUE(saw_csi);

  // Set/Get Features: Number of Queues (zero-based counts in dw0).
  r = admin.exec(nvme::make_set_num_queues(4, 4));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.cqe.dw0, nvme::num_queues_value(4, 4));
  r = admin.exec(nvme::make_get_features(nvme::feature::kNumQueues));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.cqe.dw0, nvme::num_queues_value(4, 4));

  // Log pages: SMART, error, changed namespaces; an unknown one.
  nvme::SmartLog smart{};
  r = admin.exec(nvme::make_get_log_page(nvme::log_page::kSmart, 0xFFFFFFFF, 512, 0), nullptr, 0,
                 &smart, sizeof(smart));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.c2h_bytes, 512u);
  EXPECT_GT(smart.temperature, 273) << "Kelvin";
  EXPECT_EQ(smart.critical_warning, 0);
  std::vector<uint8_t> page(4096, 0xAA);
  r = admin.exec(nvme::make_get_log_page(nvme::log_page::kError, 0, 64 * 4, 0), nullptr, 0,
                 page.data(), 64 * 4);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.c2h_bytes, 256u);
  EXPECT_EQ(first_difference(std::vector<uint8_t>(page.begin(), page.begin() + 256),
                             std::vector<uint8_t>(256, 0)),
            -1)
      << "no errors logged";
  r = admin.exec(nvme::make_get_log_page(nvme::log_page::kChangedNs, 0, 4096, 0), nullptr, 0,
                 page.data(), 4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.c2h_bytes, 4096u);
  r = admin.exec(nvme::make_get_log_page(0xBF, 0, 512, 0), nullptr, 0, page.data(), 512);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kInvalidLogPage) << r.describe();
  r = admin.exec(nvme::make_get_log_page(nvme::log_page::kDiscovery, 0, 1024, 0), nullptr, 0,
                 page.data(), 1024);
  EXPECT_EQ(r.status(), st::kInvalidLogPage) << "discovery log on an I/O controller";
  // Offset and length each within the longest page, their sum not: the page would be built
  // past the end of its buffer (a fuzzer found the overflow).
  std::vector<uint8_t> big(64 * 1024);
  r = admin.exec(nvme::make_get_log_page(nvme::log_page::kChangedNs, 0, 8192, 60 * 1024), nullptr,
                 0, big.data(), 8192);
  EXPECT_EQ(r.status(), st::kInvalidField) << r.describe();
  r = admin.exec(nvme::make_get_log_page(nvme::log_page::kChangedNs, 0, 64 * 1024, 0), nullptr, 0,
                 big.data(), big.size());
  ASSERT_TRUE(r.ok()) << "the longest page is still served: " << r.describe();

  // An unknown admin opcode.
  auto bogus = nvme::make_keep_alive();
  bogus.opcode = 0xC3;
  r = admin.exec(bogus);
  EXPECT_EQ(r.status(), st::kInvalidOpcode) << r.describe();

  // The I/O queue joins the controller by its cntlid.
  RawClient io;
  ASSERT_TRUE(io.connect(port_)) << io.last_error();
  ASSERT_TRUE(io.ic(0)) << io.last_error();
  r = io.connect_queue(1, kNqn, cntlid, 0, 0, 127);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(uint16_t(r.cqe.dw0), cntlid);
  EXPECT_EQ(r.cqe.sqid, 1);

  io_suite(io, false);

  // SMART counts the I/O.
  r = admin.exec(nvme::make_get_log_page(nvme::log_page::kSmart, 0xFFFFFFFF, 512, 0), nullptr, 0,
                 &smart, sizeof(smart));
  ASSERT_TRUE(r.ok()) << r.describe();
  uint64_t host_writes, host_reads;
  std::memcpy(&host_writes, smart.host_writes, 8);
  std::memcpy(&host_reads, smart.host_reads, 8);
  EXPECT_GE(host_writes, 3u);
  EXPECT_GE(host_reads, 4u);

  // Keep Alive.
  r = admin.exec(nvme::make_keep_alive());
  EXPECT_TRUE(r.ok()) << r.describe();

  // I/O queue Disconnect: answered, then the connection closes.
  r = io.exec(nvme::make_disconnect());
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_TRUE(io.wait_closed(2000)) << io.last_error();

  // Shutdown: CC.SHN = normal, then CSTS.SHST = complete.
  r = admin.exec(nvme::make_property_set(nvme::reg::kCc, 0x00460001 | (1u << 14), false));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ((property(admin, nvme::reg::kCsts, false) >> 2) & 3, 2u) << "CSTS.SHST";

  r = admin.exec(nvme::make_disconnect());
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_TRUE(admin.wait_closed(2000)) << admin.last_error();

  // The controller is gone: its cntlid no longer admits I/O queues.
  RawClient late;
  ASSERT_TRUE(late.connect(port_)) << late.last_error();
  ASSERT_TRUE(late.ic(0)) << late.last_error();
  r = late.connect_queue(1, kNqn, cntlid);
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << r.describe();
}

TEST_F(TargetFixture, IoWithHeaderAndDataDigests) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, pdu::kDigestHeader | pdu::kDigestData), "");
  ASSERT_TRUE(s.io.digests().header && s.io.digests().data);
  io_suite(s.io, false);
  // Admin traffic with digests too.
  nvme::IdentifyController idc{};
  Result r = s.admin.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof(idc));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(idc.cntrltype, 1);
}

TEST_F(TargetFixture, IoWithHeaderDigestOnly) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, pdu::kDigestHeader), "");
  EXPECT_EQ(write_read(s.io, 100, 65536, 11, false), "");
  EXPECT_EQ(write_read(s.io, 300, 4096, 12, true), "");
}

TEST_F(TargetFixture, IoWithDataDigestOnly) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, pdu::kDigestData), "");
  EXPECT_EQ(write_read(s.io, 100, 65536, 13, false), "");
  EXPECT_EQ(write_read(s.io, 300, 4096, 14, true), "");
}

TEST_F(TargetFixture, IoWithSqFlowControlDisabled) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, 0, nvme::kCattrDisableSqFlowControl), "");
  io_suite(s.io, true);
}

TEST_F(TargetFixture, IoWithDigestsAndSqFlowControlDisabled) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, 3, nvme::kCattrDisableSqFlowControl), "");
  io_suite(s.io, true);
}

// A data digest that does not match: the command fails, the connection goes on.
TEST_F(TargetFixture, BadDataDigestFailsTheCommandOnly) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, pdu::kDigestData), "");
  auto data = pattern(4096, 5);
  auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, 0, 8, Xfer::kInCapsule, 4096);
  sqe.cid = s.io.next_cid();
  auto bytes = s.io.capsule_bytes(sqe, data.data(), 4096);
  bytes.back() ^= 0x5A;
  ASSERT_TRUE(s.io.send_bytes(bytes));
  Result r = s.io.await(sqe.cid, nullptr, 0, nullptr, 0);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  // Data Transfer Error, or Transient Transport Error (22h) as NVMe/TCP suggests.
  EXPECT_TRUE(r.status() == st::kDataTransferError || r.status() == 0x022) << r.describe();
  EXPECT_EQ(write_read(s.io, 0, 4096, 6, true), "");
}

// Pipelined commands: 32 writes and 32 reads outstanding at once, answered in any order.
TEST_F(TargetFixture, ManyOutstandingCommands) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  constexpr int kN = 32;
  std::vector<std::vector<uint8_t>> data;
  std::vector<uint8_t> stream;
  for (int i = 0; i < kN; ++i) {
    data.push_back(pattern(4096, 100 + i));
    auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, uint64_t(i) * 8, 8, Xfer::kInCapsule, 4096);
    sqe.cid = uint16_t(1000 + i);
    auto b = s.io.capsule_bytes(sqe, data.back().data(), 4096);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  ASSERT_TRUE(s.io.send_bytes(stream));
  std::vector<bool> done(kN);
  for (int i = 0; i < kN; ++i) {
    Pdu p;
    ASSERT_EQ(s.io.recv_pdu(&p), RecvStatus::kOk) << s.io.last_error();
    ASSERT_EQ(p.type(), uint8_t(pdu::Type::kCapsuleResp));
    auto resp = p.as<pdu::CapsuleResp>();
    ASSERT_GE(resp.cqe.cid, 1000);
    ASSERT_LT(resp.cqe.cid, 1000 + kN);
    EXPECT_FALSE(done[resp.cqe.cid - 1000]) << "two responses for cid " << resp.cqe.cid;
    done[resp.cqe.cid - 1000] = true;
    EXPECT_TRUE(resp.cqe.ok());
  }
  stream.clear();
  for (int i = 0; i < kN; ++i) {
    auto sqe = nvme::make_io(nvme::io_op::kRead, 1, uint64_t(i) * 8, 8, Xfer::kTransport, 4096);
    sqe.cid = uint16_t(2000 + i);
    auto b = s.io.capsule_bytes(sqe);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  ASSERT_TRUE(s.io.send_bytes(stream));
  std::vector<std::vector<uint8_t>> back(kN, std::vector<uint8_t>(4096));
  int completions = 0;
  while (completions < kN) {
    Pdu p;
    ASSERT_EQ(s.io.recv_pdu(&p), RecvStatus::kOk) << s.io.last_error();
    if (p.type() == uint8_t(pdu::Type::kC2HData)) {
      auto d = p.as<pdu::DataHeader>();
      ASSERT_GE(d.cccid, 2000);
      ASSERT_LT(d.cccid, 2000 + kN);
      ASSERT_LE(d.datao + d.datal, 4096u);
      std::memcpy(back[d.cccid - 2000].data() + d.datao, p.data(), d.datal);
      continue;
    }
    ASSERT_EQ(p.type(), uint8_t(pdu::Type::kCapsuleResp));
    EXPECT_TRUE(p.as<pdu::CapsuleResp>().cqe.ok());
    ++completions;
  }
  for (int i = 0; i < kN; ++i) EXPECT_EQ(first_difference(data[i], back[i]), -1) << "block " << i;
}

}  // namespace
}  // namespace sens::testing
