#!/usr/bin/env bash
# install-packages.sh [--no-recommends] WHAT PACKAGE...: installs the Debian packages of the
# list that are missing, saying which and how long it took; a machine that has them all runs
# no apt-get at all. WHAT names the list in the messages ("build", "tests", ...).
set -euo pipefail
recommends=()
if [ "${1:-}" = --no-recommends ]; then
  recommends=(--no-install-recommends)
  shift
fi
what=${1:?usage: install-packages.sh [--no-recommends] WHAT PACKAGE...}
shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} = 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "packages for $what are missing: ${missing[*]}" >&2
  echo "run as root, or: sudo apt-get install ${recommends[*]} ${missing[*]}" >&2
  exit 1
fi
t0=$SECONDS
echo "[deps] $what: installing ${#missing[@]} Debian packages: ${missing[*]}"
# The package lists are refreshed when they are older than a day (apt-get update costs 5-20 s),
# and once more if an install from lists that seemed fresh fails.
install() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${recommends[@]}" "${missing[@]}" > "$log" 2>&1; }
log=$(mktemp /tmp/sens-apt.XXXXXX.log)
updated=0
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2> /dev/null | head -1)" ]; then
  echo "[deps] apt-get update"
  apt-get update -qq
  updated=1
fi
if ! install; then
  ok=0
  if [ $updated = 0 ]; then
    echo "[deps] install failed; apt-get update and again"
    apt-get update -qq && install && ok=1
  fi
  if [ $ok = 0 ]; then
    tail -n 30 "$log" >&2
    echo "[deps] apt-get install failed (whole log: $log)" >&2
    exit 1
  fi
fi
rm -f "$log"
echo "[deps] $what: installed in $((SECONDS - t0)) s"
