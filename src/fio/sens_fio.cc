// The C interface of the fio engine over the host library (see sens_fio.h).
#include "fio/sens_fio.h"

#include <sens/host.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct SharedController {
  std::unique_ptr<sens::Controller> ctrl;
  int users = 0;
};
std::mutex g_mu;
std::map<std::string, SharedController>& controllers() {
  static auto* m = new std::map<std::string, SharedController>;  // outlives exit handlers
  return *m;
}

void set_error(char* err, size_t len, const std::string& what) {
  if (err && len) std::snprintf(err, len, "%s", what.c_str());
}

bool options(const sens_fio_opts* o, sens::ControllerOptions* out, std::string* why) {
  sens::ControllerOptions co;
  if (o->share && *o->share && !sens::parse_share_mode(o->share, &co.share)) {
    *why = std::string("sens_share '") + o->share + "': expected none, lock or sendlist";
    return false;
  }
  if (o->coalesce && *o->coalesce) co.coalesce = o->coalesce;
  if (o->poll && *o->poll) co.poll = o->poll;
  const unsigned jobs = o->jobs ? o->jobs : 1;
  co.connections = o->connections ? o->connections : 1;
  co.connection_depth = std::min<unsigned>(
      (jobs + co.connections - 1) / co.connections * (o->depth ? o->depth : 1), 1023);
  co.max_io_queues = co.share == sens::ShareMode::kNone ? std::max(jobs, 1u) + 1 : co.connections;
  co.ctrl_loss_tmo_s = 0;
  *out = co;
  return true;
}

std::string key(const sens_fio_opts* o) {
  return std::string(o->trid ? o->trid : "") + "|" + (o->share ? o->share : "") + "|" +
         std::to_string(o->connections) + "|" + (o->coalesce ? o->coalesce : "");
}

const sens::Namespace* pick(const sens::Controller& c, unsigned nsid) {
  if (nsid == 0) return c.namespaces().empty() ? nullptr : &c.namespaces()[0];
  return c.find_namespace(nsid);
}

}  // namespace

struct sens_fio_queue {
  std::string key;
  sens::Controller* ctrl = nullptr;
  sens::Namespace ns;
  std::unique_ptr<sens::Poller> poller;
  std::unique_ptr<sens::IoQueue> q;
  std::vector<std::pair<void*, int>> done;  // completed, not yet reaped
  size_t head = 0;
  uint64_t completed = 0;
};

extern "C" int sens_fio_probe(const sens_fio_opts* o, uint64_t* bytes, uint32_t* block_size,
                              char* err, size_t errlen) {
  sens::ControllerOptions co;
  std::string why;
  if (!options(o, &co, &why)) return set_error(err, errlen, why), -1;
  co.share = sens::ShareMode::kNone;
  sens::ConnectResult r = sens::Controller::connect(o->trid ? o->trid : "", co).get();
  if (!r.controller) return set_error(err, errlen, r.error), -1;
  const sens::Namespace* ns = pick(*r.controller, o->nsid);
  if (!ns) return set_error(err, errlen, "no such namespace"), -1;
  *bytes = ns->bytes();
  *block_size = ns->block_size;
  return 0;
}

extern "C" sens_fio_queue* sens_fio_queue_open(const sens_fio_opts* o, char* err, size_t errlen) {
  auto q = std::make_unique<sens_fio_queue>();
  q->key = key(o);
  {
    std::lock_guard<std::mutex> g(g_mu);
    SharedController& s = controllers()[q->key];
    if (!s.ctrl) {
      sens::ControllerOptions co;
      std::string why;
      if (!options(o, &co, &why)) return set_error(err, errlen, why), nullptr;
      sens::ConnectResult r = sens::Controller::connect(o->trid ? o->trid : "", co).get();
      if (!r.controller) return set_error(err, errlen, r.error), nullptr;
      s.ctrl = std::move(r.controller);
    }
    ++s.users;
    q->ctrl = s.ctrl.get();
  }
  const sens::Namespace* ns = pick(*q->ctrl, o->nsid);
  if (!ns) {
    sens_fio_queue_close(q.release());
    return set_error(err, errlen, "no such namespace"), nullptr;
  }
  q->ns = *ns;
  sens::PollerOptions po;
  if (o->poll && *o->poll) po.poll = o->poll;
  q->poller = std::make_unique<sens::Poller>(po);
  std::string why;
  q->q = q->ctrl->create_io_queue(q->poller.get(), o->depth ? o->depth : 1, &why);
  if (!q->q) {
    sens_fio_queue_close(q.release());
    return set_error(err, errlen, why), nullptr;
  }
  q->done.reserve(o->depth + 1);
  return q.release();
}

extern "C" void sens_fio_queue_close(sens_fio_queue* q) {
  if (!q) return;
  q->q.reset();
  q->poller.reset();
  std::lock_guard<std::mutex> g(g_mu);
  auto it = controllers().find(q->key);
  if (it != controllers().end() && --it->second.users <= 0) controllers().erase(it);
  delete q;
}

extern "C" int sens_fio_submit(sens_fio_queue* q, int op, uint64_t offset, uint64_t len, void* buf,
                               void* cookie) {
  const uint32_t bs = q->ns.block_size;
  if (offset % bs || len % bs) return -EINVAL;
  // The callback context carries fio's io_u and the iovec, which must live until the
  // completion; contexts are pooled per thread (a job's thread), grown to the depth once.
  struct Ctx {
    sens_fio_queue* q;
    void* cookie;
    iovec iov;
  };
  static thread_local std::vector<std::unique_ptr<Ctx>> pool;  // grown once, reused
  static thread_local std::vector<Ctx*> free_list;
  if (free_list.empty()) {
    pool.push_back(std::make_unique<Ctx>());
    free_list.push_back(pool.back().get());
  }
  Ctx* c = free_list.back();
  free_list.pop_back();
  c->q = q;
  c->cookie = cookie;
  c->iov = {buf, size_t(len)};
  auto cb = [](void* ctx, const sens::Completion& done) {
    auto* c = static_cast<Ctx*>(ctx);
    c->q->done.push_back({c->cookie, done.status.ok() ? 0 : EIO});
    ++c->q->completed;
    free_list.push_back(c);
  };
  const uint32_t nsid = q->ns.nsid;
  int rc;
  switch (op) {
    case 0:
      rc = q->q->read(nsid, offset / bs, uint32_t(len / bs), &c->iov, 1, cb, c);
      break;
    case 1:
      rc = q->q->write(nsid, offset / bs, uint32_t(len / bs), &c->iov, 1, cb, c);
      break;
    case 2:
      rc = q->q->flush(nsid, cb, c);
      break;
    case 3:
      rc = q->q->deallocate(nsid, offset / bs, uint32_t(len / bs), cb, c);
      break;
    default:
      rc = -EINVAL;
  }
  if (rc != 0) free_list.push_back(c);
  return rc;
}

extern "C" void sens_fio_poll(sens_fio_queue* q, int64_t timeout_ns) {
  q->poller->process_completions(0, timeout_ns);
}

extern "C" unsigned sens_fio_reap(sens_fio_queue* q, void** cookies, int* errors, unsigned max) {
  unsigned n = 0;
  while (n < max && q->head < q->done.size()) {
    cookies[n] = q->done[q->head].first;
    errors[n] = q->done[q->head].second;
    ++q->head;
    ++n;
  }
  if (q->head == q->done.size()) {
    q->done.clear();
    q->head = 0;
  }
  return n;
}

extern "C" void sens_fio_stats(sens_fio_queue* q, char* out, size_t len) {
  const sens::LoopStats r = q->poller->stats();
  const double n = q->completed ? double(q->completed) : 1.0;
  int used = std::snprintf(out, len,
                           "%llu I/Os; per I/O: epoll %.3f (sleeps %.3f, empty spins %.3f, "
                           "yields %.3f, wake-ups %.3f)",
                           (unsigned long long)q->completed, r.polls / n, r.sleeps / n, r.spins / n,
                           r.yields / n, r.wakeups / n);
  if (used < 0 || size_t(used) >= len) return;
  out += used;
  len -= size_t(used);
  // Its own connection's counters are this queue's (read here, on its thread); a shared one's
  // are its owner thread's, for every job sharing it, so they are totals, not per I/O.
  const sens::ConnectionStats c = q->q->stats();
  const uint64_t flushes = c.total_flushes();
  const double per_flush = flushes ? double(c.pdus_sent()) / double(flushes) : 0.0;
  const int index = q->q->connection();
  if (index < 0) {
    if (q->q->qid() == 0) return;  // its connection is down
    std::snprintf(out, len, ", send %.3f recv %.3f; %.2f PDUs per flush (its own connection)",
                  double(c.sendmsg_calls()) / n, double(c.recv_calls()) / n, per_flush);
    return;
  }
  const uint64_t passes = c.drain_passes(), entries = c.drain_entries();
  std::snprintf(out, len,
                "; shared connection %d (%s, every job on it): %llu sends, %llu recvs, %.2f PDUs "
                "per flush, %.1f send-list entries per drained pass",
                index, sens::share_mode_name(q->ctrl->options().share),
                (unsigned long long)c.sendmsg_calls(), (unsigned long long)c.recv_calls(),
                per_flush, passes ? double(entries) / double(passes) : 0.0);
}
