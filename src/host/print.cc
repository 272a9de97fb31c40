#include "host/print.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace sens::host {

namespace {

__attribute__((format(printf, 2, 3))) void add(std::string& s, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  s.append(buf, size_t(std::min<int>(n, int(sizeof(buf)) - 1)));
}

// Identify strings are space padded; nvme-cli prints them whole, padding included.
std::string field(const char* p, size_t n) {
  return std::string(nvme::fixed_string(p, n));
}

// A 128-bit little-endian counter as decimal (tnvmcap, unvmcap).
std::string u128(const uint8_t (&b)[16]) {
  uint64_t lo, hi;
  std::memcpy(&lo, b, 8);
  std::memcpy(&hi, b + 8, 8);
  if (hi == 0) return std::to_string(lo);
  // Rare (more than 16 EiB): print via long double, precise enough for a capacity.
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.0Lf", (long double)hi * 18446744073709551616.0L + lo);
  return buf;
}

// Discovery entries pad with spaces or NULs; libnvme trims them (strchomp) before printing.
std::string trimmed(const char* p, size_t n) {
  std::string s = field(p, n);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace

std::string format_id_ctrl(const nvme::IdentifyController& id) {
  std::string s = "NVME Identify Controller:\n";
  add(s, "vid       : %#x\n", id.vid);
  add(s, "ssvid     : %#x\n", id.ssvid);
  add(s, "sn        : %s\n", field(id.sn, sizeof(id.sn)).c_str());
  add(s, "mn        : %s\n", field(id.mn, sizeof(id.mn)).c_str());
  add(s, "fr        : %s\n", field(id.fr, sizeof(id.fr)).c_str());
  add(s, "rab       : %u\n", id.rab);
  add(s, "ieee      : %02x%02x%02x\n", id.ieee[2], id.ieee[1], id.ieee[0]);
  add(s, "cmic      : %#x\n", id.cmic);
  add(s, "mdts      : %u\n", id.mdts);
  add(s, "cntlid    : %#x\n", id.cntlid);
  add(s, "ver       : %#x\n", id.ver);
  add(s, "rtd3r     : %#x\n", id.rtd3r);
  add(s, "rtd3e     : %#x\n", id.rtd3e);
  add(s, "oaes      : %#x\n", id.oaes);
  add(s, "ctratt    : %#x\n", id.ctratt);
  add(s, "rrls      : %#x\n", id.rrls);
  add(s, "cntrltype : %u\n", id.cntrltype);
  add(s, "crdt1     : %u\n", id.crdt1);
  add(s, "crdt2     : %u\n", id.crdt2);
  add(s, "crdt3     : %u\n", id.crdt3);
  add(s, "oacs      : %#x\n", id.oacs);
  add(s, "acl       : %u\n", id.acl);
  add(s, "aerl      : %u\n", id.aerl);
  add(s, "frmw      : %#x\n", id.frmw);
  add(s, "lpa       : %#x\n", id.lpa);
  add(s, "elpe      : %u\n", id.elpe);
  add(s, "npss      : %u\n", id.npss);
  add(s, "avscc     : %#x\n", id.avscc);
  add(s, "apsta     : %#x\n", id.apsta);
  add(s, "wctemp    : %u\n", id.wctemp);
  add(s, "cctemp    : %u\n", id.cctemp);
  add(s, "mtfa      : %u\n", id.mtfa);
  add(s, "hmpre     : %u\n", id.hmpre);
  add(s, "hmmin     : %u\n", id.hmmin);
  add(s, "tnvmcap   : %s\n", u128(id.tnvmcap).c_str());
  add(s, "unvmcap   : %s\n", u128(id.unvmcap).c_str());
  add(s, "rpmbs     : %#x\n", id.rpmbs);
  add(s, "edstt     : %u\n", id.edstt);
  add(s, "dsto      : %u\n", id.dsto);
  add(s, "fwug      : %u\n", id.fwug);
  add(s, "kas       : %u\n", id.kas);
  add(s, "hctma     : %#x\n", id.hctma);
  add(s, "mntmt     : %u\n", id.mntmt);
  add(s, "mxtmt     : %u\n", id.mxtmt);
  add(s, "sanicap   : %#x\n", id.sanicap);
  add(s, "hmminds   : %u\n", id.hmminds);
  add(s, "hmmaxd    : %u\n", id.hmmaxd);
  add(s, "nsetidmax : %u\n", id.nsetidmax);
  add(s, "endgidmax : %u\n", id.endgidmax);
  add(s, "anatt     : %u\n", id.anatt);
  add(s, "anacap    : %u\n", id.anacap);
  add(s, "anagrpmax : %u\n", id.anagrpmax);
  add(s, "nanagrpid : %u\n", id.nanagrpid);
  add(s, "pels      : %u\n", id.pels);
  add(s, "sqes      : %#x\n", id.sqes);
  add(s, "cqes      : %#x\n", id.cqes);
  add(s, "maxcmd    : %u\n", id.maxcmd);
  add(s, "nn        : %u\n", id.nn);
  add(s, "oncs      : %#x\n", id.oncs);
  add(s, "fuses     : %#x\n", id.fuses);
  add(s, "fna       : %#x\n", id.fna);
  add(s, "vwc       : %#x\n", id.vwc);
  add(s, "awun      : %u\n", id.awun);
  add(s, "awupf     : %u\n", id.awupf);
  add(s, "icsvscc   : %u\n", id.icsvscc);
  add(s, "nwpc      : %u\n", id.nwpc);
  add(s, "acwu      : %u\n", id.acwu);
  add(s, "ocfs      : %#x\n", id.ocfs);
  add(s, "sgls      : %#x\n", id.sgls);
  add(s, "mnan      : %u\n", id.mnan);
  add(s, "subnqn    : %s\n", field(id.subnqn, sizeof(id.subnqn)).c_str());
  add(s, "ioccsz    : %u\n", id.ioccsz);
  add(s, "iorcsz    : %u\n", id.iorcsz);
  add(s, "icdoff    : %u\n", id.icdoff);
  add(s, "fcatt     : %#x\n", id.fcatt);
  add(s, "msdbd     : %u\n", id.msdbd);
  add(s, "ofcs      : %u\n", id.ofcs);
  for (unsigned i = 0; i <= id.npss && i < 32; ++i) {
    const uint8_t* p = id.psd[i];
    uint16_t mp;
    std::memcpy(&mp, p, 2);
    const bool nops = p[3] & 0x2;
    uint32_t enlat, exlat;
    std::memcpy(&enlat, p + 4, 4);
    std::memcpy(&exlat, p + 8, 4);
    const double watts = (p[3] & 0x1) ? mp / 10000.0 : mp / 100.0;  // MXPS scales by 0.0001 W
    add(s, "ps %4u : mp:%.2fW %soperational enlat:%u exlat:%u rrt:%u rrl:%u\n", i, watts,
        nops ? "non-" : "", enlat, exlat, p[12] & 0x1F, p[13] & 0x1F);
    add(s, "          rwt:%u rwl:%u idle_power:- active_power:-\n", p[14] & 0x1F, p[15] & 0x1F);
  }
  return s;
}

std::string format_id_ns(uint32_t nsid, const nvme::IdentifyNamespace& ns) {
  std::string s;
  add(s, "NVME Identify Namespace %u:\n", nsid);
  add(s, "nsze    : %#llx\n", (unsigned long long)ns.nsze);
  add(s, "ncap    : %#llx\n", (unsigned long long)ns.ncap);
  add(s, "nuse    : %#llx\n", (unsigned long long)ns.nuse);
  add(s, "nsfeat  : %#x\n", ns.nsfeat);
  add(s, "nlbaf   : %u\n", ns.nlbaf);
  add(s, "flbas   : %#x\n", ns.flbas);
  add(s, "mc      : %#x\n", ns.mc);
  add(s, "dpc     : %#x\n", ns.dpc);
  add(s, "dps     : %#x\n", ns.dps);
  add(s, "nmic    : %#x\n", ns.nmic);
  add(s, "rescap  : %#x\n", ns.rescap);
  add(s, "fpi     : %#x\n", ns.fpi);
  add(s, "dlfeat  : %u\n", ns.dlfeat);
  add(s, "nawun   : %u\n", ns.nawun);
  add(s, "nawupf  : %u\n", ns.nawupf);
  add(s, "nacwu   : %u\n", ns.nacwu);
  add(s, "nabsn   : %u\n", ns.nabsn);
  add(s, "nabo    : %u\n", ns.nabo);
  add(s, "nabspf  : %u\n", ns.nabspf);
  add(s, "noiob   : %u\n", ns.noiob);
  add(s, "nvmcap  : %s\n", u128(ns.nvmcap).c_str());
  add(s, "anagrpid: %u\n", ns.anagrpid);
  add(s, "nsattr  : %u\n", ns.nsattr);
  add(s, "nvmsetid: %u\n", ns.nvmsetid);
  add(s, "endgid  : %u\n", ns.endgid);
  s += "nguid   : ";
  for (uint8_t b : ns.nguid) add(s, "%02x", b);
  s += "\neui64   : ";
  for (uint8_t b : ns.eui64) add(s, "%02x", b);
  s += "\n";
  for (unsigned i = 0; i <= ns.nlbaf && i < 16; ++i) {
    const auto& f = ns.lbaf[i];
    static const char* rp[] = {"Best", "Better", "Good", "Degraded"};
    add(s, "lbaf %2u : ms:%-3u lbads:%-2u rp:%#x (%s)%s\n", i, f.ms, f.lbads, f.rp & 3,
        rp[f.rp & 3], (ns.flbas & 0xF) == i ? " (in use)" : "");
  }
  return s;
}

const char* trtype_name(uint8_t t) {
  switch (t) {
    case 1:
      return "rdma";
    case 2:
      return "fc";
    case 3:
      return "tcp";
    case 254:
      return "loop";
    default:
      return "unrecognized";
  }
}

const char* adrfam_name(uint8_t a) {
  switch (a) {
    case 1:
      return "ipv4";
    case 2:
      return "ipv6";
    case 3:
      return "infiniband";
    case 4:
      return "fibre-channel";
    case 254:
      return "intra-host";
    default:
      return "unrecognized";
  }
}

const char* subtype_name(uint8_t s) {
  switch (s) {
    case nvme::kSubtypeReferral:
      return "discovery subsystem referral";
    case nvme::kSubtypeNvme:
      return "nvme subsystem";
    case nvme::kSubtypeCurrentDiscovery:
      return "current discovery subsystem";
    default:
      return "unrecognized";
  }
}

std::string treq_text(uint8_t treq) {
  static const char* secure[] = {"not specified", "required", "not required", "reserved"};
  std::string s = secure[treq & 3];
  if (treq & 0x4) s += ", sq flow control disable supported";
  return s;
}

std::string eflags_text(uint16_t e) {
  if (e == 0) return "none";
  std::string s;
  auto add_flag = [&](const char* name) { s += s.empty() ? name : std::string(", ") + name; };
  if (e & 0x1) add_flag("duplicate returned information");
  if (e & 0x2) add_flag("explicit discovery connections");
  if (e & 0x4) add_flag("no cdc connectivity");
  return s;
}

std::string format_discovery_log(const std::vector<uint8_t>& log) {
  nvme::DiscoveryLogHeader hdr;
  if (log.size() < sizeof(hdr)) return "Discovery log page too short\n";
  std::memcpy(&hdr, log.data(), sizeof(hdr));
  const uint64_t have = (log.size() - sizeof(hdr)) / sizeof(nvme::DiscoveryLogEntry);
  const uint64_t n = std::min<uint64_t>(hdr.numrec, have);
  std::string s;
  add(s, "\nDiscovery Log Number of Records %llu, Generation counter %llu\n",
      (unsigned long long)hdr.numrec, (unsigned long long)hdr.genctr);
  for (uint64_t i = 0; i < n; ++i) {
    nvme::DiscoveryLogEntry e;
    std::memcpy(&e, log.data() + sizeof(hdr) + i * sizeof(e), sizeof(e));
    add(s, "=====Discovery Log Entry %llu======\n", (unsigned long long)i);
    add(s, "trtype:  %s\n", trtype_name(e.trtype));
    add(s, "adrfam:  %s\n", adrfam_name(e.adrfam));
    add(s, "subtype: %s\n", subtype_name(e.subtype));
    add(s, "treq:    %s\n", treq_text(e.treq).c_str());
    add(s, "portid:  %u\n", e.portid);
    add(s, "trsvcid: %s\n", trimmed(e.trsvcid, sizeof(e.trsvcid)).c_str());
    add(s, "subnqn:  %s\n", trimmed(e.subnqn, sizeof(e.subnqn)).c_str());
    add(s, "traddr:  %s\n", trimmed(e.traddr, sizeof(e.traddr)).c_str());
    add(s, "eflags:  %s\n", eflags_text(e.eflags).c_str());
    if (e.trtype == nvme::kTrtypeTcp) {
      static const char* sectype[] = {"none", "tls12", "tls13"};
      add(s, "sectype: %s\n", e.tsas[0] < 3 ? sectype[e.tsas[0]] : "unrecognized");
    }
  }
  return s;
}

}  // namespace sens::host
