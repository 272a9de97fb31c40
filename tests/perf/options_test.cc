// sens perf option checks (the library half; the CLI is exercised in cli_test.cc), H2CData
// splitting, and the nvme-cli style printers.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "host/print.h"
#include "host/queue.h"
#include "perf/perf.h"

namespace sens::host {
namespace {

PerfOptions good() {
  PerfOptions o;
  o.trid_text = "traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.2024-01.io.x:d0";
  return o;
}

TEST(PerfOptions, DefaultsAreValid) {
  PerfOptions o = good();
  EXPECT_EQ(validate_perf_options(o), "");
  EXPECT_EQ(o.trid.trsvcid, 4420);
  EXPECT_EQ(o.coalesce.policy, coalesce::Policy::kAdaptive);
  EXPECT_EQ(o.poll, PollMode::kAdaptive);
  EXPECT_EQ(o.coalesce.pdus, 16u);
  EXPECT_EQ(o.coalesce.timeout, 50 * kMicro);
  EXPECT_EQ(o.coalesce.ctrl_pdus, 4u);
  EXPECT_EQ(o.coalesce.ctrl_timeout, 10 * kMicro);
  EXPECT_EQ(o.coalesce.bytes, 1024u * 1024);
  EXPECT_EQ(o.coalesce.bytes, sens::ControllerOptions{}.pg_bytes);  // as the host library's
}

TEST(PerfOptions, RejectsWithPreciseErrors) {
  struct Case {
    void (*edit)(PerfOptions&);
    const char* error;
  };
  const Case cases[] = {
      {[](PerfOptions& o) { o.trid_text = ""; },
       "-r TRID is required, e.g. -r 'trtype:tcp traddr:127.0.0.1 trsvcid:4420 subnqn:NQN'"},
      {[](PerfOptions& o) { o.trid_text = "traddr:127.0.0.1"; },
       "-r: subnqn missing (perf needs an NVM subsystem, not the discovery controller)"},
      {[](PerfOptions& o) { o.trid_text = "traddr:x subnqn:nqn.a"; },
       "-r: traddr 'x' is not a numeric ipv4 address"},
      {[](PerfOptions& o) { o.bs = 1000; }, "--bs 1000: must be a non-zero multiple of 512"},
      {[](PerfOptions& o) { o.bs = 32u << 20; }, "--bs 32 MiB: at most 16 MiB"},
      {[](PerfOptions& o) { o.qd = 0; }, "--qd 0: must be 1..4095"},
      {[](PerfOptions& o) { o.queues = 0; }, "--queues 0: must be 1..128"},
      {[](PerfOptions& o) { o.time_s = 0; },
       "--time 0.000000: must be > 0 and at most 86400 seconds"},
      {[](PerfOptions& o) { o.warmup_s = -1; }, "--warmup -1.000000: must be 0..3600 seconds"},
      {[](PerfOptions& o) { o.rwmixread = 101; }, "--rwmixread 101: must be 0..100"},
      {[](PerfOptions& o) { o.rwmixread_given = true; },
       "--rwmixread applies to rw and randrw, not randread"},
      {[](PerfOptions& o) { o.size = 6144; },
       "--size 6 KiB: must be a non-zero multiple of --bs (4 KiB)"},
      {[](PerfOptions& o) { o.coalesce.pdus = 0; }, "--pg-pdus must be >= 1"},
      {[](PerfOptions& o) { o.coalesce.ctrl_pdus = 0; }, "--ctrl-pdus must be >= 1"},
      {[](PerfOptions& o) { o.coalesce.timeout = 2 * kSecond; },
       "--pg-timeout-us must be 0..1000000"},
      {[](PerfOptions& o) { o.io_timeout_ms = 10; }, "--io-timeout must be >= 100 ms"},
      {[](PerfOptions& o) { o.kato_ms = 50; }, "--kato must be 0 (off) or >= 100 ms"},
      {[](PerfOptions& o) {
         o.ctrl_loss_tmo_s = 10;
         o.reconnect_delay_s = 0;
       },
       "--reconnect-delay must be >= 1 s when --ctrl-loss-tmo is set"},
  };
  for (const Case& c : cases) {
    PerfOptions o = good();
    c.edit(o);
    EXPECT_EQ(validate_perf_options(o), c.error);
  }
  PerfOptions o = good();
  o.rw = RwMode::kRandRw;
  o.rwmixread = 70;
  o.rwmixread_given = true;
  EXPECT_EQ(validate_perf_options(o), "");
}

TEST(PerfOptions, RwModes) {
  RwMode m;
  for (const char* name : {"read", "write", "randread", "randwrite", "rw", "randrw"}) {
    ASSERT_TRUE(parse_rw(name, &m)) << name;
    EXPECT_STREQ(rw_name(m), name);
  }
  EXPECT_FALSE(parse_rw("readwrite", &m));
  EXPECT_TRUE(rw_reads(RwMode::kRandRw) && rw_writes(RwMode::kRandRw) &&
              rw_random(RwMode::kRandRw));
  EXPECT_FALSE(rw_writes(RwMode::kRead));
  EXPECT_FALSE(rw_reads(RwMode::kRandWrite));
  EXPECT_FALSE(rw_random(RwMode::kRw));
}

// Walks one R2T the way Queue::issue_h2c does and returns the PDUs.
std::vector<H2CChunk> split(uint32_t r2to, uint32_t r2tl, uint32_t maxh2cdata) {
  std::vector<H2CChunk> out;
  uint32_t issued = r2to;
  for (int guard = 0; guard < 10000; ++guard) {
    H2CChunk c = next_h2c_chunk(issued, r2to + r2tl, maxh2cdata);
    if (c.length == 0) break;
    out.push_back(c);
    issued += c.length;
  }
  return out;
}

TEST(H2CSplit, ExactMultiple) {
  auto v = split(0, 128 * 1024, 32 * 1024);
  ASSERT_EQ(v.size(), 4u);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].offset, i * 32 * 1024);
    EXPECT_EQ(v[i].length, 32u * 1024);
    EXPECT_EQ(v[i].last, i == 3);
  }
}

TEST(H2CSplit, RemainderAndOffsetR2T) {
  auto v = split(8192, 20000, 8192);  // an R2T for the tail of a write
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].offset, 8192u);
  EXPECT_EQ(v[1].offset, 16384u);
  EXPECT_EQ(v[2].offset, 24576u);
  EXPECT_EQ(v[2].length, 20000u - 16384);
  EXPECT_TRUE(v[2].last);
  EXPECT_FALSE(v[1].last);
}

TEST(H2CSplit, SmallerThanMax) {
  auto v = split(0, 4096, 4 << 20);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].length, 4096u);
  EXPECT_TRUE(v[0].last);
  EXPECT_TRUE(split(100, 0, 4096).empty());
  EXPECT_EQ(next_h2c_chunk(0, 4096, 0).length, 0u);  // never loops on a zero limit
}

TEST(Print, DiscoveryLogAsNvmeCli) {
  std::vector<uint8_t> log(1024 + 2 * 1024, 0);
  nvme::DiscoveryLogHeader hdr{};
  hdr.genctr = 5;
  hdr.numrec = 2;
  std::memcpy(log.data(), &hdr, sizeof(hdr));
  nvme::DiscoveryLogEntry e{};
  e.trtype = nvme::kTrtypeTcp;
  e.adrfam = nvme::kAdrfamIpv4;
  e.subtype = nvme::kSubtypeNvme;
  e.treq = nvme::kTreqNotRequired | 0x4;
  e.portid = 7;
  nvme::copy_padded(e.trsvcid, sizeof(e.trsvcid), "4420");
  nvme::copy_padded(e.traddr, sizeof(e.traddr), "10.0.2.15");
  std::strcpy(e.subnqn, "nqn.2024-01.io.linuxvm:export");
  std::memcpy(log.data() + 1024, &e, sizeof(e));
  e.subtype = nvme::kSubtypeCurrentDiscovery;
  e.eflags = 0x2;
  std::memcpy(log.data() + 2048, &e, sizeof(e));
  std::string s = format_discovery_log(log);
  EXPECT_NE(s.find("Discovery Log Number of Records 2, Generation counter 5\n"), std::string::npos);
  EXPECT_NE(s.find("=====Discovery Log Entry 0======\ntrtype:  tcp\nadrfam:  ipv4\n"
                   "subtype: nvme subsystem\n"
                   "treq:    not required, sq flow control disable supported\n"
                   "portid:  7\ntrsvcid: 4420\nsubnqn:  nqn.2024-01.io.linuxvm:export\n"
                   "traddr:  10.0.2.15\neflags:  none\nsectype: none\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("subtype: current discovery subsystem"), std::string::npos);
  EXPECT_NE(s.find("eflags:  explicit discovery connections"), std::string::npos);
}

TEST(Print, IdCtrlFields) {
  auto id = std::make_unique<nvme::IdentifyController>();
  std::memset(id.get(), 0, sizeof(*id));
  id->vid = 0x1b36;
  nvme::copy_padded(id->mn, sizeof(id->mn), "sens");
  std::strcpy(id->subnqn, "nqn.2026-11.io.sens-target:ram0");
  id->ioccsz = 516;
  id->sqes = 0x66;
  id->maxcmd = 128;
  std::string s = format_id_ctrl(*id);
  EXPECT_EQ(s.rfind("NVME Identify Controller:\nvid       : 0x1b36\n", 0), 0u) << s;
  EXPECT_NE(s.find("\nsqes      : 0x66\n"), std::string::npos);
  EXPECT_NE(s.find("\nmaxcmd    : 128\n"), std::string::npos);
  EXPECT_NE(s.find("\nsubnqn    : nqn.2026-11.io.sens-target:ram0\n"), std::string::npos);
  EXPECT_NE(s.find("\nioccsz    : 516\n"), std::string::npos);
  EXPECT_NE(s.find("\nps    0 : mp:0.00W operational"), std::string::npos);
}

}  // namespace
}  // namespace sens::host
