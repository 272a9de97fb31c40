#pragma once
// Text as nvme-cli prints it (`nvme id-ctrl`, `nvme id-ns`, `nvme discover`), so output of
// `sens identify` / `sens discover` can be read (and diffed) the same way.
#include <cstdint>
#include <string>
#include <vector>

#include "wire/nvme.h"

namespace sens::host {

std::string format_id_ctrl(const nvme::IdentifyController& id);
std::string format_id_ns(uint32_t nsid, const nvme::IdentifyNamespace& ns);
// `log` is the whole page: the 1024-byte header, then numrec 1024-byte entries.
std::string format_discovery_log(const std::vector<uint8_t>& log);

const char* trtype_name(uint8_t trtype);
const char* adrfam_name(uint8_t adrfam);
const char* subtype_name(uint8_t subtype);
std::string treq_text(uint8_t treq);
std::string eflags_text(uint16_t eflags);

}  // namespace sens::host
