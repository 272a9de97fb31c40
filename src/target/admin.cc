// The admin command set: Identify, Get Log Page, Set/Get Features, Asynchronous Event Request,
// Keep Alive, Abort.
#include <algorithm>
#include <cstring>

#include "target/command_queue.h"
#include "target/target.h"
#include "wire/nvme_build.h"

namespace sens::target::admin {

namespace st = nvme::status;

namespace {

constexpr uint8_t kLogCommandEffects = 0x05;
constexpr uint8_t kLogAna = 0x0C;
constexpr uint8_t kFeatureHostId = 0x81;
constexpr uint32_t kLogPageMax = 64 * 1024;  // the longest page a host may ask for

// Features a host may set and read back that need no action from this target.
bool settable_feature(uint8_t fid) {
  switch (fid) {
    case nvme::feature::kVolatileWriteCache:
    case nvme::feature::kArbitration:
    case nvme::feature::kPowerMgmt:
    case nvme::feature::kTempThreshold:
    case nvme::feature::kErrorRecovery:
    case nvme::feature::kIrqCoalescing:
    case nvme::feature::kWriteAtomicity:
      return true;
    default:
      return false;
  }
}

uint64_t log_numd(const nvme::Sqe& s) {
  return ((uint64_t(s.cdw11 & 0xFFFF) << 16) | (s.cdw10 >> 16)) + 1;
}
uint64_t log_offset(const nvme::Sqe& s) {
  return uint64_t(s.cdw12) | (uint64_t(s.cdw13) << 32);
}

void identify(CommandQueue& q, Request& r) {
  uint32_t sgl_len = r.sqe.sgl.length;               // (a copy: the SQE is packed)
  uint32_t len = std::min<uint32_t>(sgl_len, 4096);  // a shorter buffer gets the start
  uint8_t cns = uint8_t(r.sqe.cdw10 & 0xFF);
  std::memset(r.buf, 0, 4096);
  const auto& cfg = q.ctx().config;
  Subsystem* sub = q.subsystem();
  switch (cns) {
    case 0x00: {  // namespace
      Namespace* ns = sub->ns(r.sqe.nsid);
      // An inactive nsid the controller could have (1..NN) reads as zeroes (NVMe Base 2.0
      // 5.17.2.1): a host that scans after a removal sees the namespace gone.
      if (!ns && r.sqe.nsid >= 1 && r.sqe.nsid <= kMaxNsid) break;
      if (!ns) return q.complete(r, st::kInvalidNamespace, 0);
      auto& id = *reinterpret_cast<nvme::IdentifyNamespace*>(r.buf);
      id.nsze = id.ncap = id.nuse = ns->blocks;
      id.nlbaf = 0;
      id.flbas = 0;
      id.lbaf[0].lbads = uint8_t(ns->block_shift);
      // DLFEAT: deallocated blocks read as zeroes only where the device guarantees it; Write
      // Zeroes never deallocates in a way a read could tell.
      id.dlfeat = ns->device->discard_zeroes() ? (0x01 | 0x08) : 0x00;
      id.nmic = 1;  // may be attached to several controllers (every gateway, every host)
      id.rescap = resv::kRescap;
      id.anagrpid = ns->anagrpid;
      std::memcpy(id.nguid, ns->nguid, 16);
      std::memcpy(id.eui64, ns->nguid, 8);
      break;
    }
    case 0x01: {  // controller
      auto& id = *reinterpret_cast<nvme::IdentifyController*>(r.buf);
      id.vid = 0x1b36;  // no PCI vendor: the QEMU/Red Hat id that software controllers use
      id.ssvid = 0x1b36;
      nvme::copy_padded(id.sn, sizeof(id.sn), sub->serial);
      nvme::copy_padded(id.mn, sizeof(id.mn), sub->discovery ? "sens discovery" : "sens");
      nvme::copy_padded(id.fr, sizeof(id.fr), "0.1");
      id.rab = 6;
      // Several controllers may share the subsystem's namespaces (bit 1), which report ANA
      // (bit 3): the Linux host then builds one multipath device over every gateway.
      id.cmic = sub->discovery ? 0 : (1u << 1) | (1u << 3);
      id.mdts = uint8_t(__builtin_ctz(cfg.max_io) - 12);  // in units of CAP.MPSMIN (4 KiB)
      id.cntlid = q.controller()->cntlid;
      id.ver = kNvmeVersion;
      // Namespace Attribute and ANA Change notices; a discovery controller: Discovery Log
      // Page Change.
      id.oaes = sub->discovery ? 1u << 31 : (1u << 8) | (1u << 11);
      if (!sub->discovery) {
        id.anatt = 10;  // seconds a group may stay in the change state
        // optimized, non-optimized, inaccessible, persistent loss, change; ANAGRPID may
        // change while attached (namespace_set_ana_group), so bit 6 stays clear
        id.anacap = 0x1F;
        id.anagrpmax = ana::kMaxGroups;
        id.nanagrpid = ana::kMaxGroups;
        id.mnan = kMaxNsid;
      }
      id.cntrltype = sub->discovery ? 2 : 1;
      id.aerl = kAerLimit - 1;
      id.lpa = (1u << 1) | (1u << 2);  // Commands Supported and Effects; extended data
      id.elpe = 0;
      id.kas = kKasUnits;
      id.sqes = 0x66;
      id.cqes = 0x44;
      id.maxcmd = uint16_t(cfg.queue_size);
      id.nn = sub->discovery ? 0 : kMaxNsid;        // namespaces come and go live (live.cc)
      id.oncs = (1u << 2) | (1u << 3) | (1u << 5);  // DSM, Write Zeroes, reservations
      id.vwc = sub->volatile_cache ? 1 : 0;
      id.sgls = (1u << 0) | (1u << 20);  // SGLs; offsets in in-capsule data blocks
      nvme::copy_padded(id.subnqn, sizeof(id.subnqn), sub->nqn, '\0');
      id.ioccsz = (64 + cfg.inline_data) / 16;
      id.iorcsz = 1;
      id.icdoff = 0;
      id.msdbd = 1;
      break;
    }
    case 0x02: {  // active namespace list above nsid
      auto* list = reinterpret_cast<uint32_t*>(r.buf);
      size_t n = 0;
      for (Namespace* ns : sub->active_namespaces())
        if (ns->nsid > r.sqe.nsid && n < 1024) list[n++] = ns->nsid;
      break;
    }
    case 0x03: {  // namespace identification descriptors
      Namespace* ns = sub->ns(r.sqe.nsid);
      if (!ns) return q.complete(r, st::kInvalidNamespace);
      uint8_t* p = r.buf;
      p[0] = nvme::kNidtNguid;
      p[1] = 16;
      std::memcpy(p + 4, ns->nguid, 16);
      p += 20;
      p[0] = nvme::kNidtUuid;
      p[1] = 16;
      std::memcpy(p + 4, ns->uuid, 16);
      p += 20;
      p[0] = nvme::kNidtCsi;
      p[1] = 1;
      p[4] = 0;  // NVM command set
      break;
    }
    default:
      return q.complete(r, st::kInvalidField);
  }
  q.send_data(r, r.buf, len);
}

// Commands Supported and Effects (05h): what the Linux host and nvme-cli check before
// passthrough. CSUPP (bit 0) and LBCC (bit 1, the command changes logical block content).
size_t command_effects(uint8_t* page) {
  auto* acs = reinterpret_cast<uint32_t*>(page);
  auto* iocs = reinterpret_cast<uint32_t*>(page + 1024);
  for (uint8_t op : {nvme::admin_op::kGetLogPage, nvme::admin_op::kIdentify, nvme::admin_op::kAbort,
                     nvme::admin_op::kSetFeatures, nvme::admin_op::kGetFeatures,
                     nvme::admin_op::kAsyncEvent, nvme::admin_op::kKeepAlive})
    acs[op] = 1;
  iocs[nvme::io_op::kFlush] = 1;
  iocs[nvme::io_op::kRead] = 1;
  for (uint8_t op : {nvme::io_op::kWrite, nvme::io_op::kWriteZeroes, nvme::io_op::kDatasetMgmt})
    iocs[op] = 1 | 2;
  for (uint8_t op : {resv::kRegister, resv::kReport, resv::kAcquire, resv::kRelease}) iocs[op] = 1;
  return 4096;
}

// The discovery log: one entry per (listener, subsystem the host may use). numrec counts them
// all even where the host's buffer holds fewer (it reads the header first to learn the size).
size_t discovery_log(CommandQueue& q, uint8_t* page, size_t room) {
  auto& ctx = q.ctx();
  auto& hdr = *reinterpret_cast<nvme::DiscoveryLogHeader*>(page);
  uint64_t n = 0;
  const auto& bound = ctx.target.bound();
  auto add = [&](const std::string& nqn, const Target::Bound& b, uint8_t subtype, uint16_t portid) {
    size_t at = 1024 * (n + 1);
    ++n;
    if (at + 1024 > room) return;
    auto& e = *reinterpret_cast<nvme::DiscoveryLogEntry*>(page + at);
    // A wildcard listener is advertised as the address this host reached.
    std::string addr = is_wildcard(b.host) ? q.local_address() : b.host;
    e.trtype = nvme::kTrtypeTcp;
    e.adrfam = addr.find(':') != std::string::npos ? nvme::kAdrfamIpv6 : nvme::kAdrfamIpv4;
    e.subtype = subtype;
    e.treq = b.tls ? nvme::kTreqRequired : nvme::kTreqNotRequired;
    e.portid = portid;
    e.cntlid = 0xFFFF;
    e.asqsz = uint16_t(ctx.config.queue_size);
    nvme::copy_padded(e.trsvcid, sizeof(e.trsvcid), std::to_string(b.port), ' ');
    nvme::copy_padded(e.subnqn, sizeof(e.subnqn), nqn, '\0');
    nvme::copy_padded(e.traddr, sizeof(e.traddr), addr, ' ');
    e.tsas[0] = b.tls ? nvme::kTcpSectypeTls13 : 0;  // SECTYPE: TLS 1.3, or none
  };
  for (size_t i = 0; i < bound.size(); ++i) {
    if (bound[i].discovery) {
      add(q.subsystem()->nqn, bound[i], nvme::kSubtypeCurrentDiscovery, uint16_t(i + 1));
      continue;
    }
    const std::string& host = q.controller()->hostnqn;
    for (Subsystem* s : ctx.registry.subsystems())
      if (s->host_allowed(host) && (bound[i].tls || !s->tls_required(host)))
        add(s->nqn, bound[i], nvme::kSubtypeNvme, uint16_t(i + 1));
  }
  hdr.genctr = ctx.registry.discovery_generation();
  hdr.numrec = n;
  hdr.recfmt = 0;
  return 1024 * (n + 1);
}

// Asymmetric Namespace Access (0Ch, NVMe Base 2.0 5.16.1.13): a 16-byte header (change
// count, group count), then per ANA group with namespaces one 32-byte descriptor (group id,
// namespace count, change count, state) and, unless RGO, the group's nsids. Only what fits
// in `room` is written; the length returned is the page's whole length.
size_t ana_log(CommandQueue& q, uint8_t* page, size_t room, bool rgo) {
  Subsystem* sub = q.subsystem();
  AnaPort* ana = q.controller()->ana;
  auto put = [&](size_t at, const void* v, size_t n) {
    if (at + n <= room) std::memcpy(page + at, v, n);
  };
  uint64_t chgcnt = ana->change_count();
  put(0, &chgcnt, 8);
  uint16_t groups = 0;
  size_t at = 16;
  auto active = sub->active_namespaces();
  for (uint32_t g = 1; g <= ana::kMaxGroups; ++g) {
    uint32_t n = 0;
    for (Namespace* ns : active) n += ns->anagrpid == g;
    if (n == 0) continue;
    ++groups;
    uint32_t listed = rgo ? 0 : n;
    uint64_t gcnt = ana->group_change_count(g);
    uint8_t state = ana->state(g);
    put(at, &g, 4);
    put(at + 4, &listed, 4);
    put(at + 8, &gcnt, 8);
    put(at + 16, &state, 1);
    at += 32;
    if (rgo) continue;
    for (Namespace* ns : active)
      if (ns->anagrpid == g) {
        put(at, &ns->nsid, 4);
        at += 4;
      }
  }
  put(8, &groups, 2);
  return at;
}

void get_log_page(CommandQueue& q, Request& r) {
  uint8_t lid = uint8_t(r.sqe.cdw10 & 0xFF);
  uint64_t len = log_numd(r.sqe) * 4;
  uint64_t offset = log_offset(r.sqe);
  // The page is built at the front of the buffer, then the asked window moved there.
  size_t room = r.buf_bytes;
  std::memset(r.buf, 0, room);
  size_t page_len = 0;
  Controller& ctrl = *q.controller();
  switch (lid) {
    case nvme::log_page::kError:
      page_len = 64 * 64;
      break;
    case nvme::log_page::kSmart: {
      auto& s = *reinterpret_cast<nvme::SmartLog*>(r.buf);
      s.temperature = 300;
      s.avail_spare = 100;
      s.spare_thresh = 10;
      uint64_t rd, wr, rb, wb;
      ctrl.sum(&rd, &wr, &rb, &wb);
      auto put128 = [](uint8_t* dst, uint64_t v) { std::memcpy(dst, &v, 8); };
      put128(s.data_units_read, rb / 512000);  // units of 1000 x 512 bytes
      put128(s.data_units_written, wb / 512000);
      put128(s.host_reads, rd);
      put128(s.host_writes, wr);
      page_len = sizeof(nvme::SmartLog);
      break;
    }
    case nvme::log_page::kFirmware:
      r.buf[0] = 1;  // active slot 1
      std::memcpy(r.buf + 8, "0.1     ", 8);
      page_len = 512;
      break;
    case nvme::log_page::kChangedNs: {
      // The nsids added, removed or resized since the last read; reading clears the list
      // and (RAE clear) lets the next change be notified.
      page_len = 4096;
      auto changed = ctrl.take_changed_namespaces();
      size_t n = std::min<size_t>(changed.size(), std::min<size_t>(room, page_len) / 4);
      if (n) std::memcpy(r.buf, changed.data(), n * 4);  // (an empty list has no data())
      if (!(r.sqe.cdw10 & (1u << 15)) && ctrl.ns_event_masked.exchange(false)) q.deliver_events();
      break;
    }
    case kLogAna: {
      if (q.subsystem()->discovery) return q.complete(r, st::kInvalidLogPage);
      bool rgo = (r.sqe.cdw10 >> 8) & 1;  // LSP bit 0: return groups only
      page_len = ana_log(q, r.buf, room, rgo);
      // RAE clear: the host has read the change; the next one may be notified.
      if (!(r.sqe.cdw10 & (1u << 15)) && ctrl.ana_event_masked.exchange(false)) q.deliver_events();
      break;
    }
    case kLogCommandEffects:
      if (q.subsystem()->discovery) return q.complete(r, st::kInvalidLogPage);
      page_len = command_effects(r.buf);
      break;
    case nvme::log_page::kDiscovery:
      if (!q.subsystem()->discovery) return q.complete(r, st::kInvalidLogPage);
      page_len = discovery_log(q, r.buf, room);
      if (!(r.sqe.cdw10 & (1u << 15)) && ctrl.disc_event_masked.exchange(false)) q.deliver_events();
      break;
    default:
      return q.complete(r, st::kInvalidLogPage);
  }
  if (offset > page_len || (offset & 3)) return q.complete(r, st::kInvalidField);
  size_t have = std::min(page_len, room) - offset;  // (room >= offset + len: see plan)
  if (offset) std::memmove(r.buf, r.buf + offset, have);
  if (have < len) std::memset(r.buf + have, 0, len - have);
  q.send_data(r, r.buf, uint32_t(len));
}

void set_features(CommandQueue& q, Request& r) {
  uint8_t fid = uint8_t(r.sqe.cdw10 & 0xFF);
  uint32_t v = r.sqe.cdw11;
  Controller& ctrl = *q.controller();
  switch (fid) {
    case nvme::feature::kNumQueues: {
      uint32_t nsq = v & 0xFFFF, ncq = v >> 16;
      if (nsq == 0xFFFF || ncq == 0xFFFF) return q.complete(r, st::kInvalidField);
      uint32_t granted = std::min<uint32_t>(std::min(nsq, ncq), q.ctx().config.max_io_queues - 1);
      ctrl.io_queues_granted = granted + 1;
      return q.complete(r, st::kSuccess, granted | (granted << 16));
    }
    case nvme::feature::kAsyncEventConfig:
      ctrl.async_event_config = v;
      q.complete(r, st::kSuccess);
      return q.deliver_events();  // a change already pending, now enabled
    case kFeatureHostId:          // over Fabrics the host ID is the one of Connect
      return q.complete(r, st::kCmdSeqError);
    case nvme::feature::kKeepAliveTimer:
      ctrl.kato_ms = v;
      q.keep_alive_changed();
      return q.complete(r, st::kSuccess);
    default:  // features with nothing to configure here are accepted and read back as 0
      return q.complete(r, settable_feature(fid) ? st::kSuccess : st::kInvalidField);
  }
}

void get_features(CommandQueue& q, Request& r) {
  uint8_t fid = uint8_t(r.sqe.cdw10 & 0xFF);
  Controller& ctrl = *q.controller();
  switch (fid) {
    case nvme::feature::kNumQueues: {
      uint32_t granted = ctrl.io_queues_granted;
      uint32_t g = (granted ? granted : q.ctx().config.max_io_queues) - 1;
      return q.complete(r, st::kSuccess, g | (g << 16));
    }
    case nvme::feature::kAsyncEventConfig:
      return q.complete(r, st::kSuccess, ctrl.async_event_config);
    case nvme::feature::kKeepAliveTimer:
      return q.complete(r, st::kSuccess, ctrl.kato_ms);
    case nvme::feature::kVolatileWriteCache:
      return q.complete(r, st::kSuccess, q.subsystem()->volatile_cache ? 1 : 0);
    case kFeatureHostId: {
      // 128-bit host identifiers only (EXHID, CDW11 bit 0); 16 bytes of data.
      if (!(r.sqe.cdw11 & 1) || !r.buf) return q.complete(r, st::kInvalidField);
      std::memset(r.buf, 0, 16);
      std::memcpy(r.buf, ctrl.hostid, 16);
      uint32_t sgl_len = r.sqe.sgl.length;
      return q.send_data(r, r.buf, std::min<uint32_t>(sgl_len, 16));
    }
    default:
      return q.complete(r, settable_feature(fid) ? st::kSuccess : st::kInvalidField, 0);
  }
}

}  // namespace

Plan plan(CommandQueue& q, Request& r) {
  Plan p;
  const nvme::Sqe& s = r.sqe;
  // Before CC.EN = 1 (and after a reset) a controller runs no admin commands.
  if (!(q.controller()->cc & 1)) {
    p.status = st::kCmdSeqError;
    return p;
  }
  switch (s.opcode) {
    case nvme::admin_op::kIdentify:
      if (s.sgl.type != nvme::kSglTransportDataBlock)
        p.status = st::kSglInvalidType;
      else if (s.sgl.length == 0)
        p.status = st::kSglInvalidDataLength;  // a data PDU needs data
      else
        p.buffer_bytes = 4096;
      return p;
    case nvme::admin_op::kGetLogPage: {
      uint64_t len = log_numd(s) * 4, offset = log_offset(s);
      if (s.sgl.type != nvme::kSglTransportDataBlock)
        p.status = st::kSglInvalidType;
      else if (len != s.sgl.length)
        p.status = st::kSglInvalidDataLength;
      else if (len > kLogPageMax || offset > kLogPageMax || offset + len > kLogPageMax)
        p.status = st::kInvalidField;  // the page is built in one buffer of offset + len
      else
        p.buffer_bytes = uint32_t(std::max<uint64_t>(offset + len, 4096));
      return p;
    }
    case nvme::admin_op::kGetFeatures:
      if ((s.cdw10 & 0xFF) == kFeatureHostId) {
        if (s.sgl.type != nvme::kSglTransportDataBlock)
          p.status = st::kSglInvalidType;
        else if (s.sgl.length < 16 || s.sgl.length > 4096)
          p.status = st::kSglInvalidDataLength;
        else
          p.buffer_bytes = 4096;
      }
      return p;
    case nvme::admin_op::kSetFeatures:
    case nvme::admin_op::kAsyncEvent:
    case nvme::admin_op::kKeepAlive:
    case nvme::admin_op::kAbort:
      return p;
    default:
      p.status = st::kInvalidOpcode;
      return p;
  }
}

void execute(CommandQueue& q, Request& r) {
  switch (r.sqe.opcode) {
    case nvme::admin_op::kIdentify:
      return identify(q, r);
    case nvme::admin_op::kGetLogPage:
      return get_log_page(q, r);
    case nvme::admin_op::kSetFeatures:
      return set_features(q, r);
    case nvme::admin_op::kGetFeatures:
      return get_features(q, r);
    case nvme::admin_op::kAsyncEvent:
      if (!q.park_aer(r)) q.complete(r, st::kAsyncEventLimit);
      return;
    case nvme::admin_op::kKeepAlive:
      return q.complete(r, st::kSuccess);
    case nvme::admin_op::kAbort:
      return q.complete(r, st::kSuccess, 1);  // bit 0: the command was not aborted
    default:
      return q.complete(r, st::kInvalidOpcode);
  }
}

}  // namespace sens::target::admin
