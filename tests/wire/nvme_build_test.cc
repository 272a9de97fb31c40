// Sqe/Cqe builders checked at the byte offsets the NVMe and NVMe-oF specs give, plus the
// layout of the structures peers parse (Identify, discovery, logs).
#include "wire/nvme_build.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "wire/pdu.h"
#include "wire_test_util.h"

namespace sens::nvme {
namespace {

using sens::pdu::testing::rd;

TEST(NvmeStructs, SizesAndOffsets) {
  EXPECT_EQ(sizeof(Sqe), 64u);
  EXPECT_EQ(sizeof(Cqe), 16u);
  EXPECT_EQ(offsetof(Sqe, cid), 2u);
  EXPECT_EQ(offsetof(Sqe, nsid), 4u);
  EXPECT_EQ(offsetof(Sqe, mptr), 16u);
  EXPECT_EQ(offsetof(Sqe, sgl), 24u);
  EXPECT_EQ(offsetof(Sqe, cdw10), 40u);
  EXPECT_EQ(offsetof(Sqe, cdw15), 60u);
  EXPECT_EQ(offsetof(SglDescriptor, length), 8u);
  EXPECT_EQ(offsetof(SglDescriptor, type), 15u);
  EXPECT_EQ(offsetof(Cqe, sqhd), 8u);
  EXPECT_EQ(offsetof(Cqe, sqid), 10u);
  EXPECT_EQ(offsetof(Cqe, cid), 12u);
  EXPECT_EQ(offsetof(Cqe, status), 14u);

  EXPECT_EQ(offsetof(ConnectCmd, fctype), 4u);
  EXPECT_EQ(offsetof(ConnectCmd, sgl), 24u);
  EXPECT_EQ(offsetof(ConnectCmd, recfmt), 40u);
  EXPECT_EQ(offsetof(ConnectCmd, qid), 42u);
  EXPECT_EQ(offsetof(ConnectCmd, sqsize), 44u);
  EXPECT_EQ(offsetof(ConnectCmd, cattr), 46u);
  EXPECT_EQ(offsetof(ConnectCmd, kato), 48u);
  EXPECT_EQ(offsetof(ConnectData, cntlid), 16u);
  EXPECT_EQ(offsetof(ConnectData, subnqn), 256u);
  EXPECT_EQ(offsetof(ConnectData, hostnqn), 512u);
  EXPECT_EQ(offsetof(PropertyCmd, attrib), 40u);
  EXPECT_EQ(offsetof(PropertyCmd, offset), 44u);
  EXPECT_EQ(offsetof(PropertyCmd, value), 48u);

  EXPECT_EQ(sizeof(IdentifyController), 4096u);
  EXPECT_EQ(offsetof(IdentifyController, mdts), 77u);
  EXPECT_EQ(offsetof(IdentifyController, cntlid), 78u);
  EXPECT_EQ(offsetof(IdentifyController, ver), 80u);
  EXPECT_EQ(offsetof(IdentifyController, ctratt), 96u);
  EXPECT_EQ(offsetof(IdentifyController, cntrltype), 111u);
  EXPECT_EQ(offsetof(IdentifyController, oacs), 256u);
  EXPECT_EQ(offsetof(IdentifyController, lpa), 261u);
  EXPECT_EQ(offsetof(IdentifyController, kas), 320u);
  EXPECT_EQ(offsetof(IdentifyController, anacap), 343u);
  EXPECT_EQ(offsetof(IdentifyController, sqes), 512u);
  EXPECT_EQ(offsetof(IdentifyController, maxcmd), 514u);
  EXPECT_EQ(offsetof(IdentifyController, nn), 516u);
  EXPECT_EQ(offsetof(IdentifyController, oncs), 520u);
  EXPECT_EQ(offsetof(IdentifyController, vwc), 525u);
  EXPECT_EQ(offsetof(IdentifyController, sgls), 536u);
  EXPECT_EQ(offsetof(IdentifyController, subnqn), 768u);
  EXPECT_EQ(offsetof(IdentifyController, ioccsz), 1792u);
  EXPECT_EQ(offsetof(IdentifyController, iorcsz), 1796u);
  EXPECT_EQ(offsetof(IdentifyController, icdoff), 1800u);
  EXPECT_EQ(offsetof(IdentifyController, msdbd), 1803u);
  EXPECT_EQ(offsetof(IdentifyController, psd), 2048u);
  EXPECT_EQ(sizeof(IdentifyNamespace), 4096u);
  EXPECT_EQ(offsetof(IdentifyNamespace, nlbaf), 25u);
  EXPECT_EQ(offsetof(IdentifyNamespace, flbas), 26u);
  EXPECT_EQ(offsetof(IdentifyNamespace, anagrpid), 92u);
  EXPECT_EQ(offsetof(IdentifyNamespace, nguid), 104u);
  EXPECT_EQ(offsetof(IdentifyNamespace, eui64), 120u);
  EXPECT_EQ(offsetof(IdentifyNamespace, lbaf), 128u);

  EXPECT_EQ(sizeof(DiscoveryLogHeader), 1024u);
  EXPECT_EQ(offsetof(DiscoveryLogHeader, numrec), 8u);
  EXPECT_EQ(offsetof(DiscoveryLogHeader, recfmt), 16u);
  EXPECT_EQ(sizeof(DiscoveryLogEntry), 1024u);
  EXPECT_EQ(offsetof(DiscoveryLogEntry, portid), 4u);
  EXPECT_EQ(offsetof(DiscoveryLogEntry, cntlid), 6u);
  EXPECT_EQ(offsetof(DiscoveryLogEntry, asqsz), 8u);
  EXPECT_EQ(offsetof(DiscoveryLogEntry, trsvcid), 32u);
  EXPECT_EQ(offsetof(DiscoveryLogEntry, subnqn), 256u);
  EXPECT_EQ(offsetof(DiscoveryLogEntry, traddr), 512u);
  EXPECT_EQ(offsetof(DiscoveryLogEntry, tsas), 768u);

  EXPECT_EQ(offsetof(SmartLog, data_units_read), 32u);
  EXPECT_EQ(offsetof(SmartLog, media_errors), 160u);
  EXPECT_EQ(offsetof(SmartLog, temp_sensor), 200u);
  EXPECT_EQ(offsetof(ErrorLogEntry, status), 12u);
  EXPECT_EQ(offsetof(ErrorLogEntry, nsid), 24u);
  EXPECT_EQ(offsetof(ErrorLogEntry, trtype_spec), 40u);
}

void expect_sgl(const Sqe& sqe, uint8_t type, uint32_t len) {
  EXPECT_EQ(rd<uint8_t>(&sqe, 1) & 0xC0, 0x40) << "PSDT must be SGL";
  EXPECT_EQ(rd<uint64_t>(&sqe, 24), 0u);
  EXPECT_EQ(rd<uint32_t>(&sqe, 32), len);
  EXPECT_EQ(rd<uint8_t>(&sqe, 36), 0);
  EXPECT_EQ(rd<uint16_t>(&sqe, 37), 0);
  EXPECT_EQ(rd<uint8_t>(&sqe, 39), type);
}

TEST(NvmeBuild, Cqe) {
  const Cqe c = make_cqe(0xABCD, 3, 17, status::kLbaOutOfRange, 0xDEADBEEF, true);
  EXPECT_EQ(rd<uint32_t>(&c, 0), 0xDEADBEEFu);
  EXPECT_EQ(rd<uint32_t>(&c, 4), 0u);
  EXPECT_EQ(rd<uint16_t>(&c, 8), 17);
  EXPECT_EQ(rd<uint16_t>(&c, 10), 3);
  EXPECT_EQ(rd<uint16_t>(&c, 12), 0xABCD);
  EXPECT_EQ(rd<uint16_t>(&c, 14), (0x080 << 1) | 0x8000);
  EXPECT_EQ(c.status_code(), status::kLbaOutOfRange);
  EXPECT_TRUE(c.dnr());
  EXPECT_FALSE(c.ok());

  const Cqe ok = make_cqe(1, 0, 2, status::kSuccess);
  EXPECT_EQ(ok.status, 0);
  EXPECT_TRUE(ok.ok());
  EXPECT_FALSE(ok.dnr());
  // Command-specific and media statuses keep SCT in bits 9..11 of the shifted field.
  const Cqe cs = make_cqe(1, 0, 2, status::kConnectInvalidHost);
  EXPECT_EQ(cs.status, 0x184 << 1);
  EXPECT_EQ(cs.status_code(), status::kConnectInvalidHost);
  EXPECT_EQ(make_cqe(1, 0, 2, status::kUnrecoveredReadError).status_code(), 0x281);
}

TEST(NvmeBuild, StatusNames) {
  EXPECT_STREQ(status_name(status::kLbaOutOfRange), "LBA out of range");
  EXPECT_STREQ(status_name(status::kSuccess), "Success");
  EXPECT_STREQ(status_name(status::kInvalidField), "Invalid field in command");
  EXPECT_STREQ(status_name(status::kConnectInvalidHost), "Connect: invalid host");
  EXPECT_STREQ(status_name(status::kUnrecoveredReadError), "Unrecovered read error");
  for (uint16_t s : {status::kSuccess,
                     status::kInvalidOpcode,
                     status::kInvalidField,
                     status::kCidConflict,
                     status::kDataTransferError,
                     status::kInternalError,
                     status::kAbortRequested,
                     status::kSglInvalidCount,
                     status::kSglInvalidDataLength,
                     status::kSglInvalidType,
                     status::kSglInvalidOffset,
                     status::kCmdSeqError,
                     status::kInvalidNamespace,
                     status::kLbaOutOfRange,
                     status::kCapacityExceeded,
                     status::kNsNotReady,
                     status::kInvalidQueueId,
                     status::kInvalidQueueSize,
                     status::kAsyncEventLimit,
                     status::kInvalidLogPage,
                     status::kFeatureNotSaveable,
                     status::kFeatureNotChangeable,
                     status::kConnectIncompatibleFormat,
                     status::kConnectControllerBusy,
                     status::kConnectInvalidParam,
                     status::kConnectRestartDiscovery,
                     status::kConnectInvalidHost,
                     status::kWriteFault,
                     status::kUnrecoveredReadError}) {
    EXPECT_EQ(std::string(status_name(s)).find("Unknown"), std::string::npos) << s;
  }
  EXPECT_STREQ(status_name(0x0FF), "Unknown generic status");
  EXPECT_STREQ(status_name(0x1FF), "Unknown command specific status");
  EXPECT_STREQ(status_name(0x2FF), "Unknown media error");
  EXPECT_STREQ(status_name(0x7C0), "Vendor specific status");
  for (int s = 0; s < 0x800; ++s) EXPECT_NE(status_name(uint16_t(s)), nullptr);
}

TEST(NvmeBuild, Connect) {
  const Sqe sqe = make_connect(3, 127, 15000, kCattrDisableSqFlowControl);
  EXPECT_EQ(rd<uint8_t>(&sqe, 0), 0x7F);
  EXPECT_EQ(rd<uint16_t>(&sqe, 2), 0);  // cid: the queue assigns it
  EXPECT_EQ(rd<uint8_t>(&sqe, 4), 0x01);
  expect_sgl(sqe, 0x01, 1024);
  EXPECT_EQ(rd<uint16_t>(&sqe, 40), 0);
  EXPECT_EQ(rd<uint16_t>(&sqe, 42), 3);
  EXPECT_EQ(rd<uint16_t>(&sqe, 44), 127);
  EXPECT_EQ(rd<uint8_t>(&sqe, 46), 0x04);
  EXPECT_EQ(rd<uint32_t>(&sqe, 48), 15000u);
  for (int i = 52; i < 64; ++i) EXPECT_EQ(rd<uint8_t>(&sqe, i), 0) << i;
  EXPECT_EQ(sqe.fctype(), fctype::kConnect);
}

TEST(NvmeBuild, ConnectData) {
  ConnectData data;
  std::memset(&data, 0xAA, sizeof(data));
  const uint8_t hostid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  fill_connect_data(data, hostid, 0xFFFF, "nqn.2024-01.io.sens:sub", "nqn.host");
  const auto* b = reinterpret_cast<const uint8_t*>(&data);
  EXPECT_EQ(std::memcmp(b, hostid, 16), 0);
  EXPECT_EQ(rd<uint16_t>(b, 16), 0xFFFF);
  EXPECT_STREQ(reinterpret_cast<const char*>(b + 256), "nqn.2024-01.io.sens:sub");
  EXPECT_STREQ(reinterpret_cast<const char*>(b + 512), "nqn.host");
  for (int i = 18; i < 256; ++i) EXPECT_EQ(b[i], 0) << i;
  for (int i = 768; i < 1024; ++i) EXPECT_EQ(b[i], 0) << i;
  // An over-long NQN keeps its terminating NUL.
  fill_connect_data(data, hostid, 1, std::string(400, 'x'), "h");
  EXPECT_EQ(b[256 + 254], 'x');
  EXPECT_EQ(b[256 + 255], 0);
}

TEST(NvmeBuild, Properties) {
  const Sqe get = make_property_get(reg::kCap, true);
  EXPECT_EQ(rd<uint8_t>(&get, 0), 0x7F);
  EXPECT_EQ(rd<uint8_t>(&get, 4), 0x04);
  EXPECT_EQ(rd<uint8_t>(&get, 40), 1);
  EXPECT_EQ(rd<uint32_t>(&get, 44), 0u);
  expect_sgl(get, 0x5A, 0);
  const Sqe set = make_property_set(reg::kCc, 0x00460001, false);
  EXPECT_EQ(rd<uint8_t>(&set, 4), 0x00);
  EXPECT_EQ(rd<uint8_t>(&set, 40), 0);
  EXPECT_EQ(rd<uint32_t>(&set, 44), 0x14u);
  EXPECT_EQ(rd<uint64_t>(&set, 48), 0x00460001u);
  const Sqe disc = make_disconnect();
  EXPECT_EQ(rd<uint8_t>(&disc, 4), 0x08);
}

TEST(NvmeBuild, Identify) {
  const Sqe sqe = make_identify(0x01, 0, 0x1234);
  EXPECT_EQ(rd<uint8_t>(&sqe, 0), 0x06);
  EXPECT_EQ(rd<uint32_t>(&sqe, 4), 0u);
  EXPECT_EQ(rd<uint8_t>(&sqe, 40), 0x01);
  EXPECT_EQ(rd<uint8_t>(&sqe, 41), 0);
  EXPECT_EQ(rd<uint16_t>(&sqe, 42), 0x1234);
  expect_sgl(sqe, 0x5A, 4096);
  const Sqe ns = make_identify(0x00, 7);
  EXPECT_EQ(rd<uint32_t>(&ns, 4), 7u);
  EXPECT_EQ(rd<uint32_t>(&ns, 40), 0u);
}

TEST(NvmeBuild, GetLogPage) {
  const Sqe sqe = make_get_log_page(log_page::kDiscovery, 0, 4096, 0x1'0000'0400ull);
  EXPECT_EQ(rd<uint8_t>(&sqe, 0), 0x02);
  EXPECT_EQ(rd<uint8_t>(&sqe, 40), 0x70);
  EXPECT_EQ(rd<uint16_t>(&sqe, 42), 1023);  // NUMDL
  EXPECT_EQ(rd<uint16_t>(&sqe, 44), 0);     // NUMDU
  EXPECT_EQ(rd<uint32_t>(&sqe, 48), 0x400u);
  EXPECT_EQ(rd<uint32_t>(&sqe, 52), 1u);
  expect_sgl(sqe, 0x5A, 4096);
  // More than 64 Ki dwords spills into NUMDU.
  const Sqe big = make_get_log_page(log_page::kError, 0xFFFFFFFF, 1u << 20, 0);
  EXPECT_EQ(rd<uint32_t>(&big, 4), 0xFFFFFFFFu);
  EXPECT_EQ(rd<uint16_t>(&big, 42), 0xFFFF);
  EXPECT_EQ(rd<uint16_t>(&big, 44), 0x3);
  const Sqe one = make_get_log_page(log_page::kSmart, 0, 4, 0);
  EXPECT_EQ(rd<uint16_t>(&one, 42), 0);
}

TEST(NvmeBuild, Features) {
  const Sqe nq = make_set_num_queues(4, 2);
  EXPECT_EQ(rd<uint8_t>(&nq, 0), 0x09);
  EXPECT_EQ(rd<uint32_t>(&nq, 40), 0x07u);
  EXPECT_EQ(rd<uint16_t>(&nq, 44), 3);  // NSQR
  EXPECT_EQ(rd<uint16_t>(&nq, 46), 1);  // NCQR
  EXPECT_EQ(num_queues_value(1, 1), 0u);
  EXPECT_EQ(num_queues_value(65535, 65535), 0xFFFEFFFEu);
  const Sqe kato = make_set_features(feature::kKeepAliveTimer, 5000, true);
  EXPECT_EQ(rd<uint32_t>(&kato, 40), 0x8000000Fu);
  EXPECT_EQ(rd<uint32_t>(&kato, 44), 5000u);
  const Sqe get = make_get_features(feature::kVolatileWriteCache, 3);
  EXPECT_EQ(rd<uint8_t>(&get, 0), 0x0A);
  EXPECT_EQ(rd<uint32_t>(&get, 40), 0x0306u);
  expect_sgl(get, 0x5A, 0);
  const Sqe ka = make_keep_alive();
  EXPECT_EQ(rd<uint8_t>(&ka, 0), 0x18);
  expect_sgl(ka, 0x5A, 0);
  const Sqe aer = make_async_event();
  EXPECT_EQ(rd<uint8_t>(&aer, 0), 0x0C);
}

TEST(NvmeBuild, Io) {
  const Sqe w = make_io(io_op::kWrite, 1, 0x1'2345'6789ull, 8, Xfer::kInCapsule, 4096);
  EXPECT_EQ(rd<uint8_t>(&w, 0), 0x01);
  EXPECT_EQ(rd<uint32_t>(&w, 4), 1u);
  EXPECT_EQ(rd<uint64_t>(&w, 40), 0x1'2345'6789ull);
  EXPECT_EQ(rd<uint16_t>(&w, 48), 7);
  EXPECT_EQ(rd<uint16_t>(&w, 50), 0);
  expect_sgl(w, 0x01, 4096);
  EXPECT_EQ(w.slba(), 0x1'2345'6789ull);
  EXPECT_EQ(w.nlb(), 8u);
  const Sqe r = make_io(io_op::kRead, 2, 0, 65536, Xfer::kTransport, 1u << 25);
  EXPECT_EQ(rd<uint16_t>(&r, 48), 0xFFFF);
  expect_sgl(r, 0x5A, 1u << 25);
  EXPECT_EQ(r.nlb(), 65536u);
  const Sqe f = make_io(io_op::kFlush, 1, 0, 0, Xfer::kTransport, 0);
  for (int i = 40; i < 64; ++i) EXPECT_EQ(rd<uint8_t>(&f, i), 0) << i;
  expect_sgl(f, 0x5A, 0);
  const Sqe dsm = make_dsm_deallocate(1, 3, Xfer::kInCapsule);
  EXPECT_EQ(rd<uint8_t>(&dsm, 0), 0x09);
  EXPECT_EQ(rd<uint32_t>(&dsm, 40), 2u);
  EXPECT_EQ(rd<uint32_t>(&dsm, 44), 4u);
  expect_sgl(dsm, 0x01, 48);
}

// A host's Connect travels in a CapsuleCmd with its data in-capsule.
TEST(NvmeBuild, ConnectInCapsule) {
  using namespace sens::pdu;
  const Sqe sqe = make_connect(0, 31, 5000);
  HeaderSlot s;
  build_capsule_cmd(s.cmd, sqe, sizeof(ConnectData), {true, true});
  EXPECT_EQ(finish_header(s, {true, true}), 76u);
  EXPECT_TRUE(check_common(s.ch, Receiver::kController, {true, true}, 1u << 20));
  EXPECT_EQ(layout_of(s.ch).data_len, rd<uint32_t>(s.bytes, 8 + 32));
  EXPECT_EQ(rd<uint16_t>(s.bytes, 8 + 42), 0);
  EXPECT_EQ(rd<uint16_t>(s.bytes, 8 + 44), 31);
  EXPECT_EQ(rd<uint32_t>(s.bytes, 8 + 48), 5000u);
}

}  // namespace
}  // namespace sens::nvme
