#include "mgmt/methods.h"

namespace sens::mgmt {

const char* param_type_name(ParamType t) {
  switch (t) {
    case ParamType::kString:
      return "a string";
    case ParamType::kInt:
      return "an integer >= 0";
    case ParamType::kBool:
      return "true or false";
    case ParamType::kSize:
      return "a size (bytes, or with a unit: 512M, 2G)";
    case ParamType::kStrings:
      return "an array of strings";
  }
  return "?";
}

namespace {

using P = ParamType;

const ParamSpec kNqn{"nqn", P::kString, true, "the subsystem's NQN"};
const ParamSpec kNsid{"nsid", P::kInt, true, "the namespace ID"};
const ParamSpec kHost{"host", P::kString, true, "the host's NQN"};

std::vector<MethodSpec> make_specs() {
  return {
      {"rpc_get_methods",
       "Lists the methods with their parameters.",
       "sens rpc rpc_get_methods",
       {}},
      {"framework_wait_init",
       "Answers once the target serves (its listeners are bound and its reactors run); the "
       "socket opens only then, so `sens rpc --wait S framework_wait_init` waits for a start.",
       "sens rpc --wait 10 framework_wait_init",
       {}},
      {"subsystem_list",
       "Every I/O subsystem with its namespaces, hosts, listeners and controllers.",
       "sens rpc subsystem_list",
       {{"nqn", P::kString, false, "only this subsystem"}}},
      {"subsystem_create",
       "Creates a subsystem. Without hosts any host may connect (allow_any_host).",
       "sens rpc subsystem_create --nqn nqn.2026-12.io.example:db --namespaces ram:1G",
       {kNqn,
        {"namespaces", P::kStrings, false, "namespace specs, as --ns takes them"},
        {"allowed_hosts", P::kStrings, false, "host NQNs allowed to connect"},
        {"allow_any_host", P::kBool, false, "any host may connect (default: when none is named)"}}},
      {"subsystem_delete",
       "Deletes a subsystem: its controllers are disconnected, its namespaces removed (running "
       "commands finish first).",
       "sens rpc subsystem_delete --nqn nqn.2026-12.io.example:db",
       {kNqn}},
      {"subsystem_allow_any_host",
       "Lets any host connect (true), or only those on the allow-list (false: connected hosts "
       "not on it are disconnected).",
       "sens rpc subsystem_allow_any_host --nqn NQN --allow false",
       {kNqn, {"allow", P::kBool, true, "true: any host"}}},
      {"subsystem_set_security",
       "Requires TLS and/or DH-HMAC-CHAP authentication of every host (no --host) or of one "
       "host, on any listener; connected controllers that no longer qualify are disconnected.",
       "sens rpc subsystem_set_security --nqn NQN --host HOSTNQN --require_tls true",
       {kNqn,
        {"host", P::kString, false, "only this host (default: every host)"},
        {"require_tls", P::kBool, false, "connect over TLS only"},
        {"require_auth", P::kBool, false, "authenticate (the host needs a key) or be refused"}}},
      {"namespace_add",
       "Adds a namespace of any backend --ns takes (ram:, null:, file:, rbd:); connected hosts get "
       "a Namespace Attribute Changed event. Returns its nsid.",
       "sens rpc namespace_add --nqn NQN --spec file:/srv/vol2.img",
       {kNqn,
        {"spec", P::kString, true, "the namespace spec (\"file:/path\", \"ram:1G\", ...)"},
        {"nsid", P::kInt, false, "the nsid (default: the lowest free one)"}}},
      {"namespace_remove",
       "Removes a namespace: commands already running complete, later ones fail with Invalid "
       "Namespace; hosts get a Namespace Attribute Changed event.",
       "sens rpc namespace_remove --nqn NQN --nsid 2",
       {kNqn,
        kNsid,
        {"drain_ms", P::kInt, false,
         "how long to wait for running commands before answering (default 5000)"}}},
      {"namespace_resize",
       "Resizes a namespace (a file is truncated, an RBD image resized); without a size, takes "
       "the size its backing store has now. Hosts get a Namespace Attribute Changed event.",
       "sens rpc namespace_resize --nqn NQN --nsid 1 --size 2G",
       {kNqn, kNsid, {"size", P::kSize, false, "the new size"}}},
      {"host_allow",
       "Allows a host (naming the first host ends allow_any_host), optionally with DH-HMAC-CHAP "
       "keys; for a host already allowed, replaces its keys: connected controllers keep "
       "working, the next authentication uses the new key.",
       "sens rpc host_allow --nqn NQN --host nqn.2014-08.org.nvmexpress:uuid:... --key DHHC-1:...",
       {kNqn,
        kHost,
        {"key", P::kString, false, "the host's DH-HMAC-CHAP secret (DHHC-1:xx:...:)"},
        {"ctrl_key", P::kString, false, "the controller's secret (bidirectional)"}}},
      {"host_disallow",
       "Takes a host (and its keys) off the allow-list and disconnects its controllers.",
       "sens rpc host_disallow --nqn NQN --host HOSTNQN",
       {kNqn, kHost}},
      {"controller_list",
       "Live controllers: cntlid, subsystem, host NQN, address, queues.",
       "sens rpc controller_list",
       {{"nqn", P::kString, false, "only this subsystem's"}}},
      {"controller_disconnect",
       "Closes every queue of a controller (the host may reconnect, if still allowed).",
       "sens rpc controller_disconnect --cntlid 17",
       {{"cntlid", P::kInt, true, "the controller ID"}}},
      {"namespace_set_ana_group",
       "Moves a namespace to another ANA group; hosts get an ANA change and a Namespace "
       "Attribute Changed event.",
       "sens rpc namespace_set_ana_group --nqn NQN --nsid 1 --group 2",
       {kNqn, kNsid, {"group", P::kInt, true, "the ANA group, 1..32"}}},
      {"listener_add",
       "Adds an I/O listener (port 0: any free port; the result says which); its ANA states "
       "are optimized unless ana is given.",
       "sens rpc listener_add --address 0.0.0.0 --port 4421",
       {{"address", P::kString, true, "a numeric IPv4 or IPv6 address"},
        {"port", P::kInt, true, "the TCP port"},
        {"tls", P::kBool, false, "a TLS 1.3 listener (the target needs --tls)"},
        {"ana", P::kString, false,
         "ANA options as --listen takes them: \"non-optimized\" or \"ana.2=inaccessible\""}}},
      {"listener_remove",
       "Closes an I/O listener: no new connection through it; connected hosts stay.",
       "sens rpc listener_remove --address 0.0.0.0 --port 4421",
       {{"address", P::kString, true, "the listener's address"},
        {"port", P::kInt, true, "its port"}}},
      {"listener_list",
       "The listeners with the ANA state of each group through them.",
       "sens rpc listener_list",
       {}},
      {"listener_set_ana",
       "Sets the ANA state of one group (or every group) through an I/O listener; hosts "
       "connected there get an ANA change event.",
       "sens rpc listener_set_ana --address 10.0.0.1 --port 4420 --state inaccessible",
       {{"address", P::kString, true, "the listener's address, as listener_list shows it"},
        {"port", P::kInt, true, "its port"},
        {"state", P::kString, true,
         "optimized, non-optimized, inaccessible, persistent-loss, change"},
        {"group", P::kInt, false, "the ANA group 1..32 (default: every group)"}}},
      {"coalescing_get",
       "The coalescing settings of the target, or of one subsystem.",
       "sens rpc coalescing_get",
       {{"nqn", P::kString, false, "a subsystem retuned on its own"}}},
      {"coalescing_set",
       "Retunes coalescing of every connection (or of one subsystem's), from its next flush; "
       "parameters left out keep their value.",
       "sens rpc coalescing_set --policy sens --pdus 32 --timeout_us 25",
       {{"nqn", P::kString, false, "only this subsystem's connections"},
        {"policy", P::kString, false, "off, uniform, sens, eager, adaptive"},
        {"pdus", P::kInt, false, "B: PDUs per group"},
        {"timeout_us", P::kInt, false, "T: the group's timer, microseconds"},
        {"ctrl_pdus", P::kInt, false, "c2: R2T PDUs that flush at once"},
        {"ctrl_timeout_us", P::kInt, false, "Tc: the R2T timer, microseconds"},
        {"bytes", P::kInt, false, "the byte cap of a group"},
        {"inherit", P::kBool, false,
         "with nqn: the subsystem follows the target's settings again"}}},
      {"stats_get", "The counters, as --stats-json writes them.", "sens rpc stats_get", {}},
      {"stats_reset",
       "Zeroes the counters (coalescing, receive, reactor, authentication, the Prometheus "
       "metrics); gauges such as "
       "open connections and buffers in use stay.",
       "sens rpc stats_reset",
       {}},
      {"log_get_level", "The log level.", "sens rpc log_get_level", {}},
      {"log_set_level",
       "Sets the log level.",
       "sens rpc log_set_level --level debug",
       {{"level", P::kString, true, "error, warn, info or debug"}}},
      {"save_config",
       "The configuration as changed so far, in the JSON that --config reads; written to a file "
       "(mode 0600) when a path is given.",
       "sens rpc save_config --path /etc/sens/target.json --secrets files",
       {{"path", P::kString, false, "write it here (atomically: a temporary file, then rename)"},
        {"secrets", P::kString, false,
         "redact (default: keys as \"(secret)\", which --config refuses; keys read from a "
         "file stay that file), inline, or files (each key in its own 0600 file, the config "
         "naming it)"},
        {"secrets_dir", P::kString, false,
         "files: the directory for the key files (default: keys/ beside path)"}}},
      {"load_config",
       "Applies a configuration file (sens's JSON or nvmetcli's) to the running target through "
       "the live changes, as SIGHUP does with --config; keys the file leaves out keep their "
       "running values. Answers each change made or refused, and what the file could not "
       "carry.",
       "sens rpc load_config --path /etc/nvmet/config.json",
       {{"path", P::kString, true, "the file"}}},
      {"qos_get",
       "A subsystem's QoS limits: {\"namespaces\": {NSID: {...}}, \"hosts\": {NQN: {...}}} "
       "(limits left out are none).",
       "sens rpc qos_get --nqn NQN",
       {kNqn}},
      {"qos_set",
       "Sets the IOPS and bandwidth limits of one namespace (nsid) or one host (host) of a "
       "subsystem, from the next command; limits left out keep their value, 0 lifts one. Each "
       "reactor enforces limit / reactors. Returns the entity's limits.",
       "sens rpc qos_set --nqn NQN --nsid 1 --read_iops 2000 --total_mibps 100",
       {kNqn,
        {"nsid", P::kInt, false, "a namespace's limits (1..1024; it need not exist yet)"},
        {"host", P::kString, false, "a host's limits (its NQN; all its controllers together)"},
        {"read_iops", P::kInt, false, "reads a second (0: no limit)"},
        {"write_iops", P::kInt, false, "writes (and Write Zeroes) a second"},
        {"total_iops", P::kInt, false, "reads and writes a second"},
        {"read_mibps", P::kInt, false, "MiB read a second"},
        {"write_mibps", P::kInt, false, "MiB written a second"},
        {"total_mibps", P::kInt, false, "MiB read and written a second"},
        {"clear", P::kBool, false, "lift every limit of that namespace or host"}}},
  };
}

}  // namespace

const std::vector<MethodSpec>& method_specs() {
  static const std::vector<MethodSpec> specs = make_specs();
  return specs;
}

const MethodSpec* find_method(const std::string& name) {
  for (auto& m : method_specs())
    if (m.name == name) return &m;
  return nullptr;
}

}  // namespace sens::mgmt
