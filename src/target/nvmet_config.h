#pragma once
// The JSON that `nvmetcli save` writes for the Linux kernel target (/etc/nvmet/config.json),
// read into a TargetConfig, so that `sens target --config` starts from a Linux target's file.
// nvmetcli dumps nvmet's configfs tree: "hosts", "ports" and "subsystems", each object's
// attribute groups as nested objects of the attribute files' text ("addr": {"trtype": "tcp",
// "traddr": ..., "trsvcid": "4420"}, "attr": {"allow_any_host": "1", "serial": ...},
// "device": {"path": ..., "uuid": ..., "nguid": ...}); the links as lists of names (a port's
// "subsystems", a subsystem's "allowed_hosts").
//
// What it becomes: each TCP port a listener (TLS 1.3 ports TLS listeners), its ANA group
// states the listener's ana.GROUP=STATE (a group the port lacks is inaccessible there, as in
// Linux); each enabled namespace a "file:PATH" spec with its uuid, nguid and anagrpid; the
// allowed hosts the allow-list, and the DH-HMAC-CHAP keys of those hosts (dhchap_key,
// dhchap_ctrl_key, with their dhchap_hash and dhchap_dhgroup) the subsystem's keys; serial and
// the cntlid range and qid_max as sens has them. Whatever sens cannot carry is reported, one
// line naming the field each (the README lists the cases).
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "target/config.h"

namespace sens::target {

// Whether `j` has the shape of nvmetcli's file: top-level "hosts" or "ports", or subsystems
// with "attr" or namespace objects. sens's own file has none of these.
bool is_nvmetcli_json(const nlohmann::json& j);

// Sets the listeners, subsystems, cntlid range and, where the file says, queue and in-capsule
// sizes of `config` from an nvmetcli file (the discovery port stays, and serves discovery on
// the I/O listeners too, as Linux does on its ports; 0 if a port takes its number). Each setting it
// cannot carry is appended to `uncarried` ("ports[2] (portid 3): trtype 'rdma': ..."). false and
// `error` naming the field
// ("subsystems[1].namespaces[0].device.path: missing") on malformed input; errors and the
// report never contain a key.
bool load_nvmetcli(const nlohmann::json& j, TargetConfig* config,
                   std::vector<std::string>* uncarried, std::string* error);

}  // namespace sens::target
