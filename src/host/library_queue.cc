// IoQueueImpl: a submitting queue, on a connection of its own (inline) or a link to a shared
// one; builds the commands, takes and gives back cids, delivers completions to callbacks. Its
// reconnect side (recover, held commands) is in library_reconnect.cc.
#include <cerrno>
#include <chrono>
#include <thread>

#include "common/log.h"
#include "host/library.h"

namespace sens::host {

// ---- IoQueueImpl ----

IoQueueImpl::IoQueueImpl(std::shared_ptr<ControllerImpl> ctrl, PollerImpl* poller, uint32_t depth)
    : ctrl_(std::move(ctrl)), poller_(poller), depth_(depth) {
  if (poller_) poller_->add_queue(this);
  ctrl_->add_queue(this);
  held_.reserve(depth);
  failed_.reserve(depth);
  scratch_.reserve(depth);
  free_.reserve(depth);
  for (int i = int(depth) - 1; i >= 0; --i) free_.push_back(uint16_t(i));
}

IoQueueImpl::~IoQueueImpl() {
  close();
}

void IoQueueImpl::destroy(std::unique_ptr<IoQueueImpl> q) {
  if (!q) return;
  if (q->poller_ && q->poller_->busy_here()) {
    // Inside one of its poller's callbacks (its own, most likely): the poller is walking its
    // queues and this one's connection; it closes the queue once process_completions returns.
    q->poller_->defer_destroy(std::move(q));
    return;
  }
  if (!q->poller_ && on_library_thread()) {
    // A callback on an owner thread (no poller): closing waits for that thread to deliver the
    // queue's last completions, so it must not wait on it. Rare: a thread is fine.
    std::thread([q = std::move(q)]() mutable { q.reset(); }).detach();
    return;
  }
  q.reset();
}

void IoQueueImpl::close() {
  if (closed_) return;
  closed_ = true;   // callbacks that submit again from here on get -ENODEV
  closing_ = true;  // nothing is held any more
  if (link_) link_->closing.store(true, std::memory_order_release);
  if (inline_) {
    // Its own connection: deleting the queue deletes the SQ (NVMe/TCP: the connection goes),
    // so what is in flight is aborted at once (on_inline_done), and nothing reads or writes
    // the caller's buffers after this. A reconnect in progress is abandoned.
    setup_.reset();
    inline_->close("I/O queue deleted");
    fail_list(held_, aborted_completion());
    inline_.reset();
    ctrl_->give_qid(qid_);
  }
  fail_list(failed_, path_error());  // a failed controller's verdict, not yet delivered
  if (shared_) close_link();
  if (poller_) poller_->remove_queue(this);
  ctrl_->remove_queue(this);
}

void IoQueueImpl::close_link() {
  SharedConnection* c = shared_;
  SubmitterLink* l = link_.get();
  // Not on the wire yet (its send-list, commands held across a lost connection): aborted now.
  c->owner().thread().call([c, l] { c->abort_queued(l); });
  // On the wire: the controller may still read or write the buffers, and the cids are the
  // connection's. They get abort_timeout_ms to come back (with their own status); then the
  // connection is reset, which fails them (aborted) and sends the other queues' commands
  // through a reconnect, as a command timeout would.
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::milliseconds(ctrl_->options().abort_timeout_ms);
  bool reset = false, stuck = false;
  for (;;) {
    drain_done();
    if (inflight() == 0) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      if (reset) {
        stuck = true;
        break;
      }
      reset = true;
      c->owner().thread().call([c, l] { c->abort_link(l); });
      deadline = now + std::chrono::seconds(1);  // the reset completes them at once
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  c->owner().thread().call([c, l] { c->remove_link(l); });
  if (poller_) poller_->remove_link(l);
  // Cids still in flight (never seen: the reset fails every command) stay reserved for good
  // rather than reach another queue while the controller may answer them.
  if (stuck)
    LOG_ERROR("host: I/O queue deleted with %u command(s) unaccounted for; cids %u+%u kept",
              inflight(), l->cid_base, l->depth);
  else
    c->release(l->cid_base, l->depth);
}

void IoQueueImpl::drain_done() {
  if (!poller_ || !link_) return;
  CompletionEntry batch[32];
  for (size_t n; (n = link_->done.pop(batch, 32)) > 0;)
    for (size_t k = 0; k < n; ++k) deliver(batch[k].cid, batch[k].c);
}

Completion IoQueueImpl::gone() const {
  return closing_ || ctrl_->state() == ControllerState::kClosed ? aborted_completion()
                                                                : path_error();
}

std::string IoQueueImpl::attach_inline(uint16_t qid) {
  qid_ = qid;
  own_requests_.resize(depth_);
  requests_ = own_requests_.data();
  std::unique_ptr<Queue> q;
  if (std::string e = ctrl_->open_io(poller_->reactor(), qid, depth_, false, &q); !e.empty())
    return e;
  epoch_ = tried_ = ctrl_->epoch();
  q->set_on_failure(&IoQueueImpl::on_inline_failure, this);
  inline_ = std::move(q);
  return "";
}

void IoQueueImpl::fail_list(std::vector<uint16_t>& list, const Completion& c) {
  // Callbacks may submit again (onto this list): only what is there now.
  scratch_.clear();
  scratch_.swap(list);
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
           std::to_string(ctrl_->options().connection_depth) + ")";
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
  const ControllerState st = ctrl_->state();
  if (st == ControllerState::kClosed || closed_) return -ENODEV;
  const Namespace* ns = ctrl_->find_namespace(nsid);
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
    if (ctrl_->max_transfer() && bytes > ctrl_->max_transfer()) return -EINVAL;
    if (bytes > ctrl_->options().max_transfer) return -EINVAL;
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
      if (ctrl_->may_hold()) {
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
