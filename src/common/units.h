#pragma once
// Sizes and durations as storage engineers type them: 4k, 128K, 1G, 1GiB, 512 (bytes).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sens {

// Binary multiples (k = 1024). Returns nullopt on anything that is not a clean size.
std::optional<uint64_t> parse_size(std::string_view text);
// "4 KiB", "1 GiB", "1536 B": the largest binary unit that divides the value.
std::string format_size(uint64_t bytes);

}  // namespace sens
