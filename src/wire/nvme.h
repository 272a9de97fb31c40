#pragma once
// NVMe command set structures as they travel in NVMe/TCP capsules (NVMe 1.4 / NVMe-oF 1.1).
// All multi-byte fields are little-endian; this project builds for little-endian hosts only.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

static_assert(std::endian::native == std::endian::little, "NVMe wire structs assume little-endian");

namespace sens::nvme {

// ---- opcodes ----
namespace admin_op {
inline constexpr uint8_t kGetLogPage = 0x02, kIdentify = 0x06, kAbort = 0x08, kSetFeatures = 0x09,
                         kGetFeatures = 0x0A, kAsyncEvent = 0x0C, kKeepAlive = 0x18;
}
namespace io_op {
inline constexpr uint8_t kFlush = 0x00, kWrite = 0x01, kRead = 0x02, kWriteZeroes = 0x08,
                         kDatasetMgmt = 0x09;
}
inline constexpr uint8_t kFabricsOpcode = 0x7F;
namespace fctype {
inline constexpr uint8_t kPropertySet = 0x00, kConnect = 0x01, kPropertyGet = 0x04,
                         kAuthSend = 0x05, kAuthReceive = 0x06, kDisconnect = 0x08;
}

// ---- status: (SCT << 8) | SC, as stored in CQE status bits 1..11 ----
namespace status {
inline constexpr uint16_t kSuccess = 0x000, kInvalidOpcode = 0x001, kInvalidField = 0x002,
                          kCidConflict = 0x003, kDataTransferError = 0x004, kInternalError = 0x006,
                          kAbortRequested = 0x007, kSglInvalidCount = 0x00E,
                          kSglInvalidDataLength = 0x00F, kSglInvalidType = 0x011,
                          kSglInvalidOffset = 0x016, kCmdSeqError = 0x00C,
                          kInvalidNamespace = 0x00B, kLbaOutOfRange = 0x080,
                          kCapacityExceeded = 0x081, kNsNotReady = 0x082;
// command specific (SCT 1)
inline constexpr uint16_t kInvalidQueueId = 0x101, kInvalidQueueSize = 0x102,
                          kAsyncEventLimit = 0x105, kInvalidLogPage = 0x109,
                          kFeatureNotSaveable = 0x10D, kFeatureNotChangeable = 0x10E;
// fabrics command specific (SCT 1)
inline constexpr uint16_t kConnectIncompatibleFormat = 0x180, kConnectControllerBusy = 0x181,
                          kConnectInvalidParam = 0x182, kConnectRestartDiscovery = 0x183,
                          kConnectInvalidHost = 0x184, kAuthRequired = 0x191;
// media errors (SCT 2)
inline constexpr uint16_t kWriteFault = 0x280, kUnrecoveredReadError = 0x281;
inline constexpr uint16_t kDnr = 0x4000;  // do-not-retry, in the (status << 1) field
}  // namespace status

// SGL descriptor types as NVMe/TCP uses them: (type << 4) | subtype.
inline constexpr uint8_t kSglDataBlockOffset = 0x01;     // in-capsule data
inline constexpr uint8_t kSglTransportDataBlock = 0x5A;  // data via R2T/H2CData or C2HData
inline constexpr uint8_t kPsdtSgl = 0x40;                // SQE flags bits 7:6 = 01b

struct __attribute__((packed)) SglDescriptor {
  uint64_t addr;
  uint32_t length;
  uint8_t rsvd[3];
  uint8_t type;
};
static_assert(sizeof(SglDescriptor) == 16);

// 64-byte submission queue entry. cdw10..15 are overlaid by the command-specific views below.
struct __attribute__((packed)) Sqe {
  uint8_t opcode;
  uint8_t flags;
  uint16_t cid;
  uint32_t nsid;  // for Fabrics commands byte 4 is fctype
  uint32_t cdw2, cdw3;
  uint64_t mptr;
  SglDescriptor sgl;
  uint32_t cdw10, cdw11, cdw12, cdw13, cdw14, cdw15;

  uint8_t fctype() const { return static_cast<uint8_t>(nsid & 0xFF); }
  // I/O commands: SLBA at 40, NLB (zero-based) at 48.
  uint64_t slba() const { return uint64_t(cdw10) | (uint64_t(cdw11) << 32); }
  uint32_t nlb() const { return (cdw12 & 0xFFFF) + 1; }
  bool fua() const { return cdw12 & (1u << 30); }
};
static_assert(sizeof(Sqe) == 64);

// Fabrics Connect as laid over an Sqe.
struct __attribute__((packed)) ConnectCmd {
  uint8_t opcode, rsvd1;
  uint16_t cid;
  uint8_t fctype, rsvd2[19];
  SglDescriptor sgl;
  uint16_t recfmt, qid, sqsize;
  uint8_t cattr, rsvd3;
  uint32_t kato;
  uint8_t rsvd4[12];
};
static_assert(sizeof(ConnectCmd) == 64);
inline constexpr uint8_t kCattrDisableSqFlowControl = 0x04;

struct __attribute__((packed)) ConnectData {
  uint8_t hostid[16];
  uint16_t cntlid;
  uint8_t rsvd1[238];
  char subnqn[256];
  char hostnqn[256];
  uint8_t rsvd2[256];
};
static_assert(sizeof(ConnectData) == 1024);

// Property Get/Set over an Sqe.
struct __attribute__((packed)) PropertyCmd {
  uint8_t opcode, rsvd1;
  uint16_t cid;
  uint8_t fctype, rsvd2[35];
  uint8_t attrib, rsvd3[3];
  uint32_t offset;
  uint64_t value;
  uint8_t rsvd4[8];
};
static_assert(sizeof(PropertyCmd) == 64);

namespace reg {
inline constexpr uint32_t kCap = 0x00, kVs = 0x08, kCc = 0x14, kCsts = 0x1C;
}

// 16-byte completion queue entry.
struct __attribute__((packed)) Cqe {
  uint32_t dw0;
  uint32_t dw1;
  uint16_t sqhd;
  uint16_t sqid;
  uint16_t cid;
  uint16_t status;  // bit 0 phase, bits 1..15 status field

  uint16_t status_code() const { return static_cast<uint16_t>((status >> 1) & 0x7FF); }
  bool dnr() const { return status & 0x8000; }
  bool ok() const { return status_code() == 0; }
};
static_assert(sizeof(Cqe) == 16);

// Fills `dst` (n bytes) with `s`, padded with spaces (Identify text fields).
inline void copy_padded(char* dst, size_t n, std::string_view s, char pad = ' ') {
  std::memset(dst, pad, n);
  std::memcpy(dst, s.data(), s.size() < n ? s.size() : n);
}
// Reads a NUL-terminated (or full-length) fixed-size string field.
inline std::string_view fixed_string(const char* src, size_t n) {
  size_t len = 0;
  while (len < n && src[len] != '\0') ++len;
  return {src, len};
}

// Identify Controller (CNS 01h), 4096 bytes.
struct __attribute__((packed)) IdentifyController {
  uint16_t vid, ssvid;
  char sn[20], mn[40], fr[8];
  uint8_t rab, ieee[3], cmic, mdts;
  uint16_t cntlid;
  uint32_t ver, rtd3r, rtd3e, oaes, ctratt;
  uint16_t rrls;
  uint8_t rsvd102[9], cntrltype, fguid[16];
  uint16_t crdt1, crdt2, crdt3;
  uint8_t rsvd134[119], nvmsr, vwci, mec;
  uint16_t oacs;
  uint8_t acl, aerl, frmw, lpa, elpe, npss, avscc, apsta;
  uint16_t wctemp, cctemp, mtfa;
  uint32_t hmpre, hmmin;
  uint8_t tnvmcap[16], unvmcap[16];
  uint32_t rpmbs;
  uint16_t edstt;
  uint8_t dsto, fwug;
  uint16_t kas, hctma, mntmt, mxtmt;
  uint32_t sanicap, hmminds;
  uint16_t hmmaxd, nsetidmax, endgidmax;
  uint8_t anatt, anacap;
  uint32_t anagrpmax, nanagrpid, pels;
  uint8_t rsvd356[156];
  uint8_t sqes, cqes;
  uint16_t maxcmd;
  uint32_t nn;
  uint16_t oncs, fuses;
  uint8_t fna, vwc;
  uint16_t awun, awupf;
  uint8_t icsvscc, nwpc;
  uint16_t acwu, ocfs;
  uint32_t sgls, mnan;
  uint8_t rsvd544[224];
  char subnqn[256];
  uint8_t rsvd1024[768];
  uint32_t ioccsz, iorcsz;
  uint16_t icdoff;
  uint8_t fcatt, msdbd;
  uint16_t ofcs;
  uint8_t rsvd1806[242];
  uint8_t psd[32][32];
  uint8_t vs[1024];
};
static_assert(sizeof(IdentifyController) == 4096);
static_assert(offsetof(IdentifyController, kas) == 320);
static_assert(offsetof(IdentifyController, sqes) == 512);
static_assert(offsetof(IdentifyController, sgls) == 536);
static_assert(offsetof(IdentifyController, subnqn) == 768);
static_assert(offsetof(IdentifyController, ioccsz) == 1792);

struct __attribute__((packed)) LbaFormat {
  uint16_t ms;
  uint8_t lbads;  // log2 of the LBA data size
  uint8_t rp;
};

// Identify Namespace (CNS 00h), 4096 bytes.
struct __attribute__((packed)) IdentifyNamespace {
  uint64_t nsze, ncap, nuse;
  uint8_t nsfeat, nlbaf, flbas, mc, dpc, dps, nmic, rescap, fpi, dlfeat;
  uint16_t nawun, nawupf, nacwu, nabsn, nabo, nabspf, noiob;
  uint8_t nvmcap[16];
  uint16_t npwg, npwa, npdg, npda, nows;
  uint8_t rsvd74[18];
  uint32_t anagrpid;
  uint8_t rsvd96[3], nsattr;
  uint16_t nvmsetid, endgid;
  uint8_t nguid[16], eui64[8];
  LbaFormat lbaf[16];
  uint8_t rsvd192[192];
  uint8_t vs[3712];
};
static_assert(sizeof(IdentifyNamespace) == 4096);
static_assert(offsetof(IdentifyNamespace, nguid) == 104);
static_assert(offsetof(IdentifyNamespace, lbaf) == 128);

// Namespace Identification Descriptor types (CNS 03h).
inline constexpr uint8_t kNidtEui64 = 1, kNidtNguid = 2, kNidtUuid = 3, kNidtCsi = 4;

// Log pages.
namespace log_page {
inline constexpr uint8_t kError = 0x01, kSmart = 0x02, kFirmware = 0x03, kChangedNs = 0x04,
                         kDiscovery = 0x70;
}

struct __attribute__((packed)) SmartLog {
  uint8_t critical_warning;
  uint16_t temperature;  // Kelvin
  uint8_t avail_spare, spare_thresh, percent_used, endu_grp_crit;
  uint8_t rsvd7[25];
  uint8_t data_units_read[16], data_units_written[16], host_reads[16], host_writes[16];
  uint8_t ctrl_busy_time[16], power_cycles[16], power_on_hours[16], unsafe_shutdowns[16];
  uint8_t media_errors[16], num_err_log_entries[16];
  uint32_t warning_temp_time, critical_comp_time;
  uint16_t temp_sensor[8];
  uint8_t rsvd216[296];
};
static_assert(sizeof(SmartLog) == 512);

struct __attribute__((packed)) ErrorLogEntry {
  uint64_t error_count;
  uint16_t sqid, cid, status, param_error_location;
  uint64_t lba;
  uint32_t nsid;
  uint8_t vs, trtype, rsvd30[2];
  uint64_t cs;
  uint16_t trtype_spec;
  uint8_t rsvd42[22];
};
static_assert(sizeof(ErrorLogEntry) == 64);

// Discovery log page (LID 70h).
struct __attribute__((packed)) DiscoveryLogHeader {
  uint64_t genctr, numrec;
  uint16_t recfmt;
  uint8_t rsvd[1006];
};
static_assert(sizeof(DiscoveryLogHeader) == 1024);

inline constexpr uint8_t kTrtypeTcp = 3;
inline constexpr uint8_t kAdrfamIpv4 = 1, kAdrfamIpv6 = 2;
inline constexpr uint8_t kSubtypeReferral = 1, kSubtypeNvme = 2, kSubtypeCurrentDiscovery = 3;
inline constexpr uint8_t kTreqRequired = 0x01;     // secure channel required
inline constexpr uint8_t kTreqNotRequired = 0x02;  // secure channel not required
inline constexpr uint8_t kTcpSectypeTls13 = 0x02;  // TSAS byte 0 (SECTYPE) for TLS 1.3

struct __attribute__((packed)) DiscoveryLogEntry {
  uint8_t trtype, adrfam, subtype, treq;
  uint16_t portid, cntlid, asqsz, eflags;
  uint8_t rsvd12[20];
  char trsvcid[32];
  uint8_t rsvd64[192];
  char subnqn[256];
  char traddr[256];
  uint8_t tsas[256];  // for TCP, byte 0 is sectype (0 none)
};
static_assert(sizeof(DiscoveryLogEntry) == 1024);

// Feature identifiers.
namespace feature {
inline constexpr uint8_t kArbitration = 0x01, kPowerMgmt = 0x02, kTempThreshold = 0x04,
                         kErrorRecovery = 0x05, kVolatileWriteCache = 0x06, kNumQueues = 0x07,
                         kIrqCoalescing = 0x08, kWriteAtomicity = 0x0A, kAsyncEventConfig = 0x0B,
                         kKeepAliveTimer = 0x0F;
}

inline constexpr std::string_view kDiscoveryNqn = "nqn.2014-08.org.nvmexpress.discovery";

}  // namespace sens::nvme
