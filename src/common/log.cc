#include "common/log.h"

namespace sens {
std::atomic<LogLevel> g_log_level{LogLevel::kInfo};
}
