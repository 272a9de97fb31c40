#include "common/log.h"

namespace sens {
LogLevel g_log_level = LogLevel::kInfo;
}
