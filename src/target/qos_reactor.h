#pragma once
// The QoS limiters of one reactor (qos.h): per subsystem, one per limited namespace and one
// per limited host NQN, each with the timer that lets its waiters go when their tokens have
// refilled. Only the reactor's own thread touches it: a live change (Target::set_qos) reaches
// it as a message on every reactor, and a queue notices the change by its generation (one
// compare per command), so the data path takes no lock and allocates nothing.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "reactor/reactor.h"
#include "target/qos.h"

namespace sens::target {

class Subsystem;

class ReactorQos {
 public:
  // Runs for each waiter a limiter lets go (from its timer or a change, on the reactor's
  // thread, never inside admit()).
  using Resume = void (*)(qos::Waiter& w);
  ReactorQos(Reactor& reactor, Resume resume);
  ~ReactorQos();

  // One entity's limiter and its timer.
  class Entry {
   public:
    explicit Entry(ReactorQos& owner);
    // true: the command may go now. false: it waits in `w` and goes through Resume later.
    bool admit(qos::Waiter& w, qos::Dir dir, uint32_t bytes) {
      if (limiter.admit(w, dir, bytes)) return true;
      if (!timer.armed()) arm();
      return false;
    }
    qos::Limiter limiter;

   private:
    friend class ReactorQos;
    void arm();
    void fire();
    ReactorQos& owner_;
    Timer timer;
  };
  // A subsystem's limiters on this reactor.
  struct Sub {
    std::vector<std::unique_ptr<Entry>> ns;  // by nsid - 1 (null: no limit)
    std::unordered_map<std::string, std::unique_ptr<Entry>> hosts;
    Entry* ns_entry(uint32_t nsid) const {
      return nsid - 1 < ns.size() ? ns[nsid - 1].get() : nullptr;
    }
  };

  // Bumped by every change: a queue that cached pointers looks them up again.
  uint64_t generation() const { return generation_; }
  const Sub* find(const Subsystem* sub) const;
  Entry* host_entry(const Subsystem* sub, const std::string& hostnqn) const;
  // `sub`'s limits on this reactor from now on, each divided by `share` (an empty config:
  // none). Waiters of a limit lifted go at once; those of a limit changed wait by the new
  // rates.
  void apply(const Subsystem* sub, const qos::Config& config, uint32_t share);
  // A graceful stop: every limit is lifted on this reactor and the waiters go at once (the
  // stop waits for the commands already started; tokens would make it wait by the rate).
  void lift_all();
  // Every limiter's counters summed (those removed since included).
  qos::Counters totals() const;
  // {"limited_commands": n, "throttled": n, "delay_us": n}
  nlohmann::json stats_json() const;
  void reset_counters();
  // The shortest wait a timer is armed for: at high rates one firing lets a batch go
  // rather than one command each time (the bucket holds 10 ms: nothing is lost).
  static constexpr Nanos kMinTick = 50 * kMicro;

 private:
  void retire(std::unique_ptr<Entry> e);  // lets its waiters go, keeps its counts
  Reactor& reactor_;
  Resume resume_;
  uint64_t generation_ = 0;
  std::unordered_map<const Subsystem*, Sub> subs_;
  qos::Counters retired_;
};

}  // namespace sens::target
