#include "mgmt/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace sens::mgmt {

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  // The shortest text that reads back as the same double (5e-06, not 5.0000000000000004e-06).
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void Exposition::family(const std::string& name, const char* type, std::string_view help) {
  text_ += "# HELP " + name + " " + escape_help(help) + "\n";
  text_ += "# TYPE " + name + " " + type + "\n";
}

void Exposition::labels(const Labels& l) {
  if (l.empty()) return;
  text_ += '{';
  bool first = true;
  for (auto& [k, v] : l) {
    if (!first) text_ += ',';
    first = false;
    text_ += k + "=\"" + escape_label_value(v) + "\"";
  }
  text_ += '}';
}

void Exposition::sample(const std::string& name, const Labels& l, double value) {
  text_ += name;
  labels(l);
  text_ += ' ' + format_value(value) + '\n';
}

void Exposition::sample(const std::string& name, const Labels& l, uint64_t value) {
  text_ += name;
  labels(l);
  text_ += ' ' + std::to_string(value) + '\n';
}

// ---------------------------------------------------------------------------- the target's

namespace {

using target::IoKind;
using target::kIoKinds;
using target::NsIoMetrics;
using target::ReactorSnapshot;

Labels with(Labels l, const std::string& k, const std::string& v) {
  l.emplace_back(k, v);
  return l;
}

std::string hex_status(uint16_t s) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%03x", s);
  return buf;
}

// One series per reactor of a counter or gauge read from its snapshot.
template <typename F>
void per_reactor(Exposition& e, const std::vector<ReactorSnapshot>& rs, const std::string& name,
                 const char* type, const char* help, F value) {
  e.family(name, type, help);
  for (auto& r : rs) e.sample(name, {{"reactor", std::to_string(r.index)}}, uint64_t(value(r)));
}

// A sens::Histogram as Prometheus buckets: `bounds` in the histogram's unit, `divisor` turns
// that unit into the exposed one (1e9: ns to seconds).
void histogram(Exposition& e, const std::string& name, const Labels& l, const Histogram& h,
               const std::vector<uint64_t>& bounds, double divisor) {
  for (uint64_t b : bounds)
    e.sample(name + "_bucket", with(l, "le", format_value(double(b) / divisor)),
             h.count_at_most(b));
  e.sample(name + "_bucket", with(l, "le", "+Inf"), h.count());
  e.sample(name + "_sum", l, double(h.sum()) / divisor);
  e.sample(name + "_count", l, h.count());
}

void io_metrics(Exposition& e, const target::MetricsSnapshot& m) {
  // Every reactor's entries summed by (subsystem, nsid); configured namespaces always appear.
  std::map<std::pair<std::string, uint32_t>, NsIoMetrics> sum;
  for (auto& [nqn, nsid] : m.namespaces) sum[{nqn, nsid}];
  for (auto& r : m.reactors)
    for (auto& ns : r.namespaces) {
      auto& t = sum[{ns.nqn, ns.nsid}];
      for (size_t k = 0; k < kIoKinds; ++k) {
        auto& to = t.ops[k];
        const auto& from = ns.ops[k];
        to.commands += from.commands;
        to.bytes += from.bytes;
        for (size_t b = 0; b < to.latency.counts.size(); ++b)
          to.latency.counts[b] += from.latency.counts[b];
        to.latency.sum_ns += from.latency.sum_ns;
      }
      for (auto& [status, n] : ns.errors) {
        bool found = false;
        for (auto& te : t.errors)
          if (te.first == status) te.second += n, found = true;
        if (!found) t.errors.emplace_back(status, n);
      }
      t.inflight += ns.inflight;
    }
  auto ns_labels = [](const std::pair<std::string, uint32_t>& key) {
    return Labels{{"subsystem", key.first}, {"nsid", std::to_string(key.second)}};
  };
  // Read, write and flush always have their series; the rarer opcodes once they were seen.
  auto shown = [](const NsIoMetrics& ns, size_t k) {
    return k <= size_t(IoKind::kFlush) || ns.ops[k].commands > 0;
  };
  e.family("sens_io_commands_total", "counter",
           "NVMe I/O commands completed (any status), by subsystem, namespace (nsid 0: no "
           "single namespace) and opcode");
  for (auto& [key, ns] : sum)
    for (size_t k = 0; k < kIoKinds; ++k)
      if (shown(ns, k))
        e.sample("sens_io_commands_total",
                 with(ns_labels(key), "opcode", target::io_kind_name(IoKind(k))),
                 ns.ops[k].commands);
  e.family("sens_io_bytes_total", "counter",
           "Data bytes moved by successful reads and writes, by subsystem, namespace and opcode");
  for (auto& [key, ns] : sum)
    for (IoKind k : {IoKind::kRead, IoKind::kWrite})
      e.sample("sens_io_bytes_total", with(ns_labels(key), "opcode", target::io_kind_name(k)),
               ns.ops[size_t(k)].bytes);
  e.family("sens_io_errors_total", "counter",
           "NVMe I/O commands completed with an error, by subsystem, namespace and NVMe status "
           "((SCT << 8) | SC, hexadecimal)");
  for (auto& [key, ns] : sum)
    for (auto& [status, n] : ns.errors)
      e.sample("sens_io_errors_total", with(ns_labels(key), "status", hex_status(status)), n);
  e.family("sens_io_inflight_commands", "gauge",
           "NVMe I/O commands received and not yet answered, by subsystem and namespace");
  for (auto& [key, ns] : sum) e.sample("sens_io_inflight_commands", ns_labels(key), ns.inflight);
  const std::string lat = "sens_io_latency_seconds";
  e.family(lat, "histogram",
           "NVMe I/O command latency in the target, from the reactor pass that read its capsule "
           "to the end of the pass that queued its response (when the pass's answers are "
           "sent), by subsystem, namespace and opcode");
  for (auto& [key, ns] : sum)
    for (size_t k = 0; k < kIoKinds; ++k) {
      if (!shown(ns, k)) continue;
      Labels l = with(ns_labels(key), "opcode", target::io_kind_name(IoKind(k)));
      const auto& h = ns.ops[k].latency;
      uint64_t cum = 0;
      for (size_t b = 0; b < target::kLatencyBounds.size(); ++b) {
        cum += h.counts[b];
        e.sample(lat + "_bucket",
                 with(l, "le", format_value(double(target::kLatencyBounds[b]) / 1e9)), cum);
      }
      cum += h.counts.back();
      e.sample(lat + "_bucket", with(l, "le", "+Inf"), cum);
      e.sample(lat + "_sum", l, double(h.sum_ns) / 1e9);
      e.sample(lat + "_count", l, cum);
    }
}

void subsystem_metrics(Exposition& e, const target::MetricsSnapshot& m) {
  std::map<std::string, uint64_t> conns;
  for (auto& nqn : m.subsystems) conns[nqn];
  for (auto& r : m.reactors)
    for (auto& [nqn, n] : r.connections) conns[nqn] += n;
  e.family("sens_connections", "gauge",
           "Open NVMe/TCP connections (queues), by subsystem (\"\": not connected to one yet)");
  for (auto& [nqn, n] : conns) e.sample("sens_connections", {{"subsystem", nqn}}, n);
  e.family("sens_controllers", "gauge", "Live controllers, by subsystem");
  for (auto& [nqn, n] : m.controllers) e.sample("sens_controllers", {{"subsystem", nqn}}, n);
  e.family("sens_dhchap_authentications_total", "counter",
           "DH-HMAC-CHAP exchanges that ended, by result");
  e.sample("sens_dhchap_authentications_total", {{"result", "success"}}, m.auth_succeeded);
  e.sample("sens_dhchap_authentications_total", {{"result", "failure"}}, m.auth_failed);
  e.family("sens_dhchap_negotiations", "gauge",
           "DH-HMAC-CHAP negotiations with a DH group: in progress (holding a slot), waiting "
           "for one, and the limit (--dhchap-negotiations)");
  e.sample("sens_dhchap_negotiations", {{"state", "active"}}, m.negotiations_active);
  e.sample("sens_dhchap_negotiations", {{"state", "waiting"}}, m.negotiations_waiting);
  e.sample("sens_dhchap_negotiations", {{"state", "limit"}}, m.negotiations_limit);
  e.family("sens_dhchap_negotiations_total", "counter",
           "DH-HMAC-CHAP negotiations with a DH group, by what became of their slot");
  e.sample("sens_dhchap_negotiations_total", {{"result", "admitted"}}, m.negotiations_admitted);
  e.sample("sens_dhchap_negotiations_total", {{"result", "queued"}}, m.negotiations_queued);
  e.sample("sens_dhchap_negotiations_total", {{"result", "refused"}}, m.negotiations_refused);
  e.sample("sens_dhchap_negotiations_total", {{"result", "timed_out"}}, m.negotiations_timed_out);
  uint64_t tls_failed = 0;
  for (auto& r : m.reactors) tls_failed += r.tls_handshake_failures;
  e.family("sens_tls_handshake_failures_total", "counter",
           "TLS handshakes that failed on a TLS listener (the connection was closed)");
  e.sample("sens_tls_handshake_failures_total", {}, tls_failed);
  uint64_t tls_sessions[4] = {};
  for (auto& r : m.reactors)
    for (int k = 0; k < 4; ++k) tls_sessions[k] += r.tls_sessions[k];
  e.family("sens_tls_sessions_total", "counter",
           "TLS sessions established, by who protects their records after the handshake "
           "(kernel: kTLS; sens: sealed into the send batch and opened into the PDU's buffer; "
           "openssl) and whose AES-GCM computes them (kernel, ipsec-mb, openssl)");
  e.sample("sens_tls_sessions_total", {{"records", "kernel"}, {"aes_gcm", "kernel"}},
           tls_sessions[3]);
  e.sample("sens_tls_sessions_total", {{"records", "sens"}, {"aes_gcm", "ipsec-mb"}},
           tls_sessions[0]);
  e.sample("sens_tls_sessions_total", {{"records", "sens"}, {"aes_gcm", "openssl"}},
           tls_sessions[1]);
  e.sample("sens_tls_sessions_total", {{"records", "openssl"}, {"aes_gcm", "openssl"}},
           tls_sessions[2]);
  // issue 29: the stall deadlines (--stall-timeout)
  e.family("sens_stalled_connections_total", "counter",
           "Connections ended because a send, H2CData or a PDU stalled for --stall-timeout");
  const char* const stall_kinds[] = {"", "send", "h2c", "pdu"};
  for (int k = 1; k < 4; ++k) {
    uint64_t n = 0;
    for (auto& r : m.reactors) n += r.stalled[k];
    e.sample("sens_stalled_connections_total", {{"kind", stall_kinds[k]}}, n);
  }
}

void reactor_metrics(Exposition& e, const target::MetricsSnapshot& m) {
  const auto& rs = m.reactors;
  per_reactor(e, rs, "sens_inflight_commands", "gauge",
              "Commands (admin and I/O) of open connections not yet answered, per reactor",
              [](auto& r) { return r.inflight; });
  per_reactor(e, rs, "sens_connections_closed_total", "counter",
              "Connections closed and reaped, per reactor",
              [](auto& r) { return r.connections_closed; });
  per_reactor(e, rs, "sens_qos_throttled_commands_total", "counter",
              "I/O commands that waited for QoS tokens (a limit of their namespace or host)",
              [](auto& r) { return r.qos_throttled; });
  e.family("sens_qos_delay_seconds_total", "counter", "Time I/O commands waited for QoS tokens");
  for (auto& r : rs)
    e.sample("sens_qos_delay_seconds_total", {{"reactor", std::to_string(r.index)}},
             double(r.qos_delay_ns) / 1e9);
  per_reactor(e, rs, "sens_reactor_polls_total", "counter", "Event polls (epoll_pwait2 calls)",
              [](auto& r) { return r.reactor.polls; });
  per_reactor(e, rs, "sens_reactor_sleeps_total", "counter",
              "Polls that could block (a timeout other than zero)",
              [](auto& r) { return r.reactor.sleeps; });
  per_reactor(e, rs, "sens_reactor_spins_total", "counter",
              "Zero-timeout polls by hybrid polling's choice that found nothing",
              [](auto& r) { return r.reactor.spins; });
  per_reactor(e, rs, "sens_reactor_yields_total", "counter",
              "Spinning polls that first yielded the CPU (more reactors than CPUs)",
              [](auto& r) { return r.reactor.yields; });
  per_reactor(e, rs, "sens_reactor_wakeups_total", "counter",
              "Polls that returned events or fired timers",
              [](auto& r) { return r.reactor.wakeups; });
  per_reactor(e, rs, "sens_reactor_timers_fired_total", "counter", "Timers fired",
              [](auto& r) { return r.reactor.timers_fired; });

  // Buffer pools: the general one (reads, R2T data, admin pages) and in-capsule data's.
  struct Pool {
    const char* name;
    const char* type;
    const char* help;
    uint64_t (*general)(const ReactorSnapshot&);
    uint64_t (*inline_)(const ReactorSnapshot&);
  };
  const Pool pools[] = {
      {"sens_buffer_pool_in_use_bytes", "gauge", "Bytes of buffers handed out",
       [](const ReactorSnapshot& r) { return r.pool.in_use_bytes; },
       [](const ReactorSnapshot& r) { return r.inline_pool.in_use_bytes; }},
      {"sens_buffer_pool_allocated_bytes", "gauge",
       "Bytes carved from the system (in use or cached for reuse)",
       [](const ReactorSnapshot& r) { return r.pool.allocated_bytes; },
       [](const ReactorSnapshot& r) { return r.inline_pool.allocated_bytes; }},
      {"sens_buffer_pool_capacity_bytes", "gauge", "The most bytes the pool takes (its bound)",
       [](const ReactorSnapshot& r) { return r.pool_limit; },
       [](const ReactorSnapshot& r) { return r.inline_pool_limit; }},
      {"sens_buffer_pool_gets_total", "counter", "Buffers asked for",
       [](const ReactorSnapshot& r) { return r.pool.gets; },
       [](const ReactorSnapshot& r) { return r.inline_pool.gets; }},
      {"sens_buffer_pool_waits_total", "counter",
       "Requests for a buffer that found the pool at its bound and waited",
       [](const ReactorSnapshot& r) { return r.pool.waits; },
       [](const ReactorSnapshot& r) { return r.inline_pool.waits; }},
      {"sens_buffer_pool_share_capped_total", "counter",
       "Requests for a buffer refused because their connection held its share (--pool-share)",
       [](const ReactorSnapshot& r) { return r.pool.share_capped; },
       [](const ReactorSnapshot& r) { return r.inline_pool.share_capped; }},
      {"sens_buffer_pool_waiting", "gauge", "Requests waiting for a buffer now",
       [](const ReactorSnapshot& r) { return r.pool.waiting; },
       [](const ReactorSnapshot& r) { return r.inline_pool.waiting; }},
  };
  for (auto& p : pools) {
    e.family(p.name, p.type, std::string(p.help) + ", per reactor and pool (general, inline)");
    for (auto& r : rs) {
      std::string idx = std::to_string(r.index);
      e.sample(p.name, {{"reactor", idx}, {"pool", "general"}}, p.general(r));
      e.sample(p.name, {{"reactor", idx}, {"pool", "inline"}}, p.inline_(r));
    }
  }
}

void coalesce_metrics(Exposition& e, const target::MetricsSnapshot& m) {
  const auto& rs = m.reactors;
  e.family("sens_coalesce_policy_info", "gauge", "The coalescing policy (value 1)");
  e.sample("sens_coalesce_policy_info", {{"policy", m.coalesce_policy}}, uint64_t(1));
  per_reactor(e, rs, "sens_coalesce_pdus_sent_total", "counter", "PDUs sent, per reactor",
              [](auto& r) { return r.coalesce.pdus_sent; });
  per_reactor(e, rs, "sens_coalesce_send_calls_total", "counter", "sendmsg() calls, per reactor",
              [](auto& r) { return r.coalesce.send_calls; });
  per_reactor(e, rs, "sens_coalesce_holds_total", "counter",
              "Adaptive policy: pass ends at which a group was held, not flushed",
              [](auto& r) { return r.coalesce.holds; });
  e.family("sens_coalesce_flushes_total", "counter", "PDU group flushes, per reactor and reason");
  for (auto& r : rs)
    for (size_t i = 1; i < size_t(coalesce::FlushReason::kCount); ++i)
      e.sample("sens_coalesce_flushes_total",
               {{"reactor", std::to_string(r.index)},
                {"reason", coalesce::reason_name(coalesce::FlushReason(i))}},
               r.coalesce.flushes[i]);
  const std::string ppf = "sens_coalesce_pdus_per_flush";
  e.family(ppf, "histogram", "PDUs handed to the socket per flush, per reactor");
  for (auto& r : rs)
    histogram(e, ppf, {{"reactor", std::to_string(r.index)}}, r.coalesce.pdus_per_flush,
              {1, 2, 4, 8, 16, 32, 64, 128}, 1.0);
  const std::vector<uint64_t> delay_ns = {1000,   2000,   5000,   10000,   20000,   50000,
                                          100000, 200000, 500000, 1000000, 10000000};
  const std::string r2t = "sens_coalesce_r2t_delay_seconds";
  e.family(r2t, "histogram",
           "R2T queueing delay: from an R2T entering its PDU group to the group's flush, per "
           "reactor");
  for (auto& r : rs)
    histogram(e, r2t, {{"reactor", std::to_string(r.index)}}, r.coalesce.r2t_delay_ns, delay_ns,
              1e9);
}

}  // namespace

std::string render(const target::MetricsSnapshot& m) {
  Exposition e;
  io_metrics(e, m);
  subsystem_metrics(e, m);
  reactor_metrics(e, m);
  coalesce_metrics(e, m);
  return e.text();
}

}  // namespace sens::mgmt
