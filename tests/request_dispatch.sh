#!/usr/bin/env bash
# ctest request_dispatch: drive() is the only code that changes a target request's state
# (issue 32). RequestStates::advance() and drop() are the only ways to change it, and the
# dispatch code (drive() and the per-state steps it calls) lives in src/target/tcp_drive.cc
# alone: events and the command sets' actions record on the request and call drive(). So a
# call to advance( or drop( on the queue's RequestStates anywhere else under src/, or a
# second, writable handle on it (through which such a call would not read `states_.`), fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dispatch=src/target/tcp_drive.cc
status=0
# Comments do not count: only code lines (a // comment is cut off before matching).
calls=$(grep -rnE --include='*.cc' --include='*.h' 'states_\s*\.\s*(advance|drop)\s*\(' src |
  grep -vE '^[^:]+:[0-9]+:\s*//' || true)
outside=$(echo "$calls" | grep -v "^$dispatch:" | grep -v '^$' || true)
if [ -n "$outside" ]; then
  echo "request_dispatch: a request's state changes outside drive() ($dispatch):"
  echo "$outside" | sed 's/^/  /'
  status=1
fi
inside=$(echo "$calls" | grep -c "^$dispatch:" || true)
if [ "$inside" -eq 0 ]; then
  echo "request_dispatch: no state change found in $dispatch: has the dispatch moved?"
  status=1
fi
# The one RequestStates a queue has: no non-const reference or pointer to it leaves tcp_queue.h.
aliases=$(grep -rnE --include='*.cc' --include='*.h' '(^|[^t] )RequestStates\s*[&*]' src |
  grep -vE '^src/target/request\.(h|cc):' || true)
if [ -n "$aliases" ]; then
  echo "request_dispatch: a writable handle on a queue's RequestStates:"
  echo "$aliases" | sed 's/^/  /'
  status=1
fi
[ $status -eq 0 ] && echo "request_dispatch: $inside state changes, all in $dispatch"
exit $status
