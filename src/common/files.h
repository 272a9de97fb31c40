#pragma once
// Files an operator's secrets and configurations go to.
#include <string>

namespace sens {

// Writes `text` to `path` with mode 0600: a temporary file beside it, fsync, then rename, so a
// reader never sees half of it. "" or why not (the path and errno's text).
std::string write_private_file(const std::string& path, const std::string& text);

}  // namespace sens
