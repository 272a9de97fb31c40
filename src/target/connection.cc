#include "target/connection.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "coalesce/stats_json.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "target/target.h"
#include "wire/nvme_build.h"

namespace sens::target {

namespace st = nvme::status;
using coalesce::FlushReason;
using coalesce::PduClass;

namespace {
constexpr uint32_t kAdminInline = 8192;        // admin and Fabrics capsules (Connect's 1024 bytes)
constexpr uint32_t kAerLimit = 4;              // AERL + 1
constexpr Nanos kSetupTimeout = 10 * kSecond;  // ICReq + Connect must arrive by then
constexpr uint32_t kVersion = 0x00010300;      // NVMe 1.3
constexpr Nanos kCloseTimeout = 2 * kSecond;   // a TermReq the peer never reads
// Keep Alive Timer granularity (Identify KAS, in 100 ms units): a host is dropped once no
// admin command arrived for kato plus one granule, so a host that sends Keep Alive at
// exactly kato (as older Linux hosts do) is not dropped by a race.
constexpr uint16_t kKasUnits = 10;
constexpr Nanos kKeepAliveGrace = kKasUnits * 100 * kMilli;
constexpr size_t kRecvBudget = 256 * 1024;     // per readiness event, for fairness
constexpr uint16_t kNsWriteProtected = 0x020;  // generic status 20h
}  // namespace

Connection::Connection(ReactorContext& ctx, int fd, uint64_t id, std::string peer,
                       uint16_t local_port)
    : ctx_(ctx),
      fd_(fd),
      id_(id),
      peer_(std::move(peer)),
      local_port_(local_port),
      reader_(pdu::Receiver::kController, *this),
      sendq_(ctx.reactor, ctx.config.coalesce, *this),
      ka_timer_([this] { on_keep_alive_timer(); }),
      setup_timer_([this] { on_setup_timer(); }) {
  sendq_.set_fd(fd_);
  // Until Connect names the queue, nothing is delayed: the admin queue never is.
  coalesce::Config urgent = ctx.config.coalesce;
  urgent.policy = coalesce::Policy::kOff;
  sendq_.set_config(urgent);
  reader_.set_max_plen(pdu::kMaxHlen + 2 * pdu::kDigestLen + kAdminInline);

  // Command slots and their data buffers, allocated once per connection (mmap'd lazily, so
  // an idle connection costs address space, not memory).
  const auto& cfg = ctx.config;
  uint32_t need =
      std::max({cfg.max_io, cfg.inline_data, kAdminInline,
                uint32_t(1024 * (ctx.registry.subsystems().size() * (cfg.listen.size() + 1) + 2))});
  buf_size_ = (need + 4095) & ~4095u;
  slots_.resize(cfg.queue_size);
  buffers_bytes_ = size_t(buf_size_) * slots_.size();
  void* mem = mmap(nullptr, buffers_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  buffers_ = mem == MAP_FAILED ? nullptr : static_cast<uint8_t*>(mem);
  free_.reserve(slots_.size());
  for (size_t i = slots_.size(); i-- > 0;) {
    Command& c = slots_[i];
    c.conn = this;
    c.index = uint16_t(i);
    c.buf = buffers_ ? buffers_ + i * buf_size_ : nullptr;
    c.io.user = &c;
    c.io.on_complete = &Connection::on_device_done;
    free_.push_back(uint16_t(i));
  }
  ctx_.reactor.add(fd_, EPOLLIN, this);
  ctx_.reactor.arm(setup_timer_, ctx_.reactor.now() + kSetupTimeout);
  LOG_DEBUG("connection %llu from %s", static_cast<unsigned long long>(id_), peer_.c_str());
}

Connection::~Connection() {
  if (!closed_) close("destroyed");
  if (buffers_) munmap(buffers_, buffers_bytes_);
}

void Connection::watch(bool readable, bool writable) {
  if (closed_) return;
  reading_ = readable;
  want_out_ = writable;
  uint32_t ev = (readable ? uint32_t(EPOLLIN) : 0u) | (writable ? uint32_t(EPOLLOUT) : 0u);
  ctx_.reactor.modify(fd_, ev, this);
}

void Connection::want_writable(bool on) {
  if (on != want_out_) watch(reading_, on);
}

void Connection::on_send_error(int err) {
  LOG_DEBUG("connection %llu: send failed: %s", static_cast<unsigned long long>(id_),
            std::strerror(err));
  close_pending_ = false;
  close("send error");
}

void Connection::on_event(uint32_t events) {
  if (closed_) return;
  if (events & EPOLLOUT) sendq_.on_writable();
  if (closed_) return;
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
    if (!reading_) return;
    auto status = reader_.read_from(fd_, kRecvBudget);
    using S = transport::PduReader::Status;
    if (status == S::kClosed) {
      close_pending_ = false;
      close("peer closed");
    } else if (status == S::kError) {
      close_pending_ = false;
      close("receive error");
    }
  }
}

void Connection::close(const char* why) {
  if (closed_) return;
  if (close_pending_) return;  // a TermReq or a response still leaving: closes when sent
  LOG_DEBUG("connection %llu (%s, qid %u) closed: %s", static_cast<unsigned long long>(id_),
            peer_.c_str(), qid_, why);
  sendq_.flush(FlushReason::kClose);
  closed_ = true;
  state_ = State::kClosed;
  ctx_.reactor.cancel(ka_timer_);
  ctx_.reactor.cancel(setup_timer_);
  ctx_.reactor.remove(fd_);
  ::close(fd_);
  fd_ = -1;
  if (ctrl_) {
    if (qid_ == 0) {
      // The admin queue owns the controller: its I/O queues go with it.
      ctrl_->dead = true;
      ctx_.registry.remove_controller(ctrl_->cntlid);
      ctx_.target.close_controller_queues(ctrl_.get());
    }
    ctrl_->remove_queue(&counters_);
  }
  ctx_.schedule_reap();
}

uint32_t Connection::inline_limit() const {
  return state_ == State::kReady && qid_ != 0 ? ctx_.config.inline_data : kAdminInline;
}

PduClass Connection::data_class() const {
  return qid_ == 0 ? PduClass::kUrgent : PduClass::kData;
}

// ---------------------------------------------------------------------------- receive side

bool Connection::on_pdu_header(const pdu::CommonHeader& header, const pdu::Layout& layout) {
  if (closed_ || state_ == State::kClosing) return false;
  switch (pdu::Type(header.type)) {
    case pdu::Type::kICReq:
      return handle_icreq(reinterpret_cast<const pdu::ICReq&>(header));
    case pdu::Type::kCapsuleCmd:
      return handle_capsule(reinterpret_cast<const pdu::CapsuleCmd&>(header), layout);
    case pdu::Type::kH2CData: {
      auto& d = reinterpret_cast<const pdu::DataHeader&>(header);
      if (d.datal != layout.data_len) {
        fatal(pdu::fes::kInvalidHeaderField, offsetof(pdu::DataHeader, datal),
              "H2CData DATAL differs from the data the PDU carries", &d, d.ch.hlen);
        return false;
      }
      return handle_h2c_data(d);
    }
    case pdu::Type::kH2CTermReq: {
      auto& t = reinterpret_cast<const pdu::TermReq&>(header);
      LOG_INFO("connection %llu: host terminated the connection (fes 0x%x fei 0x%x)",
               static_cast<unsigned long long>(id_), t.fes, t.fei);
      close_pending_ = false;
      close("H2CTermReq");
      return false;
    }
    default:  // check_common admits only host-to-controller types
      fatal(pdu::fes::kInvalidHeaderField, 0, "unexpected PDU type", &header, header.hlen);
      return false;
  }
}

void Connection::on_pdu_error(const pdu::Check& check, const uint8_t* header, uint32_t len) {
  fatal(check.fes, check.fei, check.why ? check.why : "bad PDU", header, len);
}

void Connection::fatal(uint16_t fes, uint32_t fei, const char* why, const void* header,
                       uint32_t len) {
  if (closed_ || state_ == State::kClosing) return;
  LOG_INFO("connection %llu (%s): fatal transport error 0x%x at byte %u: %s",
           static_cast<unsigned long long>(id_), peer_.c_str(), fes, fei, why);
  state_ = State::kClosing;
  watch(false, want_out_);
  uint32_t n = pdu::build_term_req(term_hdr_, pdu::Type::kC2HTermReq, fes, fei, header, len);
  iovec iov{term_hdr_.bytes, n};
  close_pending_ = true;
  ctx_.reactor.arm(setup_timer_, ctx_.reactor.now() + kCloseTimeout);
  sendq_.enqueue(&iov, 1, PduClass::kUrgent,
                 {[](void* self, uint64_t) {
                    auto* c = static_cast<Connection*>(self);
                    c->close_pending_ = false;
                    c->close("after C2HTermReq");
                  },
                  this, 0});
}

bool Connection::handle_icreq(const pdu::ICReq& req) {
  if (state_ != State::kWaitIC) {
    fatal(pdu::fes::kPduSequenceError, 0, "second ICReq", &req, sizeof(req));
    return false;
  }
  pdu::Check check = pdu::check_icreq(req);
  if (!check) {
    fatal(check.fes, check.fei, check.why, &req, sizeof(req));
    return false;
  }
  if (req.hpda != 0) {
    fatal(pdu::fes::kUnsupportedParameter, offsetof(pdu::ICReq, hpda),
          "host PDU data alignment not supported", &req, sizeof(req));
    return false;
  }
  digests_.header = req.digest & pdu::kDigestHeader;
  digests_.data = req.digest & pdu::kDigestData;
  maxr2t_ = req.maxr2t;
  reader_.set_digests(digests_);
  reader_.set_after_ic(true);
  pdu::build_icresp(ic_hdr_.icresp, req.digest & (pdu::kDigestHeader | pdu::kDigestData),
                    ctx_.config.max_h2c_data);
  iovec iov{ic_hdr_.bytes, sizeof(pdu::ICResp)};
  sendq_.enqueue(&iov, 1, PduClass::kUrgent);
  state_ = State::kWaitConnect;
  return true;
}

bool Connection::handle_capsule(const pdu::CapsuleCmd& cmd, const pdu::Layout& layout) {
  if (free_.empty() || !buffers_) {
    fatal(pdu::fes::kPduSequenceError, 0, "more commands outstanding than the queue holds", &cmd,
          cmd.ch.hlen);
    return false;
  }
  Command& c = slots_[free_.back()];
  free_.pop_back();
  c.sqe = cmd.sqe;
  c.state = SlotState::kInCapsule;
  c.xfer_len = 0;
  c.received = 0;
  c.pending_status = st::kSuccess;
  c.ns = nullptr;
  ++commands_;
  if (sq_size_) sqhd_ = uint16_t((sqhd_ + 1) % sq_size_);
  if (qid_ == 0 && ctrl_) last_admin_ = ctx_.reactor.now();

  if (layout.data_len == 0) {
    dispatch(c);
    return !closed_;
  }
  // In-capsule data: an offset data block SGL describing exactly the bytes that follow.
  const auto& sgl = c.sqe.sgl;
  if (sgl.type != nvme::kSglDataBlockOffset)
    c.pending_status = st::kSglInvalidType;
  else if (sgl.addr != 0)
    c.pending_status = st::kSglInvalidOffset;
  else if (sgl.length != layout.data_len || layout.data_len > inline_limit())
    c.pending_status = st::kSglInvalidDataLength;
  current_ = &c;
  if (c.pending_status == st::kSuccess) {
    c.xfer_len = layout.data_len;
    reader_.set_payload_target(c.buf, layout.data_len);
  }  // else: the reader drops the payload; the command fails once it has passed
  return true;
}

bool Connection::handle_h2c_data(const pdu::DataHeader& d) {
  if (d.ttag >= slots_.size() || slots_[d.ttag].state != SlotState::kWaitData) {
    fatal(pdu::fes::kInvalidHeaderField, offsetof(pdu::DataHeader, ttag),
          "H2CData for no outstanding R2T (unknown ttag)", &d, d.ch.hlen);
    return false;
  }
  Command& c = slots_[d.ttag];
  if (d.cccid != c.sqe.cid) {
    fatal(pdu::fes::kInvalidHeaderField, offsetof(pdu::DataHeader, cccid),
          "H2CData command id does not match its R2T", &d, d.ch.hlen);
    return false;
  }
  if (d.datao != c.received) {
    fatal(pdu::fes::kDataOutOfRange, offsetof(pdu::DataHeader, datao),
          "H2CData offset is not where the previous data ended", &d, d.ch.hlen);
    return false;
  }
  if (uint64_t(d.datao) + d.datal > c.xfer_len) {
    fatal(pdu::fes::kDataOutOfRange, offsetof(pdu::DataHeader, datal),
          "H2CData beyond the length of its R2T", &d, d.ch.hlen);
    return false;
  }
  if (d.datal > ctx_.config.max_h2c_data) {
    fatal(pdu::fes::kDataLimitExceeded, offsetof(pdu::DataHeader, datal),
          "H2CData larger than maxh2cdata", &d, d.ch.hlen);
    return false;
  }
  current_ = &c;
  reader_.set_payload_target(c.buf + d.datao, d.datal);
  return true;
}

bool Connection::on_pdu_payload(const pdu::CommonHeader& header, bool digest_ok) {
  if (closed_ || state_ == State::kClosing) return false;
  Command* c = current_;
  current_ = nullptr;
  if (!c) return true;  // a TermReq's quoted bytes, already handled
  if (!digest_ok && c->pending_status == st::kSuccess) c->pending_status = st::kDataTransferError;
  if (header.type == uint8_t(pdu::Type::kCapsuleCmd)) {
    if (c->pending_status != st::kSuccess)
      complete(*c, c->pending_status);
    else
      dispatch(*c);
    return !closed_;
  }
  auto& d = reinterpret_cast<const pdu::DataHeader&>(header);
  c->received += d.datal;
  if (c->received == c->xfer_len) {
    if (c->pending_status != st::kSuccess)
      complete(*c, c->pending_status);
    else
      start_io(*c);
  }
  return !closed_;
}

// ---------------------------------------------------------------------------- dispatch

void Connection::dispatch(Command& c) {
  c.state = SlotState::kExec;
  if (c.sqe.opcode == nvme::kFabricsOpcode) return exec_fabrics(c);
  if (state_ != State::kReady) return complete(c, st::kCmdSeqError);
  if (qid_ == 0) return exec_admin(c);
  exec_io(c);
}

void Connection::exec_fabrics(Command& c) {
  uint8_t fctype = c.sqe.fctype();
  if (fctype == nvme::fctype::kConnect) return exec_connect(c);
  if (state_ != State::kReady) return complete(c, st::kCmdSeqError);
  switch (fctype) {
    case nvme::fctype::kPropertyGet:
      if (qid_ != 0) return complete(c, st::kInvalidField);
      return exec_property_get(c);
    case nvme::fctype::kPropertySet:
      if (qid_ != 0) return complete(c, st::kInvalidField);
      return exec_property_set(c);
    case nvme::fctype::kDisconnect:
      complete(c, st::kSuccess);
      close_pending_ = false;
      close("Disconnect");
      return;
    default:
      return complete(c, st::kInvalidOpcode);
  }
}

void Connection::exec_connect(Command& c) {
  auto& cmd = reinterpret_cast<const nvme::ConnectCmd&>(c.sqe);
  auto ipo = [](uint32_t offset, bool in_data) { return (in_data ? (1u << 16) : 0u) | offset; };
  if (state_ != State::kWaitConnect) return complete(c, st::kCmdSeqError);
  if (c.xfer_len != sizeof(nvme::ConnectData)) return complete(c, st::kSglInvalidDataLength);
  if (cmd.recfmt != 0) return complete(c, st::kConnectIncompatibleFormat);
  auto& data = *reinterpret_cast<const nvme::ConnectData*>(c.buf);
  std::string subnqn(nvme::fixed_string(data.subnqn, sizeof(data.subnqn)));
  std::string hostnqn(nvme::fixed_string(data.hostnqn, sizeof(data.hostnqn)));
  Subsystem* sub = ctx_.registry.find(subnqn);
  if (!sub) {
    LOG_INFO("connect from %s: unknown subsystem '%s'", peer_.c_str(), subnqn.c_str());
    return complete(c, st::kConnectInvalidParam, ipo(offsetof(nvme::ConnectData, subnqn), true));
  }
  if (!sub->host_allowed(hostnqn)) {
    LOG_INFO("connect from %s: host '%s' not allowed on '%s'", peer_.c_str(), hostnqn.c_str(),
             subnqn.c_str());
    return complete(c, st::kConnectInvalidHost, ipo(offsetof(nvme::ConnectData, hostnqn), true));
  }
  uint32_t entries = uint32_t(cmd.sqsize) + 1;
  if (cmd.sqsize == 0 || entries > ctx_.config.queue_size)
    return complete(c, st::kConnectInvalidParam, ipo(offsetof(nvme::ConnectCmd, sqsize), false));

  if (cmd.qid == 0) {
    if (data.cntlid != 0xFFFF)
      return complete(c, st::kConnectInvalidParam, ipo(offsetof(nvme::ConnectData, cntlid), true));
    ctrl_ = ctx_.registry.create_controller(sub, hostnqn, data.hostid, cmd.kato);
    if (!ctrl_) return complete(c, st::kConnectControllerBusy);
  } else {
    auto ctrl = ctx_.registry.find_controller(data.cntlid);
    if (!ctrl || ctrl->dead || ctrl->subsystem != sub || ctrl->hostnqn != hostnqn)
      return complete(c, st::kConnectInvalidParam, ipo(offsetof(nvme::ConnectData, cntlid), true));
    uint32_t granted = ctrl->io_queues_granted;  // 0: the host never asked; allow the maximum
    if (sub->discovery || cmd.qid > (granted ? granted : ctx_.config.max_io_queues))
      return complete(c, st::kConnectInvalidParam, ipo(offsetof(nvme::ConnectCmd, qid), false));
    ctrl_ = std::move(ctrl);
  }
  subsystem_ = sub;
  qid_ = cmd.qid;
  sq_size_ = entries;
  sqhd_ = 1 % sq_size_;
  sqflow_disabled_ = cmd.cattr & nvme::kCattrDisableSqFlowControl;
  if (!ctrl_->add_queue({&counters_, &ctx_, id_, qid_})) {
    LOG_INFO("connect from %s: queue %u of controller %u is already connected", peer_.c_str(), qid_,
             ctrl_->cntlid);
    ctrl_.reset();
    subsystem_ = nullptr;
    qid_ = 0;
    sq_size_ = 0;
    return complete(c, st::kCmdSeqError);
  }
  state_ = State::kReady;
  ctx_.reactor.cancel(setup_timer_);
  reader_.set_max_plen(pdu::kMaxHlen + 2 * pdu::kDigestLen +
                       std::max(inline_limit(), ctx_.config.max_h2c_data));
  if (qid_ != 0) sendq_.set_config(ctx_.config.coalesce);  // I/O queues coalesce
  if (qid_ == 0 && ctrl_->kato_ms) reset_keep_alive();
  LOG_DEBUG("connect: %s qid %u sqsize %u cntlid %u host %s", subnqn.c_str(), qid_, cmd.sqsize,
            ctrl_->cntlid, hostnqn.c_str());
  complete(c, st::kSuccess, ctrl_->cntlid);
}

void Connection::exec_property_get(Command& c) {
  auto& p = reinterpret_cast<const nvme::PropertyCmd&>(c.sqe);
  uint64_t value = 0;
  switch (p.offset) {
    case nvme::reg::kCap:
      // MQES, CQR (contiguous queues required), TO = 15 x 500 ms, CSS = NVM, MPSMIN = 4 KiB.
      value = uint64_t(ctx_.config.queue_size - 1) | (1ull << 16) | (15ull << 24) | (1ull << 37);
      break;
    case nvme::reg::kVs:
      value = kVersion;
      break;
    case nvme::reg::kCc:
      value = ctrl_->cc;
      break;
    case nvme::reg::kCsts:
      value = ctrl_->csts;
      break;
    default:
      return complete(c, st::kInvalidField);
  }
  complete(c, st::kSuccess, value);  // a 64-bit property answers in dw0 and dw1
}

void Connection::exec_property_set(Command& c) {
  auto& p = reinterpret_cast<const nvme::PropertyCmd&>(c.sqe);
  if (p.offset != nvme::reg::kCc) return complete(c, st::kInvalidField);
  uint32_t cc = uint32_t(p.value);
  uint32_t old = ctrl_->cc;
  ctrl_->cc = cc;
  bool en = cc & 1, was = old & 1;
  if (en && !was) ctrl_->csts |= 1;    // ready at once: nothing to initialise
  if (!en && was) ctrl_->csts &= ~1u;  // reset
  uint32_t shn = (cc >> 14) & 3;
  if (shn)
    ctrl_->csts = (ctrl_->csts & ~(3u << 2)) | (2u << 2);  // shutdown complete
  else if (!en)
    ctrl_->csts &= ~(3u << 2);
  complete(c, st::kSuccess);
}

// ---------------------------------------------------------------------------- admin

void Connection::exec_admin(Command& c) {
  switch (c.sqe.opcode) {
    case nvme::admin_op::kIdentify:
      return exec_identify(c);
    case nvme::admin_op::kGetLogPage:
      return exec_get_log_page(c);
    case nvme::admin_op::kSetFeatures:
      return exec_set_features(c);
    case nvme::admin_op::kGetFeatures:
      return exec_get_features(c);
    case nvme::admin_op::kAsyncEvent:
      if (aer_outstanding_ >= kAerLimit) return complete(c, st::kAsyncEventLimit);
      ++aer_outstanding_;
      c.state = SlotState::kAer;  // completed only by an event; freed with the connection
      return;
    case nvme::admin_op::kKeepAlive:
      return complete(c, st::kSuccess);
    case nvme::admin_op::kAbort:
      return complete(c, st::kSuccess, 1);  // bit 0: the command was not aborted
    default:
      return complete(c, st::kInvalidOpcode);
  }
}

// Features a host may set and read back that need no action from a RAM-speed target.
static bool settable_feature(uint8_t fid) {
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

// Length of a controller-to-host transfer the SQE describes (a transport SGL).
static bool data_in_length(const nvme::Sqe& sqe, uint32_t* len) {
  if (sqe.sgl.type != nvme::kSglTransportDataBlock) return false;
  *len = sqe.sgl.length;
  return true;
}

void Connection::exec_identify(Command& c) {
  uint32_t len;
  if (!data_in_length(c.sqe, &len)) return complete(c, st::kSglInvalidType);
  if (len == 0) return complete(c, st::kSglInvalidDataLength);  // a data PDU needs data
  len = std::min<uint32_t>(len, 4096);  // a shorter buffer gets the structure's first bytes
  uint8_t cns = uint8_t(c.sqe.cdw10 & 0xFF);
  std::memset(c.buf, 0, 4096);
  const auto& cfg = ctx_.config;
  Subsystem* sub = subsystem_;
  switch (cns) {
    case 0x00: {  // namespace
      Namespace* ns = sub->ns(c.sqe.nsid);
      if (!ns) return complete(c, st::kInvalidNamespace, 0);
      auto& id = *reinterpret_cast<nvme::IdentifyNamespace*>(c.buf);
      id.nsze = id.ncap = id.nuse = ns->blocks;
      id.nlbaf = 0;
      id.flbas = 0;
      id.lbaf[0].lbads = uint8_t(ns->block_shift);
      id.dlfeat = 0x01 | 0x08;  // deallocated blocks read as zeroes; Write Zeroes may deallocate
      id.nmic = 0;
      std::memcpy(id.nguid, ns->nguid, 16);
      std::memcpy(id.eui64, ns->nguid, 8);
      break;
    }
    case 0x01: {  // controller
      auto& id = *reinterpret_cast<nvme::IdentifyController*>(c.buf);
      id.vid = 0x1b36;  // no PCI vendor: the QEMU/Red Hat id that software controllers use
      id.ssvid = 0x1b36;
      nvme::copy_padded(id.sn, sizeof(id.sn), sub->serial);
      nvme::copy_padded(id.mn, sizeof(id.mn), sub->discovery ? "sens discovery" : "sens");
      nvme::copy_padded(id.fr, sizeof(id.fr), "0.1");
      id.rab = 6;
      id.cmic = 0;
      id.mdts = uint8_t(__builtin_ctz(cfg.max_io) - 12);  // in units of CAP.MPSMIN (4 KiB)
      id.cntlid = ctrl_->cntlid;
      id.ver = kVersion;
      id.oaes = 1u << 8;  // namespace attribute notices
      id.cntrltype = sub->discovery ? 2 : 1;
      id.aerl = kAerLimit - 1;
      id.lpa = 1u << 2;  // extended data for Get Log Page (offsets)
      id.elpe = 0;
      id.kas = kKasUnits;
      id.sqes = 0x66;
      id.cqes = 0x44;
      id.maxcmd = uint16_t(cfg.queue_size);
      id.nn = uint32_t(sub->namespaces.size());
      id.oncs = (1u << 2) | (1u << 3);  // Dataset Management, Write Zeroes
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
      auto* list = reinterpret_cast<uint32_t*>(c.buf);
      size_t n = 0;
      for (auto& ns : sub->namespaces)
        if (ns->nsid > c.sqe.nsid && n < 1024) list[n++] = ns->nsid;
      break;
    }
    case 0x03: {  // namespace identification descriptors
      Namespace* ns = sub->ns(c.sqe.nsid);
      if (!ns) return complete(c, st::kInvalidNamespace);
      uint8_t* p = c.buf;
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
      return complete(c, st::kInvalidField);
  }
  send_data_in(c, c.buf, len);
}

void Connection::exec_get_log_page(Command& c) {
  uint32_t sgl_len;
  if (!data_in_length(c.sqe, &sgl_len)) return complete(c, st::kSglInvalidType);
  uint8_t lid = uint8_t(c.sqe.cdw10 & 0xFF);
  uint64_t numd = ((uint64_t(c.sqe.cdw11 & 0xFFFF) << 16) | (c.sqe.cdw10 >> 16)) + 1;
  uint64_t len = numd * 4;
  uint64_t offset = uint64_t(c.sqe.cdw12) | (uint64_t(c.sqe.cdw13) << 32);
  if (len != sgl_len) return complete(c, st::kSglInvalidDataLength);
  if (len > buf_size_) return complete(c, st::kInvalidField);
  // Build the whole page in the slot buffer past the first `len` bytes would overlap; pages
  // are small, so build at offset 0 and move the requested window to the front.
  std::memset(c.buf, 0, buf_size_);
  size_t page_len = 0;
  switch (lid) {
    case nvme::log_page::kError:
      page_len = 64 * 64;
      break;
    case nvme::log_page::kSmart: {
      auto& s = *reinterpret_cast<nvme::SmartLog*>(c.buf);
      s.temperature = 300;
      s.avail_spare = 100;
      s.spare_thresh = 10;
      uint64_t r, w, rb, wb;
      ctrl_->sum(&r, &w, &rb, &wb);
      auto put128 = [](uint8_t* dst, uint64_t v) { std::memcpy(dst, &v, 8); };
      put128(s.data_units_read, rb / 512000);  // units of 1000 x 512 bytes
      put128(s.data_units_written, wb / 512000);
      put128(s.host_reads, r);
      put128(s.host_writes, w);
      page_len = sizeof(nvme::SmartLog);
      break;
    }
    case nvme::log_page::kFirmware:
      c.buf[0] = 1;  // active slot 1
      std::memcpy(c.buf + 8, "0.1     ", 8);
      page_len = 512;
      break;
    case nvme::log_page::kChangedNs:
      page_len = 4096;
      break;
    case nvme::log_page::kDiscovery: {
      if (!subsystem_->discovery) return complete(c, st::kInvalidLogPage);
      auto& hdr = *reinterpret_cast<nvme::DiscoveryLogHeader*>(c.buf);
      auto* entries = reinterpret_cast<nvme::DiscoveryLogEntry*>(c.buf + 1024);
      uint64_t n = 0;
      const auto& bound = ctx_.target.bound();
      auto add = [&](const std::string& nqn, const Target::Bound& b, uint8_t subtype,
                     uint16_t portid) {
        if ((n + 2) * 1024 > buf_size_) return;
        auto& e = entries[n++];
        e.trtype = nvme::kTrtypeTcp;
        e.adrfam = b.host.find(':') != std::string::npos ? nvme::kAdrfamIpv6 : nvme::kAdrfamIpv4;
        e.subtype = subtype;
        e.treq = nvme::kTreqNotRequired;
        e.portid = portid;
        e.cntlid = 0xFFFF;
        e.asqsz = uint16_t(ctx_.config.queue_size);
        nvme::copy_padded(e.trsvcid, sizeof(e.trsvcid), std::to_string(b.port), ' ');
        nvme::copy_padded(e.subnqn, sizeof(e.subnqn), nqn, '\0');
        nvme::copy_padded(e.traddr, sizeof(e.traddr), b.host, ' ');
        e.tsas[0] = 0;  // no security
      };
      for (size_t i = 0; i < bound.size(); ++i) {
        if (bound[i].discovery) {
          add(subsystem_->nqn, bound[i], nvme::kSubtypeCurrentDiscovery, uint16_t(i + 1));
          continue;
        }
        for (auto& s : ctx_.registry.subsystems())
          if (s->host_allowed(ctrl_->hostnqn))
            add(s->nqn, bound[i], nvme::kSubtypeNvme, uint16_t(i + 1));
      }
      hdr.genctr = 1;
      hdr.numrec = n;
      hdr.recfmt = 0;
      page_len = 1024 * (n + 1);
      break;
    }
    default:
      return complete(c, st::kInvalidLogPage);
  }
  if (offset > page_len || (offset & 3)) return complete(c, st::kInvalidField);
  if (offset) std::memmove(c.buf, c.buf + offset, page_len - offset);
  if (page_len - offset < len)
    std::memset(c.buf + (page_len - offset), 0, len - (page_len - offset));
  send_data_in(c, c.buf, uint32_t(len));
}

void Connection::exec_set_features(Command& c) {
  uint8_t fid = uint8_t(c.sqe.cdw10 & 0xFF);
  uint32_t v = c.sqe.cdw11;
  switch (fid) {
    case nvme::feature::kNumQueues: {
      uint32_t nsq = v & 0xFFFF, ncq = v >> 16;
      if (nsq == 0xFFFF || ncq == 0xFFFF) return complete(c, st::kInvalidField);
      uint32_t granted = std::min<uint32_t>(std::min(nsq, ncq), ctx_.config.max_io_queues - 1);
      ctrl_->io_queues_granted = granted + 1;
      return complete(c, st::kSuccess, granted | (granted << 16));
    }
    case nvme::feature::kAsyncEventConfig:
      ctrl_->async_event_config = v;
      return complete(c, st::kSuccess);
    case nvme::feature::kKeepAliveTimer:
      ctrl_->kato_ms = v;
      if (v)
        reset_keep_alive();
      else
        ctx_.reactor.cancel(ka_timer_);
      return complete(c, st::kSuccess);
    default:  // features with nothing to configure here are accepted and read back as 0
      return complete(c, settable_feature(fid) ? st::kSuccess : st::kInvalidField);
  }
}

void Connection::exec_get_features(Command& c) {
  uint8_t fid = uint8_t(c.sqe.cdw10 & 0xFF);
  switch (fid) {
    case nvme::feature::kNumQueues: {
      uint32_t granted = ctrl_->io_queues_granted;
      uint32_t g = (granted ? granted : ctx_.config.max_io_queues) - 1;
      return complete(c, st::kSuccess, g | (g << 16));
    }
    case nvme::feature::kAsyncEventConfig:
      return complete(c, st::kSuccess, ctrl_->async_event_config);
    case nvme::feature::kKeepAliveTimer:
      return complete(c, st::kSuccess, ctrl_->kato_ms);
    case nvme::feature::kVolatileWriteCache:
      return complete(c, st::kSuccess, subsystem_->volatile_cache ? 1 : 0);
    default:
      return complete(c, settable_feature(fid) ? st::kSuccess : st::kInvalidField, 0);
  }
}

void Connection::reset_keep_alive() {
  last_admin_ = ctx_.reactor.now();
  if (!ka_timer_.armed() && ctrl_ && ctrl_->kato_ms)
    ctx_.reactor.arm(ka_timer_, last_admin_ + Nanos(ctrl_->kato_ms) * kMilli + kKeepAliveGrace);
}

void Connection::on_keep_alive_timer() {
  if (closed_ || !ctrl_ || !ctrl_->kato_ms) return;
  Nanos due = last_admin_ + Nanos(ctrl_->kato_ms) * kMilli + kKeepAliveGrace;
  if (ctx_.reactor.now() >= due) {
    LOG_INFO("controller %u (%s): no keep alive within %u ms, dropping the host", ctrl_->cntlid,
             ctrl_->hostnqn.c_str(), ctrl_->kato_ms);
    close("keep alive timeout");
    return;
  }
  ctx_.reactor.arm(ka_timer_, due);
}

void Connection::on_setup_timer() {
  if (closed_) return;
  if (state_ == State::kClosing) {  // the TermReq could not be sent: close regardless
    close_pending_ = false;
    close("C2HTermReq not sent in time");
    return;
  }
  if (state_ == State::kReady) return;
  LOG_INFO("connection %llu (%s): no ICReq/Connect within %lld s, closing",
           static_cast<unsigned long long>(id_), peer_.c_str(),
           static_cast<long long>(kSetupTimeout / kSecond));
  close("setup timeout");
}

// ---------------------------------------------------------------------------- I/O

void Connection::exec_io(Command& c) {
  const nvme::Sqe& s = c.sqe;
  uint8_t op = s.opcode;
  if (op != nvme::io_op::kRead && op != nvme::io_op::kWrite && op != nvme::io_op::kFlush &&
      op != nvme::io_op::kWriteZeroes && op != nvme::io_op::kDatasetMgmt)
    return complete(c, st::kInvalidOpcode);
  if (op == nvme::io_op::kFlush && s.nsid == 0xFFFFFFFF) {
    c.ns = nullptr;
    c.flush_next = 1;
    return flush_step(c);
  }
  Namespace* ns = subsystem_->ns(s.nsid);
  if (!ns) return complete(c, st::kInvalidNamespace);
  c.ns = ns;
  if (op == nvme::io_op::kFlush) {
    submit_device(c, storage::Op::kFlush, 0, 0, nullptr);
    return;
  }
  bool modifies = op == nvme::io_op::kWrite || op == nvme::io_op::kWriteZeroes ||
                  (op == nvme::io_op::kDatasetMgmt && (s.cdw11 & (1u << 2)));
  if (modifies && ns->device->read_only()) return complete(c, kNsWriteProtected);
  if (op == nvme::io_op::kDatasetMgmt) {
    uint32_t ranges = (s.cdw10 & 0xFF) + 1;
    uint32_t bytes = ranges * sizeof(nvme::DsmRange);
    c.dsm_count = (s.cdw11 & (1u << 2)) ? ranges : 0;  // only deallocate does anything
    c.dsm_next = 0;
    if (c.xfer_len) {  // ranges came in the capsule
      if (c.xfer_len != bytes) return complete(c, st::kSglInvalidDataLength);
      return dsm_step(c);
    }
    if (s.sgl.type != nvme::kSglTransportDataBlock) return complete(c, st::kSglInvalidType);
    if (s.sgl.length != bytes) return complete(c, st::kSglInvalidDataLength);
    c.xfer_len = bytes;
    return send_r2t(c);
  }
  uint64_t slba = s.slba();
  uint64_t nlb = s.nlb();
  if (slba >= ns->blocks || nlb > ns->blocks - slba) return complete(c, st::kLbaOutOfRange);
  c.offset = slba << ns->block_shift;
  uint64_t len = nlb << ns->block_shift;
  if (op == nvme::io_op::kWriteZeroes) {
    submit_device(c, storage::Op::kWriteZeroes, c.offset, len, nullptr);
    return;
  }
  if (len > ctx_.config.max_io) return complete(c, st::kInvalidField);
  if (op == nvme::io_op::kRead) {
    if (s.sgl.type != nvme::kSglTransportDataBlock) return complete(c, st::kSglInvalidType);
    if (s.sgl.length != len) return complete(c, st::kSglInvalidDataLength);
    c.xfer_len = uint32_t(len);
    if (const uint8_t* mem = ns->device->mapped(c.offset, uint32_t(len))) {
      counters_.reads.fetch_add(1, std::memory_order_relaxed);
      counters_.read_bytes.fetch_add(len, std::memory_order_relaxed);
      // Straight from the namespace's memory, unless a data digest must describe the bytes:
      // the PDU may wait in the send queue while a later write changes them.
      if (!digests_.data) return send_data_in(c, mem, uint32_t(len));
      std::memcpy(c.buf, mem, len);
      return send_data_in(c, c.buf, uint32_t(len));
    }
    submit_device(c, storage::Op::kRead, c.offset, uint32_t(len), c.buf);
    return;
  }
  // Write: the data came in the capsule, or is asked for with an R2T.
  if (c.xfer_len) {
    if (c.xfer_len != len) return complete(c, st::kSglInvalidDataLength);
    return start_io(c);
  }
  if (s.sgl.type != nvme::kSglTransportDataBlock) return complete(c, st::kSglInvalidType);
  if (s.sgl.length != len) return complete(c, st::kSglInvalidDataLength);
  c.xfer_len = uint32_t(len);
  send_r2t(c);
}

void Connection::start_io(Command& c) {
  c.state = SlotState::kExec;
  if (c.sqe.opcode == nvme::io_op::kDatasetMgmt) return dsm_step(c);
  if (c.ns->device->read_only()) return complete(c, kNsWriteProtected);
  counters_.writes.fetch_add(1, std::memory_order_relaxed);
  counters_.write_bytes.fetch_add(c.xfer_len, std::memory_order_relaxed);
  c.io.fua = c.sqe.fua();
  submit_device(c, storage::Op::kWrite, c.offset, c.xfer_len, c.buf);
}

void Connection::dsm_step(Command& c) {
  auto* ranges = reinterpret_cast<const nvme::DsmRange*>(c.buf);
  while (c.dsm_next < c.dsm_count) {
    const auto& r = ranges[c.dsm_next++];
    if (r.nlb == 0) continue;
    if (r.slba >= c.ns->blocks || r.nlb > c.ns->blocks - r.slba)
      return complete(c, st::kLbaOutOfRange);
    submit_device(c, storage::Op::kDiscard, r.slba << c.ns->block_shift,
                  uint64_t(r.nlb) << c.ns->block_shift, nullptr);
    return;  // device_done() continues the walk
  }
  complete(c, st::kSuccess);
}

void Connection::flush_step(Command& c) {
  Namespace* ns = subsystem_->ns(c.flush_next);
  if (!ns) return complete(c, st::kSuccess);
  ++c.flush_next;
  c.ns = ns;
  submit_device(c, storage::Op::kFlush, 0, 0, nullptr);
}

void Connection::submit_device(Command& c, storage::Op op, uint64_t offset, uint64_t len,
                               void* buf) {
  c.state = SlotState::kExec;
  c.io.op = op;
  c.io.offset = offset;
  c.io.length = len;
  c.io.buf = buf;
  c.io.result = 0;
  if (op != storage::Op::kWrite) c.io.fua = false;
  ++inflight_io_;
  storage::Queue* q = ctx_.queue_for(c.ns);
  q->submit(&c.io);  // memory devices complete inside
  ctx_.schedule_kick(q);
}

void Connection::on_device_done(storage::Request* req) {
  auto* c = static_cast<Command*>(req->user);
  c->conn->device_done(*c);
}

void Connection::device_done(Command& c) {
  --inflight_io_;
  if (closed_) {
    c.state = SlotState::kFree;
    if (reapable()) ctx_.schedule_reap();
    return;
  }
  if (c.io.result != 0) {
    LOG_WARN("namespace %u: device %s at %llu failed: %s", c.ns ? c.ns->nsid : 0,
             c.io.op == storage::Op::kRead ? "read" : "I/O",
             static_cast<unsigned long long>(c.io.offset), std::strerror(-c.io.result));
    uint16_t status = c.io.op == storage::Op::kRead ? st::kUnrecoveredReadError : st::kWriteFault;
    if (c.io.op == storage::Op::kFlush || c.io.op == storage::Op::kDiscard)
      status = st::kInternalError;
    return complete(c, status);
  }
  switch (c.io.op) {
    case storage::Op::kRead:
      counters_.reads.fetch_add(1, std::memory_order_relaxed);
      counters_.read_bytes.fetch_add(c.xfer_len, std::memory_order_relaxed);
      return send_data_in(c, c.buf, c.xfer_len);
    case storage::Op::kDiscard:
      return dsm_step(c);
    case storage::Op::kFlush:
      if (c.sqe.nsid == 0xFFFFFFFF) return flush_step(c);
      return complete(c, st::kSuccess);
    default:
      return complete(c, st::kSuccess);
  }
}

// ---------------------------------------------------------------------------- send side

void Connection::send_data_in(Command& c, const void* data, uint32_t len) {
  bool success = sqflow_disabled_ && qid_ != 0;
  uint8_t flags = pdu::flag::kDataLast | (success ? pdu::flag::kDataSuccess : 0);
  pdu::build_data(c.data_hdr.data, pdu::Type::kC2HData, c.sqe.cid, 0, 0, len, flags, digests_);
  uint32_t hl = pdu::finish_header(c.data_hdr, digests_);
  iovec iov[3];
  int n = 0;
  iov[n++] = {c.data_hdr.bytes, hl};
  iov[n++] = {const_cast<void*>(data), len};
  if (digests_.data && len) {
    c.ddgst = crc32c(data, len);
    iov[n++] = {&c.ddgst, 4};
  }
  c.state = SlotState::kSending;
  if (success) {  // the host skips the response: the slot is free once the data is out
    sendq_.enqueue(iov, n, data_class(), {&Connection::on_resp_sent, this, c.index});
    return;
  }
  sendq_.enqueue(iov, n, data_class());
  complete(c, st::kSuccess);
}

void Connection::send_r2t(Command& c) {
  c.state = SlotState::kWaitData;
  c.received = 0;
  pdu::build_r2t(c.r2t_hdr.r2t, c.sqe.cid, c.index, 0, c.xfer_len, digests_);
  uint32_t hl = pdu::finish_header(c.r2t_hdr, digests_);
  iovec iov{c.r2t_hdr.bytes, hl};
  sendq_.enqueue(&iov, 1, qid_ == 0 ? PduClass::kUrgent : PduClass::kControl);
}

void Connection::complete(Command& c, uint16_t status, uint64_t result) {
  bool dnr = status != st::kSuccess && status != st::kConnectControllerBusy;
  auto cqe = nvme::make_cqe(c.sqe.cid, qid_, sqhd_, status, uint32_t(result), dnr);
  cqe.dw1 = uint32_t(result >> 32);
  pdu::build_capsule_resp(c.resp_hdr.resp, cqe, digests_);
  uint32_t hl = pdu::finish_header(c.resp_hdr, digests_);
  iovec iov{c.resp_hdr.bytes, hl};
  c.state = SlotState::kSending;
  sendq_.enqueue(&iov, 1, data_class(), {&Connection::on_resp_sent, this, c.index});
}

void Connection::on_resp_sent(void* ctx, uint64_t index) {
  auto* self = static_cast<Connection*>(ctx);
  self->free_slot(self->slots_[index]);
}

void Connection::free_slot(Command& c) {
  c.state = SlotState::kFree;
  free_.push_back(c.index);
}

nlohmann::json Connection::stats_json() const {
  nlohmann::json j = coalesce::to_json(sendq_.scheduler().stats());
  j["id"] = id_;
  j["peer"] = peer_;
  j["qid"] = qid_;
  j["commands"] = commands_;
  j["recv_calls"] = reader_.counters().recv_calls;
  j["recv_bytes"] = reader_.counters().bytes;
  j["sent_bytes"] = sendq_.counters().bytes;
  return j;
}

}  // namespace sens::target
