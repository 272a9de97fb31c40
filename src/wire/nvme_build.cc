#include "wire/nvme_build.h"

#include "wire/nvme_auth.h"

#include <algorithm>
#include <cstring>

namespace sens::nvme {

Cqe make_cqe(uint16_t cid, uint16_t sqid, uint16_t sqhd, uint16_t status_sct_sc, uint32_t dw0,
             bool dnr) {
  Cqe cqe{};
  cqe.dw0 = dw0;
  cqe.sqhd = sqhd;
  cqe.sqid = sqid;
  cqe.cid = cid;
  cqe.status = static_cast<uint16_t>((status_sct_sc << 1) | (dnr ? 0x8000 : 0));
  return cqe;
}

const char* status_name(uint16_t sct_sc) {
  const uint8_t sct = (sct_sc >> 8) & 0x7;
  const uint8_t sc = sct_sc & 0xFF;
  switch (sct) {
    case 0:
      switch (sc) {
        case 0x00:
          return "Success";
        case 0x01:
          return "Invalid command opcode";
        case 0x02:
          return "Invalid field in command";
        case 0x03:
          return "Command ID conflict";
        case 0x04:
          return "Data transfer error";
        case 0x05:
          return "Aborted: power loss notification";
        case 0x06:
          return "Internal error";
        case 0x07:
          return "Command abort requested";
        case 0x08:
          return "Aborted: SQ deletion";
        case 0x09:
          return "Aborted: failed fused command";
        case 0x0A:
          return "Aborted: missing fused command";
        case 0x0B:
          return "Invalid namespace or format";
        case 0x0C:
          return "Command sequence error";
        case 0x0D:
          return "Invalid SGL segment descriptor";
        case 0x0E:
          return "Invalid number of SGL descriptors";
        case 0x0F:
          return "Data SGL length invalid";
        case 0x10:
          return "Metadata SGL length invalid";
        case 0x11:
          return "SGL descriptor type invalid";
        case 0x12:
          return "Invalid use of controller memory buffer";
        case 0x13:
          return "PRP offset invalid";
        case 0x14:
          return "Atomic write unit exceeded";
        case 0x15:
          return "Operation denied";
        case 0x16:
          return "SGL offset invalid";
        case 0x18:
          return "Host identifier inconsistent format";
        case 0x19:
          return "Keep alive timer expired";
        case 0x1A:
          return "Keep alive timeout invalid";
        case 0x1B:
          return "Aborted: preempt and abort";
        case 0x1C:
          return "Sanitize failed";
        case 0x1D:
          return "Sanitize in progress";
        case 0x1E:
          return "SGL data block granularity invalid";
        case 0x20:
          return "Namespace is write protected";
        case 0x21:
          return "Command interrupted";
        case 0x22:
          return "Transient transport error";
        case 0x80:
          return "LBA out of range";
        case 0x81:
          return "Capacity exceeded";
        case 0x82:
          return "Namespace not ready";
        case 0x83:
          return "Reservation conflict";
        case 0x84:
          return "Format in progress";
        default:
          return "Unknown generic status";
      }
    case 1:
      switch (sc) {
        case 0x00:
          return "Completion queue invalid";
        case 0x01:
          return "Invalid queue identifier";
        case 0x02:
          return "Invalid queue size";
        case 0x03:
          return "Abort command limit exceeded";
        case 0x05:
          return "Asynchronous event request limit exceeded";
        case 0x06:
          return "Invalid firmware slot";
        case 0x07:
          return "Invalid firmware image";
        case 0x08:
          return "Invalid interrupt vector";
        case 0x09:
          return "Invalid log page";
        case 0x0A:
          return "Invalid format";
        case 0x0D:
          return "Feature identifier not saveable";
        case 0x0E:
          return "Feature not changeable";
        case 0x0F:
          return "Feature not namespace specific";
        // 0x80.. depend on the command; these are the Fabrics Connect meanings.
        case 0x80:
          return "Connect: incompatible format";
        case 0x81:
          return "Connect: controller busy";
        case 0x82:
          return "Connect: invalid parameters";
        case 0x83:
          return "Connect: restart discovery";
        case 0x84:
          return "Connect: invalid host";
        case 0x90:
          return "Discovery restart";
        case 0x91:
          return "Authentication required";
        default:
          return "Unknown command specific status";
      }
    case 2:
      switch (sc) {
        case 0x80:
          return "Write fault";
        case 0x81:
          return "Unrecovered read error";
        case 0x82:
          return "End-to-end guard check error";
        case 0x83:
          return "End-to-end application tag check error";
        case 0x84:
          return "End-to-end reference tag check error";
        case 0x85:
          return "Compare failure";
        case 0x86:
          return "Access denied";
        case 0x87:
          return "Deallocated or unwritten logical block";
        default:
          return "Unknown media error";
      }
    case 3:
      switch (sc) {
        case 0x00:
          return "Internal path error";
        case 0x01:
          return "Asymmetric access persistent loss";
        case 0x02:
          return "Asymmetric access inaccessible";
        case 0x03:
          return "Asymmetric access transition";
        case 0x60:
          return "Controller pathing error";
        case 0x70:
          return "Host pathing error";
        case 0x71:
          return "Command aborted by host";
        default:
          return "Unknown path related status";
      }
    case 7:
      return "Vendor specific status";
    default:
      return "Reserved status code type";
  }
}

void set_sgl(Sqe& sqe, Xfer xfer, uint32_t len) {
  sqe.flags = static_cast<uint8_t>((sqe.flags & ~0xC0) | kPsdtSgl);
  std::memset(&sqe.sgl, 0, sizeof(sqe.sgl));
  sqe.sgl.addr = 0;  // in-capsule: offset 0 behind the SQE (ICDOFF is 0 on TCP)
  sqe.sgl.length = len;
  sqe.sgl.type = xfer == Xfer::kInCapsule ? kSglDataBlockOffset : kSglTransportDataBlock;
}

namespace {

Sqe base(uint8_t opcode, Xfer xfer = Xfer::kTransport, uint32_t len = 0) {
  Sqe sqe;
  std::memset(&sqe, 0, sizeof(sqe));
  sqe.opcode = opcode;
  set_sgl(sqe, xfer, len);
  return sqe;
}

// Fabrics commands keep fctype in byte 4, where other commands have nsid.
Sqe fabrics(uint8_t fctype, Xfer xfer = Xfer::kTransport, uint32_t len = 0) {
  Sqe sqe = base(kFabricsOpcode, xfer, len);
  sqe.nsid = fctype;
  return sqe;
}

// Command-specific views (ConnectCmd, PropertyCmd) are edited on a copy: casting an Sqe&
// to another struct type would break strict aliasing.
template <class View>
View view_of(const Sqe& sqe) {
  static_assert(sizeof(View) == sizeof(Sqe));
  View v;
  std::memcpy(&v, &sqe, sizeof(v));
  return v;
}
template <class View>
Sqe sqe_of(const View& v) {
  Sqe sqe;
  std::memcpy(&sqe, &v, sizeof(sqe));
  return sqe;
}

}  // namespace

Sqe make_connect(uint16_t qid, uint16_t sqsize, uint32_t kato_ms, uint8_t cattr) {
  auto c = view_of<ConnectCmd>(fabrics(fctype::kConnect, Xfer::kInCapsule, sizeof(ConnectData)));
  c.recfmt = 0;
  c.qid = qid;
  c.sqsize = sqsize;
  c.cattr = cattr;
  c.kato = kato_ms;
  return sqe_of(c);
}

void fill_connect_data(ConnectData& data, const uint8_t (&hostid)[16], uint16_t cntlid,
                       std::string_view subnqn, std::string_view hostnqn) {
  std::memset(&data, 0, sizeof(data));
  std::memcpy(data.hostid, hostid, sizeof(data.hostid));
  data.cntlid = cntlid;
  // Leave at least one NUL: peers read these as C strings.
  std::memcpy(data.subnqn, subnqn.data(), std::min(subnqn.size(), sizeof(data.subnqn) - 1));
  std::memcpy(data.hostnqn, hostnqn.data(), std::min(hostnqn.size(), sizeof(data.hostnqn) - 1));
}

namespace auth {

const char* failure_name(uint8_t explanation) {
  switch (explanation) {
    case kFailFailed:
      return "authentication failed";
    case kFailNotUsable:
      return "authentication protocol not usable";
    case kFailConcatMismatch:
      return "secure channel concatenation mismatch";
    case kFailHashUnusable:
      return "hash function not usable";
    case kFailDhgroupUnusable:
      return "DH group not usable";
    case kFailIncorrectPayload:
      return "incorrect payload";
    case kFailIncorrectMessage:
      return "incorrect protocol message";
    default:
      return "unknown failure";
  }
}

Sqe make_auth_send(uint32_t tl, Xfer xfer) {
  Sqe sqe = fabrics(fctype::kAuthSend, xfer, tl);
  sqe.cdw10 = (uint32_t(kSpsp) << 8) | (uint32_t(kSpsp) << 16) | (uint32_t(kSecpDhchap) << 24);
  sqe.cdw11 = tl;
  return sqe;
}

Sqe make_auth_receive(uint32_t al) {
  Sqe sqe = fabrics(fctype::kAuthReceive, Xfer::kTransport, al);
  sqe.cdw10 = (uint32_t(kSpsp) << 8) | (uint32_t(kSpsp) << 16) | (uint32_t(kSecpDhchap) << 24);
  sqe.cdw11 = al;
  return sqe;
}

}  // namespace auth

Sqe make_disconnect() {
  return fabrics(fctype::kDisconnect);
}

Sqe make_property_get(uint32_t offset, bool eight_bytes) {
  auto p = view_of<PropertyCmd>(fabrics(fctype::kPropertyGet));
  p.attrib = eight_bytes ? 1 : 0;
  p.offset = offset;
  return sqe_of(p);
}

Sqe make_property_set(uint32_t offset, uint64_t value, bool eight_bytes) {
  auto p = view_of<PropertyCmd>(fabrics(fctype::kPropertySet));
  p.attrib = eight_bytes ? 1 : 0;
  p.offset = offset;
  p.value = value;
  return sqe_of(p);
}

Sqe make_identify(uint8_t cns, uint32_t nsid, uint16_t cntid) {
  Sqe sqe = base(admin_op::kIdentify, Xfer::kTransport, 4096);
  sqe.nsid = nsid;
  sqe.cdw10 = uint32_t(cns) | (uint32_t(cntid) << 16);
  return sqe;
}

Sqe make_get_log_page(uint8_t lid, uint32_t nsid, uint32_t numd_bytes, uint64_t offset) {
  Sqe sqe = base(admin_op::kGetLogPage, Xfer::kTransport, numd_bytes);
  sqe.nsid = nsid;
  const uint32_t numd = numd_bytes / 4 - 1;  // dwords, zero-based
  sqe.cdw10 = uint32_t(lid) | ((numd & 0xFFFF) << 16);
  sqe.cdw11 = numd >> 16;
  sqe.cdw12 = static_cast<uint32_t>(offset);
  sqe.cdw13 = static_cast<uint32_t>(offset >> 32);
  return sqe;
}

Sqe make_set_features(uint8_t fid, uint32_t cdw11, bool save) {
  Sqe sqe = base(admin_op::kSetFeatures);
  sqe.cdw10 = uint32_t(fid) | (save ? 1u << 31 : 0);
  sqe.cdw11 = cdw11;
  return sqe;
}

Sqe make_get_features(uint8_t fid, uint8_t sel) {
  Sqe sqe = base(admin_op::kGetFeatures);
  sqe.cdw10 = uint32_t(fid) | (uint32_t(sel & 0x7) << 8);
  return sqe;
}

uint32_t num_queues_value(uint16_t sq_count, uint16_t cq_count) {
  return uint32_t(uint16_t(sq_count - 1)) | (uint32_t(uint16_t(cq_count - 1)) << 16);
}

Sqe make_set_num_queues(uint16_t sq_count, uint16_t cq_count) {
  return make_set_features(feature::kNumQueues, num_queues_value(sq_count, cq_count));
}

Sqe make_keep_alive() {
  return base(admin_op::kKeepAlive);
}

Sqe make_async_event() {
  return base(admin_op::kAsyncEvent);
}

Sqe make_io(uint8_t opcode, uint32_t nsid, uint64_t slba, uint32_t nlb_count, Xfer xfer,
            uint32_t data_len) {
  Sqe sqe = base(opcode, xfer, data_len);
  sqe.nsid = nsid;
  if (nlb_count > 0) {
    sqe.cdw10 = static_cast<uint32_t>(slba);
    sqe.cdw11 = static_cast<uint32_t>(slba >> 32);
    sqe.cdw12 = (nlb_count - 1) & 0xFFFF;
  }
  return sqe;
}

Sqe make_dsm_deallocate(uint32_t nsid, uint32_t range_count, Xfer xfer) {
  Sqe sqe = base(io_op::kDatasetMgmt, xfer, range_count * uint32_t(sizeof(DsmRange)));
  sqe.nsid = nsid;
  sqe.cdw10 = (range_count - 1) & 0xFF;
  sqe.cdw11 = 1u << 2;  // AD: deallocate
  return sqe;
}

}  // namespace sens::nvme
