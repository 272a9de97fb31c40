#!/usr/bin/env bash
# ctest target_layering: the command sets (src/target/{admin,nvm,fabrics,dhchap,reservations,
# subsystem}.cc) compile without the NVMe/TCP queue. They see a queue only as a CommandQueue
# and the reactor only as a ReactorContext (reactor_context.h); were tcp_queue.h (or the
# send queue and PDU reader behind it) among their includes, direct or not, the transport
# would have leaked into them again. The compiler lists the includes (-MM), so indirect ones
# count too.
set -euo pipefail
cxx=${1:-c++}
cd "$(dirname "$0")/.."
status=0
checked=0
for f in admin nvm fabrics dhchap reservations subsystem; do
  src=src/target/$f.cc
  deps=$("$cxx" -std=c++20 -MM -Isrc -Iinclude "$src") || {
    echo "target_layering: cannot list the includes of $src"
    exit 1
  }
  leaked=$(echo "$deps" | tr ' \\' '\n\n' | grep -E 'target/tcp_queue\.h|transport/(send_queue|pdu_reader)\.h' || true)
  if [ -n "$leaked" ]; then
    echo "target_layering: $src includes the TCP transport:"
    echo "$leaked" | sed 's/^/  /'
    status=1
  fi
  checked=$((checked + 1))
done
[ $status -eq 0 ] && echo "target_layering: $checked command-set sources checked, none includes tcp_queue.h"
exit $status
