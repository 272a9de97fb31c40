#!/usr/bin/env bash
# ctest heavy_headers: no header outside src/tools includes nlohmann/json.hpp or CLI/CLI.hpp.
# Each costs seconds of compile time in every file that includes it, and the headers of the
# components are included by most of the tree (make build-times shows it); a header names
# JSON through <nlohmann/json_fwd.hpp> and the .cc that builds the JSON includes the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
found=$(grep -rlE '#include <(nlohmann/json\.hpp|CLI/CLI\.hpp)>' src include --include='*.h' |
  grep -v '^src/tools/' || true)
if [ -n "$found" ]; then
  echo "heavy_headers: these headers include nlohmann/json.hpp or CLI/CLI.hpp:"
  echo "$found" | sed 's/^/  /'
  echo "use <nlohmann/json_fwd.hpp> in the header and include the full header in the .cc"
  exit 1
fi
echo "heavy_headers: $(find src include -name '*.h' | wc -l) headers checked, none includes json.hpp or CLI.hpp"
