// Stopping a target gracefully (SIGTERM/SIGINT of `sens target`, a service stop): no new
// connections, the commands already started answered, then the connections closed, the
// threads joined and the namespaces flushed.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "common/log.h"
#include "target/target.h"
#include "target/tcp_queue.h"

namespace sens::target {

using Clock = std::chrono::steady_clock;

void ReactorContext::quiesce_all() {
  for (auto& [id, c] : conns_) c->quiesce();
  qos.lift_all();  // throttled commands are answered now, not at the limits' pace
}

uint32_t ReactorContext::unanswered(std::string* detail) const {
  uint32_t n = 0;
  for (auto& [id, c] : conns_) {
    if (c->closed()) continue;  // its device I/O is waited for after the close
    uint32_t k = c->unanswered();
    if (k && detail) *detail += (detail->empty() ? "" : "; ") + c->describe_unanswered();
    n += k;
  }
  return n;
}

bool Target::run_on(size_t i, std::function<void()> fn, Clock::time_point deadline) {
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  ctxs_[i]->reactor.post([fn = std::move(fn), done] {
    fn();
    done->set_value();
  });
  return f.wait_until(deadline) == std::future_status::ready;
}

void Target::stop() {
  if (!running_) return;
  // 1. No new connections; the ones accepted already are adopted before the quiesce below,
  // which each reactor runs after them.
  close_listeners();
  // Negotiations waiting for a slot are refused now (the reactors answer them below).
  negotiations_->stop_waiting();
  // 2. Commands that arrive from now on are held; the started ones run to their response.
  // A host that keeps its connection quiet (no H2CData for an R2T, no room to receive) is
  // waited for up to 10 s, then named in the log.
  auto start = Clock::now();
  auto deadline = start + std::chrono::seconds(10);
  for (auto& ctx : ctxs_) ctx->reactor.post([c = ctx.get()] { c->quiesce_all(); });
  uint32_t first = 0, left = 0;
  std::string detail;
  for (bool once = true;; once = false) {
    left = 0;
    detail.clear();
    for (size_t i = 0; i < ctxs_.size(); ++i) {
      // Shared: a reactor that answers after the deadline writes into it still.
      auto found = std::make_shared<std::pair<uint32_t, std::string>>();
      auto count = [found, c = ctxs_[i].get()] { found->first = c->unanswered(&found->second); };
      if (!run_on(i, count, Clock::now() + std::chrono::seconds(2))) {
        left = 1;
        detail = "reactor " + std::to_string(i) + " does not answer";
        break;
      }
      left += found->first;
      if (!found->second.empty()) detail += (detail.empty() ? "" : "; ") + found->second;
    }
    if (once) first = left;
    if (left == 0 || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  if (left)
    LOG_WARN("stop: commands still unanswered after %lld ms, closing anyway: %s",
             static_cast<long long>(ms), detail.c_str());
  else if (first)
    LOG_INFO("stop: %u command(s) in flight answered in %lld ms", first,
             static_cast<long long>(ms));
  // 3. Close the connections (what is queued is sent first). Device I/O still in flight
  // writes into their buffers: let it complete (up to 5 s more) before the loops stop.
  for (auto& ctx : ctxs_) ctx->reactor.post([c = ctx.get()] { c->close_all("target stopping"); });
  deadline = Clock::now() + std::chrono::seconds(5);
  for (auto& ctx : ctxs_) {
    ReactorContext* c = ctx.get();
    for (;;) {
      auto owed = std::make_shared<std::promise<uint32_t>>();
      auto f = owed->get_future();
      c->reactor.post([c, owed] { owed->set_value(c->inflight_io()); });
      bool answered = f.wait_until(deadline) == std::future_status::ready;
      if (!answered || f.get() == 0 || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    c->reactor.stop();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  registry_.stop_workers();
  negotiations_->stop_workers();
  running_ = false;
  close_listeners();  // if the reactor did not close them in time
  // Namespaces removed live whose last commands the stop cut off (live.cc).
  for (auto& d : draining_) {
    for (auto& ctx : ctxs_) ctx->forget_namespace(d.ns.get());
    d.ns->reservations.worker().stop();
    d.ns->device->sync();
  }
  draining_.clear();
  // 4. File namespaces: fdatasync.
  registry_.sync_all();
}

}  // namespace sens::target
