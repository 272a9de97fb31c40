// IoQueueImpl: a submitting queue, on a connection of its own (inline) or a link to a shared
// one; builds the commands, takes and gives back cids, delivers completions to callbacks. Its
// reconnect side (recover, held commands) is in library_reconnect.cc.
#include <cerrno>
#include <chrono>
#include <thread>

#include "host/library.h"

namespace sens::host {

// ---- IoQueueImpl ----

IoQueueImpl::IoQueueImpl(ControllerImpl& ctrl, PollerImpl* poller, uint32_t depth)
    : ctrl_(ctrl), poller_(poller), depth_(depth) {
  if (poller_) {
    poller_->add_queue(this);
    ctrl_.add_poller(poller_);
  }
  held_.reserve(depth);
  failed_.reserve(depth);
  scratch_.reserve(depth);
  free_.reserve(depth);
  for (int i = int(depth) - 1; i >= 0; --i) free_.push_back(uint16_t(i));
}

IoQueueImpl::~IoQueueImpl() {
  closing_ = true;  // nothing is held any more
  if (link_) link_->closing.store(true, std::memory_order_release);
  if (inline_) {
    inline_->close("I/O queue destroyed");  // fails what is in flight: callbacks run
    fail_list(held_);
    inline_.reset();
    ctrl_.give_qid(qid_);
  }
  fail_list(failed_);
  if (poller_) {
    poller_->remove_queue(this);
    ctrl_.remove_poller(poller_);
  }
  if (shared_) {
    SharedConnection* held_on = shared_;
    SubmitterLink* hl = link_.get();
    held_on->owner().thread().call([held_on, hl] { held_on->fail_link_held(hl); });
    // Commands in flight complete first (or fail with the connection), bounded by the I/O
    // timeout's watchdog.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(ctrl_.options().io_timeout_ms + 2000);
    while (inflight() > 0 && std::chrono::steady_clock::now() < deadline) {
      if (poller_)
        poller_->process_completions(0, 10 * kMilli);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    SharedConnection* c = shared_;
    SubmitterLink* l = link_.get();
    c->owner().thread().call([c, l] { c->remove_link(l); });
    if (poller_) poller_->remove_link(l);
    c->release(l->cid_base, l->depth);
  }
}

std::string IoQueueImpl::attach_inline(uint16_t qid) {
  qid_ = qid;
  own_requests_.resize(depth_);
  requests_ = own_requests_.data();
  std::unique_ptr<Queue> q;
  if (std::string e = ctrl_.open_io(poller_->reactor(), qid, depth_, false, &q); !e.empty())
    return e;
  epoch_ = tried_ = ctrl_.epoch();
  q->set_on_failure(&IoQueueImpl::on_inline_failure, this);
  inline_ = std::move(q);
  return "";
}

void IoQueueImpl::fail_list(std::vector<uint16_t>& list) {
  // Callbacks may submit again (onto this list): only what is there now.
  scratch_.clear();
  scratch_.swap(list);
  Completion c;
  c.status = kStatusHostPathError;
  for (uint16_t cid : scratch_) deliver(cid, c);
  scratch_.clear();
  if (list.capacity() < depth_) list.reserve(depth_);
}

void IoQueueImpl::fail_later(uint16_t cid) {
  if (poller_) {
    failed_.push_back(cid);
    poller_->mark_local_work();
    return;
  }
  // Callbacks on the owner thread: deliver there (a failed controller; allocation is fine).
  shared_->owner().thread().run_job([this, cid] {
    Completion c;
    c.status = kStatusHostPathError;
    deliver(cid, c);
  });
}

std::string IoQueueImpl::attach_shared(SharedConnection& c) {
  const int base = c.reserve(uint16_t(depth_));
  if (base < 0)
    return "connection " + std::to_string(c.index()) + " has no room for " +
           std::to_string(depth_) + " more commands (connection_depth " +
           std::to_string(ctrl_.options().connection_depth) + ")";
  shared_ = &c;
  requests_ = &c.request(uint16_t(base));
  link_ = std::make_unique<SubmitterLink>(c, *this, poller_, uint16_t(base), uint16_t(depth_));
  SubmitterLink* l = link_.get();
  if (poller_) poller_->add_link(l);
  c.owner().thread().call([&c, l] { c.add_link(l); });
  return "";
}

bool IoQueueImpl::pop_cid(uint16_t* cid) {
  if (free_.empty() && link_ && !poller_) {
    uint16_t got[64];
    for (size_t n; (n = link_->freed.pop(got, 64)) > 0;)
      for (size_t i = 0; i < n; ++i) free_.push_back(got[i]);
  }
  if (free_.empty()) return false;
  *cid = free_.back();
  free_.pop_back();
  return true;
}

int IoQueueImpl::submit(uint8_t opcode, uint32_t nsid, uint64_t lba, uint32_t blocks,
                        const iovec* iov, int iovcnt, sens::Callback cb, void* ctx) {
  const ControllerState st = ctrl_.state();
  if (st == ControllerState::kClosed) return -ENODEV;
  const Namespace* ns = ctrl_.find_namespace(nsid);
  if (!ns) return -EINVAL;
  const bool data = opcode == nvme::io_op::kRead || opcode == nvme::io_op::kWrite;
  const bool ranged = opcode != nvme::io_op::kFlush;
  if (ranged && (blocks == 0 || lba >= ns->blocks || blocks > ns->blocks - lba)) return -EINVAL;
  if (ranged && opcode != nvme::io_op::kDatasetMgmt && blocks > 0x10000) return -EINVAL;
  uint64_t bytes = 0;
  if (data) {
    if (!iov || iovcnt < 1 || iovcnt > kMaxIov) return -EINVAL;
    for (int i = 0; i < iovcnt; ++i) bytes += iov[i].iov_len;
    if (bytes != uint64_t(blocks) * ns->block_size) return -EINVAL;
    if (ctrl_.max_transfer() && bytes > ctrl_.max_transfer()) return -EINVAL;
    if (bytes > ctrl_.options().max_transfer) return -EINVAL;
  }
  std::unique_lock<std::mutex> g(submit_mu_, std::defer_lock);
  if (!poller_) g.lock();
  uint16_t cid;
  if (!pop_cid(&cid)) return -EAGAIN;
  Request& r = requests_[cid];
  r.user_cb = cb;
  r.user_ctx = ctx;
  r.retries = 0;
  if (opcode == nvme::io_op::kDatasetMgmt) {
    r.dsm = {0, blocks, lba};
    r.sqe = nvme::make_dsm_deallocate(nsid, 1, nvme::Xfer::kTransport);
    r.one = {&r.dsm, sizeof(r.dsm)};
    r.iov = &r.one;
    r.iovcnt = 1;
    r.len = sizeof(r.dsm);
    r.dir = DataDir::kHostToController;
  } else {
    r.sqe = nvme::make_io(opcode, nsid, lba, ranged ? blocks : 0, nvme::Xfer::kTransport,
                          uint32_t(bytes));
    if (data) {
      if (iovcnt == 1) {
        r.one = iov[0];
        r.iov = &r.one;
      } else {
        r.iov = iov;
      }
      r.iovcnt = uint16_t(iovcnt);
    } else {
      r.iov = nullptr;
      r.iovcnt = 0;
    }
    r.len = uint32_t(bytes);
    r.dir = opcode == nvme::io_op::kRead    ? DataDir::kControllerToHost
            : opcode == nvme::io_op::kWrite ? DataDir::kHostToController
                                            : DataDir::kNone;
  }
  inflight_.fetch_add(1, std::memory_order_relaxed);
  if (inline_) {
    if (st == ControllerState::kFailed) {
      fail_later(cid);
    } else if (!inline_->submitv(r.sqe, r.iov, r.iovcnt, r.len, r.dir, &IoQueueImpl::on_inline_done,
                                 this, cid, cid)) {
      // The connection is down: held for the reconnect (the poller's next call reconnects
      // it if the controller is live again), or failed.
      if (ctrl_.may_hold()) {
        held_.push_back(cid);
        poller_->mark_local_work();
      } else {
        fail_later(cid);
      }
    }
    return 0;
  }
  if (poller_) poller_->reactor().add_outstanding(1);
  if (st == ControllerState::kFailed) {
    fail_later(cid);
    return 0;
  }
  if (shared_->mode() == ShareMode::kLock) {
    if (!shared_->submit_locked(uint16_t(link_->cid_base + cid))) fail_later(cid);
    return 0;
  }
  link_->send.push(cid);  // never full: it holds the whole depth
  shared_->doorbell();
  return 0;
}

void IoQueueImpl::deliver(uint16_t cid, const Completion& c) {
  Request& r = requests_[cid];
  const sens::Callback cb = r.user_cb;
  void* const ctx = r.user_ctx;
  if (!poller_ && link_)
    link_->freed.push(cid);  // the submitting thread takes it back
  else
    free_.push_back(cid);
  inflight_.fetch_sub(1, std::memory_order_relaxed);
  if (poller_) {
    if (!inline_) poller_->reactor().add_outstanding(-1);
    poller_->count_delivered();
  }
  sens::Completion out;
  out.status = Status(c.status, c.dnr);
  out.dw0 = c.dw0;
  out.dw1 = c.dw1;
  if (cb) cb(ctx, out);
}

}  // namespace sens::host
