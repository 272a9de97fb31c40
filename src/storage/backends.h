#pragma once
// The backends behind Device::open(), and what they share. Internal to src/storage.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "storage/device.h"

namespace sens::storage {

// A read-only region of zeroes shared by the whole process: the null device serves reads from
// it, and file queues write it where a filesystem cannot zero a range by itself. Its pages are
// real (not the shared zero page), so O_DIRECT can pin them.
inline constexpr size_t kZeroRegionSize = 2u << 20;
const uint8_t* zero_region();

std::unique_ptr<Device> open_ram(uint64_t size, bool read_only, std::string* error);
std::unique_ptr<Device> open_null(uint64_t size, bool read_only);
std::unique_ptr<Device> open_file(const std::string& path, bool read_only, std::string* error);

// Checks a request's range and alignment against a device; returns 0 or -errno.
int check_request(const Request& req, uint64_t device_size, uint32_t block_size, bool read_only);

}  // namespace sens::storage
