// QoS limits at run time (qos_set over the management RPC, SIGHUP, load_config) and at start:
// the subsystem's limits go to every reactor as a message (on_every_reactor), which replaces
// that reactor's limiters for the subsystem; the data path reads them on its own thread only.
#include "common/log.h"
#include "target/target.h"

namespace sens::target {

void Target::publish_qos(const Subsystem* sub, const qos::Config& config) {
  if (!sub) return;
  // Each reactor enforces its share (qos.h says why a split, not a shared bucket).
  uint32_t share = uint32_t(std::max<size_t>(ctxs_.size(), 1));
  on_every_reactor(
      [sub, &config, share](ReactorContext& ctx) { ctx.qos.apply(sub, config, share); });
}

qos::Config Target::qos_config(const std::string& nqn, std::string* error) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  for (auto& s : live_.subsystems)
    if (s.nqn == nqn) return s.qos;
  *error = "no subsystem '" + nqn + "'";
  return {};
}

std::string Target::set_qos(const std::string& nqn, const qos::Config& wanted) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  Subsystem* sub = registry_.find(nqn);
  SubsystemConfig* sc = nullptr;
  for (auto& s : live_.subsystems)
    if (s.nqn == nqn) sc = &s;
  if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
  qos::Config config;  // entities left with no limit are dropped
  for (auto& [nsid, l] : wanted.namespaces)
    if (l.any()) config.namespaces[nsid] = l;
  for (auto& [host, l] : wanted.hosts)
    if (l.any()) config.hosts[host] = l;
  if (auto error = qos::check_config(config); !error.empty())
    return "subsystem '" + nqn + "': " + error;
  if (config == sc->qos) return "";
  sc->qos = config;  // (saved by save_config)
  publish_qos(sub, config);
  LOG_INFO("qos of %s: %zu namespace(s) and %zu host(s) limited", nqn.c_str(),
           config.namespaces.size(), config.hosts.size());
  return "";
}

}  // namespace sens::target
