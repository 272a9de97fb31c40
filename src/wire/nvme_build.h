#pragma once
// Builders for the NVMe queue entries that travel in NVMe/TCP capsules: completions for the
// controller side, submission entries for hosts and tools, and status names for logs.
#include <cstdint>
#include <string_view>

#include "wire/nvme.h"

namespace sens::nvme {

// A completion entry. status field = (sct_sc << 1) | (dnr ? 0x8000 : 0); phase bit 0 (NVMe
// over Fabrics does not use it).
Cqe make_cqe(uint16_t cid, uint16_t sqid, uint16_t sqhd, uint16_t status_sct_sc, uint32_t dw0 = 0,
             bool dnr = false);

// A short English name of a status ((SCT << 8) | SC), e.g. "LBA out of range"; never null.
// SCT 1 codes 0x80.. are named after their Fabrics Connect meaning.
const char* status_name(uint16_t sct_sc);

// How a command's data moves; selects the SGL descriptor in SQE bytes 24..39.
enum class Xfer : uint8_t {
  kInCapsule,  // type 0x01 (data block, offset): data follows the SQE in the CapsuleCmd
  kTransport,  // type 0x5A (transport data block): C2HData, or H2CData after an R2T
};

// Sets PSDT = SGL (flags 0x40) and the one SGL descriptor: addr 0, length `len`. A command
// without data gets {kTransport, 0}, as the Linux host sends.
void set_sgl(Sqe& sqe, Xfer xfer, uint32_t len);

// All Sqe builders below return a zeroed entry with PSDT = SGL and its data descriptor set.
// The cid is left 0: the queue assigns it when it submits the command.

// Fabrics Connect (SQE: qid at 42, sqsize at 44, cattr at 46, kato at 48). `sqsize` is
// zero-based; `kato_ms` matters on the admin queue only. The 1024-byte ConnectData goes
// in-capsule (Fabrics commands may always carry 8 KiB).
Sqe make_connect(uint16_t qid, uint16_t sqsize, uint32_t kato_ms, uint8_t cattr = 0);
// Fills the Connect data: hostid, cntlid (0xFFFF on the admin queue = any), NQNs truncated
// to 255 bytes and NUL-padded.
void fill_connect_data(ConnectData& data, const uint8_t (&hostid)[16], uint16_t cntlid,
                       std::string_view subnqn, std::string_view hostnqn);
// Fabrics Disconnect (ends the I/O queue it is sent on).
Sqe make_disconnect();
// Fabrics Property Get/Set: attrib at 40 (0 = 4 bytes, 1 = 8 bytes), offset at 44, value
// at 48. A Property Get's value comes back in CQE dwords 0..1.
Sqe make_property_get(uint32_t offset, bool eight_bytes);
Sqe make_property_set(uint32_t offset, uint64_t value, bool eight_bytes);

// Identify: CNS in cdw10 bits 7:0, CNTID bits 31:16; 4096 bytes come back in C2HData.
Sqe make_identify(uint8_t cns, uint32_t nsid, uint16_t cntid = 0);
// Get Log Page of `numd_bytes` (a non-zero multiple of 4) at byte `offset`: LID in cdw10
// bits 7:0, NUMDL bits 31:16, NUMDU cdw11 bits 15:0 (dwords, zero-based), LPO cdw12/13.
Sqe make_get_log_page(uint8_t lid, uint32_t nsid, uint32_t numd_bytes, uint64_t offset);
// Set Features: FID in cdw10 bits 7:0, SV bit 31; the value in cdw11.
Sqe make_set_features(uint8_t fid, uint32_t cdw11, bool save = false);
// Get Features: FID in cdw10 bits 7:0, SEL bits 10:8 (0 current, 1 default, 2 saved,
// 3 supported capabilities); the value comes back in CQE dword 0.
Sqe make_get_features(uint8_t fid, uint8_t sel = 0);
// Number of Queues (FID 07h) cdw11 / CQE dword 0 encoding: NSQR 15:0, NCQR 31:16, both
// zero-based; the counts here are one-based (>= 1).
uint32_t num_queues_value(uint16_t sq_count, uint16_t cq_count);
Sqe make_set_num_queues(uint16_t sq_count, uint16_t cq_count);
Sqe make_keep_alive();
Sqe make_async_event();

// An I/O command: SLBA in cdw10/11, NLB (zero-based) in cdw12 bits 15:0 from the one-based
// `nlb_count` (0 leaves cdw10..12 zero, for Flush). `data_len` bytes move as `xfer` says;
// Write Zeroes and Flush pass {kTransport, 0}.
Sqe make_io(uint8_t opcode, uint32_t nsid, uint64_t slba, uint32_t nlb_count, Xfer xfer,
            uint32_t data_len);

// Dataset Management range (16 bytes each).
struct __attribute__((packed)) DsmRange {
  uint32_t cattr;
  uint32_t nlb;  // one-based, unlike the SQE's NLB
  uint64_t slba;
};
static_assert(sizeof(DsmRange) == 16);
// Dataset Management with the deallocate attribute (cdw11 bit 2) over `range_count` ranges
// (NR in cdw10 bits 7:0, zero-based; 1..256); range_count * 16 bytes of ranges move as
// `xfer` says.
Sqe make_dsm_deallocate(uint32_t nsid, uint32_t range_count, Xfer xfer);

}  // namespace sens::nvme
