// `sens target --config` reading what `nvmetcli save` writes for the Linux target: the
// handwritten file in data/nvmetcli_config.json (nvmetcli's layout: hosts, ports with addr /
// param / ana_groups / referrals / subsystems, subsystems with attr / allowed_hosts /
// namespaces / passthru) becomes listeners, subsystems, namespace specs and keys, and every
// setting sens cannot carry is named in the report. Malformed files are refused with the path
// to the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "target/config.h"
#include "target/nvmet_config.h"

namespace sens::target {
namespace {

using nlohmann::json;

const std::string kFixture =
    std::string(SENS_SOURCE_DIR) + "/tests/target/data/nvmetcli_config.json";
const std::string kHost1 = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
const std::string kHost2 = "nqn.2014-08.org.nvmexpress:uuid:66666666-7777-8888-9999-aaaaaaaaaaaa";
const std::string kKey1 = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
const std::string kCtrlKey1 =
    "DHHC-1:02:gaXIkmPxEUbMpcu7KXGUA9JW6pVHjb3MzGj2DoigWZuZeRws6a0ORy8J19xTqBD2QkNHOQ==:";

// The one entry of `report` that contains every one of `parts` (and how many do).
size_t count_matching(const std::vector<std::string>& report,
                      const std::vector<std::string>& parts) {
  return size_t(std::count_if(report.begin(), report.end(), [&](const std::string& line) {
    return std::all_of(parts.begin(), parts.end(),
                       [&](const std::string& p) { return line.find(p) != std::string::npos; });
  }));
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (auto& l : lines) out += "  " + l + "\n";
  return out;
}

TEST(NvmetcliConfig, LoadsTheSavedFileIntoListenersSubsystemsAndKeys) {
  TargetConfig c;
  std::vector<std::string> report;
  std::string error;
  ASSERT_TRUE(load_json(kFixture, &c, &error, &report)) << error;

  // TCP ports become listeners; the RDMA port does not. The discovery port stays (discovery is
  // served on the I/O listeners too, as Linux serves it on its ports).
  ASSERT_EQ(c.listen.size(), 2u);
  EXPECT_EQ(c.listen[0].host, "127.0.0.1");
  EXPECT_EQ(c.listen[0].port, 4420);
  EXPECT_EQ(c.listen[1].host, "::1");
  EXPECT_EQ(c.listen[1].port, 4421);
  EXPECT_TRUE(c.tls_listen.empty());
  EXPECT_EQ(c.discovery_port, 8009);
  // ANA: group 2 is non-optimized through port 1; port 2 has no group 2, which Linux reports
  // as inaccessible there. Group 1 is optimized on both (the listener default).
  EXPECT_EQ(listen_text(c.listen[0]), "127.0.0.1:4420,ana.2=non-optimized");
  EXPECT_EQ(listen_text(c.listen[1]), "[::1]:4421,ana.2=inaccessible");

  ASSERT_EQ(c.subsystems.size(), 2u);
  const SubsystemConfig& blk = c.subsystems[0];
  EXPECT_EQ(blk.nqn, "blktests-subsystem-1");
  EXPECT_EQ(blk.serial, "0123456789abcdef");
  EXPECT_TRUE(blk.allowed_hosts.empty()) << "allow_any_host 1";
  EXPECT_TRUE(blk.host_keys.empty());
  // nsid 2 is disabled: not served. The all-zero NGUID is Linux's "none".
  EXPECT_EQ(blk.namespaces,
            std::vector<std::string>{
                "file:/var/tmp/blktests-1.img,uuid=91ac3c8e-7a30-4a4e-9f0c-2f3c4b5d6e7f"});

  const SubsystemConfig& sec = c.subsystems[1];
  EXPECT_EQ(sec.nqn, "nqn.2026-12.io.example:secure");
  EXPECT_EQ(sec.serial, "SECURE01");
  EXPECT_EQ(sec.allowed_hosts, (std::vector<std::string>{kHost1, kHost2}));
  ASSERT_EQ(sec.host_keys.size(), 1u);
  EXPECT_EQ(sec.host_keys[0].first, kHost1);
  EXPECT_EQ(sec.host_keys[0].second, kKey1);
  ASSERT_EQ(sec.ctrl_keys.size(), 1u);
  EXPECT_EQ(sec.ctrl_keys[0].first, kHost1);
  EXPECT_EQ(sec.ctrl_keys[0].second, kCtrlKey1);
  // The keyed host's dhchap_hash / dhchap_dhgroup: the only ones Linux uses with it.
  EXPECT_EQ(sec.dhchap_hashes, std::vector<uint8_t>{2});    // hmac(sha384)
  EXPECT_EQ(sec.dhchap_dhgroups, std::vector<uint8_t>{1});  // ffdhe2048
  EXPECT_EQ(sec.namespaces,
            (std::vector<std::string>{
                "file:/srv/nvmet/secure.img,uuid=5e1f2a3b-4c5d-4e6f-8a7b-9c0d1e2f3a4b,"
                "nguid=00112233445566778899aabbccddeeff,anagrpid=2",
                "file:/srv/nvmet/secure-3.img,uuid=7d8e9fa0-b1c2-4d3e-8f40-516273849506,nsid=3"}));

  // One range for the target: the ids both subsystems' ranges allow.
  EXPECT_EQ(c.cntlid_min, 1001);
  EXPECT_EQ(c.cntlid_max, 2000);
  EXPECT_EQ(c.max_io_queues, 128u);  // qid_max

  // The result is a configuration sens starts with (names without nqn. only warn).
  std::vector<std::string> warnings;
  EXPECT_EQ(validate(c, &warnings), "");
  EXPECT_EQ(count_matching(warnings, {"blktests-subsystem-1", "nqn."}), 1u) << joined(warnings);

  // What it cannot carry, each named once.
  const std::vector<std::vector<std::string>> expected = {
      {"ports[1] (portid 2)", "links only blktests-subsystem-1",
       "nqn.2026-12.io.example:secure is reachable there too"},
      {"ports[1].referrals[0]", "gateway-b", "192.0.2.7:4420"},
      {"ports[2] (portid 3)", "rdma"},
      {"subsystems[0].namespaces[1] (nsid 2)", "disabled"},
      {"subsystems[0].namespaces[0].resv.enable", "reservations"},
      {"subsystems[1].attr.version", "2.1"},
      {"subsystems[0].attr.firmware"},
      {"subsystems[1].attr.firmware"},
      {"cntlid", "1001-2000"},
  };
  for (auto& parts : expected)
    EXPECT_EQ(count_matching(report, parts), 1u) << parts[0] << " in:\n" << joined(report);
  EXPECT_EQ(report.size(), expected.size()) << joined(report);
  // Defaults Linux writes into every file are not noise in the report.
  for (const char* quiet : {"model", "ieee_oui", "pi_enable", "inline_data_size", "passthru",
                            "subsystems[0].attr.version", "qid_max", "allow_any_host"})
    EXPECT_EQ(count_matching(report, {quiet}), 0u) << quiet << " in:\n" << joined(report);
  // No secret in the report.
  EXPECT_EQ(count_matching(report, {"DHHC-1"}), 0u) << joined(report);
}

// Converts `text` (JSON); "" on success, else the error.
std::string convert(const std::string& text, TargetConfig* c = nullptr,
                    std::vector<std::string>* report = nullptr) {
  TargetConfig scratch;
  std::vector<std::string> lines;
  std::string error;
  json j = json::parse(text);
  EXPECT_TRUE(is_nvmetcli_json(j)) << text;
  if (!load_nvmetcli(j, c ? c : &scratch, report ? report : &lines, &error)) return error;
  return "";
}

// A small valid file: one TCP port, one subsystem (allow_any_host), one namespace; `edit`
// changes it before conversion.
std::string convert_edited(void (*edit)(json&), std::vector<std::string>* report = nullptr) {
  json j = json::parse(R"({
    "hosts": [{"nqn": "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"}],
    "ports": [{"addr": {"adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "4420",
                        "trtype": "tcp", "treq": "not specified", "tsas": "none"},
               "ana_groups": [{"ana": {"state": "optimized"}, "grpid": 1}],
               "param": {"inline_data_size": "-1"}, "portid": 1, "referrals": [],
               "subsystems": ["testnqn"]}],
    "subsystems": [{"allowed_hosts": [], "attr": {"allow_any_host": "1"},
                    "namespaces": [{"device": {"path": "/tmp/a.img",
                                               "uuid": "91ac3c8e-7a30-4a4e-9f0c-2f3c4b5d6e7f"},
                                    "enable": 1, "nsid": 1}],
                    "nqn": "testnqn"}]})");
  edit(j);
  TargetConfig c;
  std::vector<std::string> lines;
  std::string error;
  if (!load_nvmetcli(j, &c, report ? report : &lines, &error)) return error;
  return "";
}

TEST(NvmetcliConfig, TheSmallFileConverts) {
  std::vector<std::string> report;
  EXPECT_EQ(convert_edited([](json&) {}, &report), "");
  EXPECT_TRUE(report.empty()) << joined(report);
}

TEST(NvmetcliConfig, MalformedFilesNameTheField) {
  struct Case {
    void (*edit)(json&);
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["subsystems"] = "x"; }, "subsystems: expected an array"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0] = 1; },
       "subsystems[0].namespaces[0]: expected an object"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0]["device"].erase("path"); },
       "subsystems[0].namespaces[0].device.path: missing"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0].erase("nsid"); },
       "subsystems[0].namespaces[0].nsid: missing"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0]["nsid"] = "one"; },
       "subsystems[0].namespaces[0].nsid: 'one' is not a number"},
      {[](json& j) {
         j["subsystems"][0]["namespaces"].push_back(j["subsystems"][0]["namespaces"][0]);
       },
       "subsystems[0].namespaces[1].nsid: 1 given twice"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0]["device"]["uuid"] = "91ac3c8e"; },
       "subsystems[0].namespaces[0].device.uuid: '91ac3c8e' is not a UUID"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0]["device"]["nguid"] = "xyz"; },
       "subsystems[0].namespaces[0].device.nguid: 'xyz' is not 16 bytes of hex"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0]["device"]["path"] = "/a,uuid=1"; },
       "subsystems[0].namespaces[0].device.path: '/a,uuid=1' has a ','"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0]["ana_grpid"] = 40; },
       "subsystems[0].namespaces[0].ana_grpid: 40: sens has ANA groups 1..32"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0]["enable"] = "maybe"; },
       "subsystems[0].namespaces[0].enable: 'maybe' is not 0 or 1"},
      {[](json& j) { j["subsystems"][0].erase("nqn"); }, "subsystems[0].nqn: missing"},
      {[](json& j) { j["subsystems"].push_back(j["subsystems"][0]); },
       "subsystems[1].nqn: 'testnqn' given twice"},
      {[](json& j) { j["subsystems"][0]["attr"]["serial"] = "123456789012345678901"; },
       "subsystems[0].attr.serial: '123456789012345678901' is not 1..20 printable ASCII "
       "characters"},
      {[](json& j) { j["subsystems"][0]["attr"]["cntlid_min"] = "0"; },
       "subsystems[0].attr.cntlid_min: 0 is not in 1..65519"},
      {[](json& j) {
         j["subsystems"][0]["attr"]["allow_any_host"] = "0";
         j["subsystems"][0]["allowed_hosts"] = {"nqn.2014-08.org.nvmexpress:uuid:nobody"};
       },
       "subsystems[0].allowed_hosts[0]: 'nqn.2014-08.org.nvmexpress:uuid:nobody' is not one of "
       "the hosts"},
      {[](json& j) { j["hosts"][0]["dhchap_key"] = "DHHC-1:00:c2VjcmV0:"; },
       "hosts[0].dhchap_key: "},
      {[](json& j) { j["hosts"][0]["dhchap_hash"] = "hmac(md5)"; },
       "hosts[0].dhchap_hash: 'hmac(md5)' is not hmac(sha256), hmac(sha384) or hmac(sha512)"},
      {[](json& j) { j["hosts"].push_back(j["hosts"][0]); },
       "hosts[1].nqn: 'nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555' "
       "given twice"},
      {[](json& j) { j["ports"][0]["addr"].erase("trtype"); }, "ports[0].addr.trtype: missing"},
      {[](json& j) { j["ports"][0]["addr"]["trsvcid"] = "70000"; },
       "ports[0].addr: listen address '127.0.0.1:70000': port must be 1..65535"},
      {[](json& j) { j["ports"][0]["addr"]["traddr"] = "::1"; },
       "ports[0].addr.traddr: '::1' is not an ipv4 address (adrfam)"},
      {[](json& j) { j["ports"][0]["addr"]["tsas"] = "tls1.2"; },
       "ports[0].addr.tsas: 'tls1.2' is not none or tls1.3"},
      {[](json& j) { j["ports"][0]["subsystems"] = {"nqn.x"}; },
       "ports[0].subsystems[0]: 'nqn.x' is not a subsystem of this file"},
      {[](json& j) { j["ports"][0]["ana_groups"][0]["ana"]["state"] = "optimised"; },
       "ports[0].ana_groups[0].ana.state: 'optimised' is not optimized, non-optimized, "
       "inaccessible, persistent-loss or change"},
      {[](json& j) { j["ports"].push_back(j["ports"][0]); },
       "ports[1].addr: 127.0.0.1:4420 is also ports[0]'s address"},
      {[](json& j) { j["subsystems"][0]["namespaces"][0]["enable"] = 0; },
       "subsystems: none left to serve"},
  };
  for (auto& c : cases) {
    std::string error = convert_edited(c.edit);
    EXPECT_EQ(error.rfind(c.error, 0), 0u) << "got:      " << error << "\nexpected: " << c.error;
    // A refusal never shows a secret.
    EXPECT_EQ(error.find("c2VjcmV0"), std::string::npos) << error;
  }
}

TEST(NvmetcliConfig, SettingsItCannotCarryAreReported) {
  struct Case {
    void (*edit)(json&);
    std::vector<std::string> line;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["ports"][0]["addr"]["trtype"] = "loop"; }, {"ports[0] (portid 1)", "loop"}},
      {[](json& j) {
         j["ports"][0]["addr"]["tsas"] = "tls1.3";
         j["ports"][0]["addr"]["treq"] = "required";
       },
       {"ports[0] (portid 1)", "TLS 1.3", "--tls PSKFILE"}},
      {[](json& j) { j["ports"][0]["param"]["inline_data_size"] = "1000"; },
       {"ports[0].param.inline_data_size", "1000"}},
      {[](json& j) { j["ports"][0]["param"]["pi_enable"] = "1"; }, {"ports[0].param.pi_enable"}},
      {[](json& j) { j["ports"][0]["subsystems"] = json::array(); },
       {"ports[0] (portid 1)", "no subsystem"}},
      {[](json& j) {
         j["ports"][0]["ana_groups"].push_back({{"grpid", 64}, {"ana", {{"state", "optimized"}}}});
       },
       {"ports[0].ana_groups[1]", "64"}},
      {[](json& j) { j["subsystems"][0]["attr"]["model"] = "Acme"; },
       {"subsystems[0].attr.model", "Acme"}},
      {[](json& j) { j["subsystems"][0]["attr"]["pi_enable"] = "1"; },
       {"subsystems[0].attr.pi_enable"}},
      {[](json& j) { j["subsystems"][0]["attr"]["vendor_id"] = "0x1af4"; },
       {"subsystems[0].attr.vendor_id", "6900: sens reports its own"}},
      {[](json& j) { j["subsystems"][0]["attr"]["colour"] = "blue"; },
       {"subsystems[0].attr.colour", "unknown"}},
      {[](json& j) {
         j["subsystems"][0]["passthru"] = {{{"device", {{"path", "/dev/nvme0"}}}, {"enable", 1}}};
         j["subsystems"].push_back(j["subsystems"][0]);
         j["subsystems"][1]["nqn"] = "other";
         j["subsystems"][1].erase("passthru");
       },
       {"subsystems[0] (testnqn)", "passthru", "/dev/nvme0"}},
      {[](json& j) {  // the same: the port that links only the passthru subsystem stays out
         j["subsystems"][0]["passthru"] = {{{"device", {{"path", "/dev/nvme0"}}}, {"enable", 1}}};
         j["subsystems"].push_back(j["subsystems"][0]);
         j["subsystems"][1]["nqn"] = "other";
         j["subsystems"][1].erase("passthru");
       },
       {"ports[0] (portid 1)", "links only subsystems sens leaves out (testnqn); not carried"}},
      {[](json& j) { j["subsystems"][0]["namespaces"][0]["buffered_io"] = "1"; },
       {"subsystems[0].namespaces[0].buffered_io"}},
      {[](json& j) {
         auto& ns = j["subsystems"][0]["namespaces"];
         ns.push_back(ns[0]);
         ns[1]["nsid"] = 2;
         ns[0].erase("enable");
       },
       {"subsystems[0].namespaces[0] (nsid 1)", "disabled"}},
      {[](json& j) { j.erase("ports"); }, {"ports", "127.0.0.1:4420"}},
      {[](json& j) {
         j["hosts"][0]["dhchap_ctrl_key"] =
             "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
       },
       {"hosts[0].dhchap_ctrl_key", "without a dhchap_key"}},
      {[](json& j) { j["flavour"] = "x"; }, {"flavour", "unknown"}},
      {[](json& j) { j["ports"][0]["addr"]["trsvcid"] = "8009"; },
       {"ports[0] (portid 1)", "listens on 8009, sens's discovery port"}},
  };
  for (auto& c : cases) {
    std::vector<std::string> report;
    // The edits that leave nothing to serve add a second subsystem that carries.
    ASSERT_EQ(convert_edited(c.edit, &report), "") << c.line[0];
    EXPECT_EQ(count_matching(report, c.line), 1u) << c.line[0] << " in:\n" << joined(report);
  }
}

TEST(NvmetcliConfig, KeysInTheDhchapGroupAndPerSubsystemHashes) {
  // A host's keys may also come as nvmetcli dumps any attribute group ("dhchap": {"key": ...}).
  // Two keyed hosts that want different hashes: sens cannot pick per host, says so, and keeps
  // the target's lists.
  std::vector<std::string> report;
  TargetConfig c;
  // A third host writes its hash as "sha256": the same function as the first's hmac(sha256).
  std::string error = convert(R"json({
    "hosts": [{"nqn": "nqn.2014-08.org.nvmexpress:uuid:a",
               "dhchap": {"key": "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
                          "hash": "hmac(sha256)", "dhgroup": "null"}},
              {"nqn": "nqn.2014-08.org.nvmexpress:uuid:b",
               "dhchap_key": "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
               "dhchap_hash": "hmac(sha512)", "dhchap_dhgroup": "null"},
              {"nqn": "nqn.2014-08.org.nvmexpress:uuid:c",
               "dhchap_key": "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
               "dhchap_hash": "sha256"}],
    "ports": [],
    "subsystems": [{"allowed_hosts": ["nqn.2014-08.org.nvmexpress:uuid:a",
                                      "nqn.2014-08.org.nvmexpress:uuid:b",
                                      "nqn.2014-08.org.nvmexpress:uuid:c"],
                    "attr": {"allow_any_host": "0"},
                    "namespaces": [{"device": {"path": "/tmp/a.img"}, "enable": 1, "nsid": 1}],
                    "nqn": "nqn.2026-12.io.example:two"}]})json",
                              &c, &report);
  ASSERT_EQ(error, "");
  ASSERT_EQ(c.subsystems.size(), 1u);
  EXPECT_EQ(c.subsystems[0].host_keys.size(), 3u);
  EXPECT_TRUE(c.subsystems[0].dhchap_hashes.empty());
  EXPECT_EQ(c.subsystems[0].dhchap_dhgroups, std::vector<uint8_t>{0}) << "all want null";
  EXPECT_EQ(
      count_matching(report, {"subsystems[0]", "dhchap_hash", "hmac(sha256)", "hmac(sha512)"}), 1u)
      << joined(report);
  EXPECT_EQ(count_matching(report, {", sha256"}), 0u) << "sha256 is hmac(sha256)\n"
                                                      << joined(report);
  EXPECT_EQ(count_matching(report, {"ports", "no TCP port"}), 1u) << joined(report);
  EXPECT_TRUE(c.listen.empty()) << "apply_defaults() gives the default listener";
}

TEST(NvmetcliConfig, NoSubsystemForNobody) {
  // allow_any_host 0 and no allowed host: Linux admits no host. sens cannot serve a subsystem to
  // nobody (an empty list means any host), so it leaves the subsystem out and says so.
  std::vector<std::string> report;
  TargetConfig c;
  std::string error = convert(R"({"hosts": [], "ports": [], "subsystems": [
      {"allowed_hosts": [], "attr": {"allow_any_host": "0"}, "nqn": "closed",
       "namespaces": [{"device": {"path": "/tmp/a.img"}, "enable": 1, "nsid": 1}]},
      {"allowed_hosts": [], "attr": {"allow_any_host": "1"}, "nqn": "open",
       "namespaces": [{"device": {"path": "/tmp/b.img"}, "enable": 1, "nsid": 1}]}]})",
                              &c, &report);
  ASSERT_EQ(error, "");
  ASSERT_EQ(c.subsystems.size(), 1u);
  EXPECT_EQ(c.subsystems[0].nqn, "open");
  EXPECT_EQ(count_matching(report, {"subsystems[0] (closed)", "no host"}), 1u) << joined(report);
}

TEST(NvmetcliConfig, SensOwnFormatIsNotTakenForIt) {
  EXPECT_FALSE(is_nvmetcli_json(json::parse(
      R"({"listen": ["127.0.0.1:4420"], "subsystems": [{"nqn": "nqn.a", "namespaces": ["ram:1G"]}]})")));
  EXPECT_FALSE(is_nvmetcli_json(json::parse(R"({"subsystems": []})")));
  EXPECT_FALSE(is_nvmetcli_json(json::parse(R"([1, 2])")));
  EXPECT_TRUE(is_nvmetcli_json(json::parse(R"({"hosts": [], "ports": [], "subsystems": []})")));
  EXPECT_TRUE(is_nvmetcli_json(
      json::parse(R"({"subsystems": [{"nqn": "a", "namespaces": [{"nsid": 1}]}]})")));
}

}  // namespace
}  // namespace sens::target
