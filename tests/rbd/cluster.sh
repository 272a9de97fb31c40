#!/bin/bash
# tests/rbd/cluster.sh: the one-node Ceph cluster that tests/rbd (test_rbd) and bench/rbd.py
# run against. Debian 12's own packages (Ceph 16.2 "Pacific"), no systemd, no cephadm: one
# monitor (mon.a), one manager (mgr.x) and one OSD (osd.0) run as ordinary background
# processes, and every file they use (config, keyrings, pid files, sockets, logs, the OSD's
# data) lives in one directory, so that several clusters can run side by side on other ports.
set -euo pipefail
set -o errtrace  # the ERR trap below also fires inside functions

usage() {
    cat <<EOF
usage: tests/rbd/cluster.sh COMMAND

  start      create the cluster on first use, or start the daemons of an existing one that
             are not running; then wait until every placement group is active+clean and make
             sure the pool and the image exist. A running cluster is left alone (exit 0).
  stop       stop the daemons (SIGTERM, then SIGKILL after 20 s); the data is kept
  clean      stop, then remove the cluster's directory
  status     the daemons and 'ceph -s' (exit 0 when all three daemons run, 3 otherwise)
  install    apt-get the Ceph packages this script needs (as root; 'make deps' does it too)

Environment (defaults in brackets):
  CLUSTER_DIR          where everything lives [\${XDG_CACHE_HOME:-\$HOME/.cache}/sens-ceph]
  CLUSTER_MON_PORT     the monitor's msgr2 port on 127.0.0.1 [3300]
  CLUSTER_MON_V1_PORT  the monitor's legacy (v1) port [6789]
  CLUSTER_OSD_STORE    bluestore (a sparse file) or memstore (RAM, kept through a stop
                       that ends in time, lost by a kill) [bluestore]
  CLUSTER_OSD_GB       the OSD's size in GiB [10]
  CLUSTER_OSD_MEMORY   osd_memory_target in bytes [1073741824]
  CLUSTER_POOL         the replicated pool (size 1) made for RBD [rbd]
  CLUSTER_PG_NUM       its placement groups [32]
  CLUSTER_IMAGE        an RBD image to create in it, empty for none [test]
  CLUSTER_IMAGE_SIZE   its size [1G]
  CLUSTER_TIMEOUT      seconds to wait for each step of start [180]

Clients: export CEPH_CONF=\$CLUSTER_DIR/ceph.conf (client.admin, keyring \$CLUSTER_DIR/keyring).
Logs: \$CLUSTER_DIR/log (a failed start prints the end of the logs of the step that failed).
EOF
}

DIR=${CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sens-ceph}
MON_PORT=${CLUSTER_MON_PORT:-3300}
MON_V1_PORT=${CLUSTER_MON_V1_PORT:-6789}
OSD_STORE=${CLUSTER_OSD_STORE:-bluestore}
OSD_GB=${CLUSTER_OSD_GB:-10}
OSD_MEMORY=${CLUSTER_OSD_MEMORY:-1073741824}
POOL=${CLUSTER_POOL:-rbd}
PG_NUM=${CLUSTER_PG_NUM:-32}
IMAGE=${CLUSTER_IMAGE-test}
IMAGE_SIZE=${CLUSTER_IMAGE_SIZE:-1G}
STEP_TIMEOUT=${CLUSTER_TIMEOUT:-180}
STOP_GRACE=20

DAEMONS=(mon.a mgr.x osd.0)  # start order; osd.0 stops first, while the monitor still listens

# ---------------------------------------------------------------- output and failures
T_START=${EPOCHREALTIME//[.,]/}
STEP=""         # what start is doing, for the failure report
STEP_LOGS=()    # the logs that explain a failure of that step
STEP_T=$T_START
LAST_ERROR=""

seconds_since() {  # seconds (one decimal) since a ${EPOCHREALTIME} without its point
    local tenths=$(( (${EPOCHREALTIME//[.,]/} - $1) / 100000 ))
    printf '%d.%d' $((tenths / 10)) $((tenths % 10))
}
say() { printf '[cluster %5ss] %s\n' "$(seconds_since "$T_START")" "$*"; }
fail() { printf 'cluster.sh: %s\n' "$*" >&2; exit 1; }

step() {  # step NAME LOG...: announce a step of start and the logs that tell why it failed
    STEP=$1
    shift
    STEP_LOGS=("$@")
    STEP_T=${EPOCHREALTIME//[.,]/}
}
step_done() { say "$* ($(seconds_since "$STEP_T") s)"; }

show_tail() {
    [ -s "$1" ] || return 0
    printf -- '----- %s (last 30 lines)\n' "$1"
    grep -v '^[[:space:]]*$' "$1" | tail -n 30
}

on_exit() {
    local rc=$?
    [ "$rc" -ne 0 ] && [ -n "$STEP" ] || return 0
    {
        printf 'cluster.sh: start FAILED in step "%s" after %s s' "$STEP" "$(seconds_since "$T_START")"
        [ -z "$LAST_ERROR" ] || printf ' (%s)' "$LAST_ERROR"
        printf '\n'
        local f
        for f in "${STEP_LOGS[@]}"; do show_tail "$f"; done
        printf 'cluster.sh: all logs are in %s; the daemons started so far still run (%s stop)\n' \
            "$LOG" "$0"
    } >&2
}
trap on_exit EXIT
trap 'LAST_ERROR="line $LINENO: \"$BASH_COMMAND\" exited with $?"' ERR

# ---------------------------------------------------------------- paths and checks
case "$MON_PORT$MON_V1_PORT$OSD_GB$OSD_MEMORY$PG_NUM$STEP_TIMEOUT" in
    *[!0-9]*) fail "CLUSTER_MON_PORT, CLUSTER_MON_V1_PORT, CLUSTER_OSD_GB, CLUSTER_OSD_MEMORY, CLUSTER_PG_NUM and CLUSTER_TIMEOUT are numbers" ;;
esac
[ "$MON_PORT" != "$MON_V1_PORT" ] || fail "CLUSTER_MON_PORT and CLUSTER_MON_V1_PORT must differ"
case "$OSD_STORE" in bluestore | memstore) ;; *) fail "CLUSTER_OSD_STORE is bluestore or memstore, not '$OSD_STORE'" ;; esac

DIR=$(realpath -m -- "$DIR")  # the daemons run in /: every path they get must be absolute
CONF=$DIR/ceph.conf
RUN=$DIR/run
LOG=$DIR/log
MARK=$DIR/created  # written once the OSD exists: from then on start restarts, never creates
export CEPH_CONF=$CONF
unset CEPH_ARGS  # a user's --id or --keyring would turn the admin commands below into theirs

ceph_() { timeout 60 ceph --conf "$CONF" --connect-timeout 30 "$@"; }
rbd_() { timeout 120 rbd --conf "$CONF" "$@"; }
quiet() {  # quiet COMMAND...: its output only when it fails
    local out
    out=$("$@" 2>&1) && return 0
    local rc=$?
    printf '%s\n' "$out" >&2
    return "$rc"
}

# The tools start needs, as "command:package".
TOOLS=(ceph-mon:ceph-mon ceph-mgr:ceph-mgr ceph-osd:ceph-osd ceph:ceph-common
    ceph-authtool:ceph-common monmaptool:ceph-base rbd:ceph-common uuidgen:uuid-runtime)
need_tools() {
    local t missing=() pkgs=()
    for t in "${TOOLS[@]}"; do
        command -v "${t%%:*}" >/dev/null || { missing+=("${t%%:*}"); pkgs+=("${t#*:}"); }
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    printf 'cluster.sh: missing here: %s (Debian packages: %s).\n' \
        "${missing[*]}" "$(printf '%s\n' "${pkgs[@]}" | sort -u | xargs)" >&2
    printf 'cluster.sh: install them with "make deps" or "tests/rbd/cluster.sh install" (as root).\n' >&2
    exit 3
}

# ---------------------------------------------------------------- daemons
# pid_of NAME: print the pid of the daemon NAME (mon.a, ...) of THIS cluster, or fail when it
# does not run. The pid file alone is not proof: the process may have exited (nobody may reap
# it here: a zombie answers kill -0), and its pid may since belong to another program or to
# the same daemon of another cluster; its command line names our ceph.conf.
pid_of() {
    local pid stat cmdline
    pid=$(cat 2>/dev/null "$RUN/$1.pid") || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    stat=$(cat 2>/dev/null "/proc/$pid/stat") || return 1
    stat=${stat##*) }
    case "${stat%% *}" in Z | X | x) return 1 ;; esac
    cmdline=$(tr 2>/dev/null '\0' ' ' <"/proc/$pid/cmdline") || return 1
    [[ " $cmdline " == *" $CONF "* ]] || return 1
    echo "$pid"
}

# launch NAME: start a daemon, which forks into the background and writes its pid file.
launch() {
    local name=$1 kind=${1%%.*} id=${1#*.} rc=0 i pid
    rm -f "$RUN/$name.pid"
    "ceph-$kind" -i "$id" -c "$CONF" </dev/null >>"$LOG/$name.out" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || fail "ceph-$kind -i $id exited with status $rc"
    for i in $(seq 100); do
        pid=$(pid_of "$name") && { say "$name started (pid $pid)"; return 0; }
        sleep 0.1
    done
    fail "$name is not running 10 s after its start"
}

# wait_for WHAT CHECK DAEMON...: run CHECK every half second until it succeeds; fail when one
# of the daemons exits or after STEP_TIMEOUT seconds. CHECK leaves what it saw in SEEN.
SEEN=""
wait_for() {
    local what=$1 check=$2 d deadline=$((SECONDS + STEP_TIMEOUT))
    shift 2
    SEEN=""
    until "$check"; do
        for d in "$@"; do pid_of "$d" >/dev/null || fail "$d exited while waiting for $what"; done
        [ "$SECONDS" -lt "$deadline" ] || fail "no $what within $STEP_TIMEOUT s; last seen: ${SEEN:-nothing}"
        sleep 0.5
    done
}

mon_in_quorum() {
    SEEN=$(timeout 20 ceph --conf "$CONF" --connect-timeout 5 mon stat 2>&1) || return 1
    [[ $SEEN == *"quorum 0 a"* ]]
}

# The OSD's own view, through its admin socket: "active" once the cluster has marked this very
# process up (a monitor's map alone may still show the previous, killed process as up).
osd_active() {
    SEEN=$(timeout 20 ceph --admin-daemon "$RUN/osd.0.asok" status 2>&1) || return 1
    [[ $SEEN =~ \"state\":\ *\"active\" ]]
}

pgs_clean() {  # "33 pgs: 33 active+clean; ..." and nothing else
    SEEN=$(timeout 20 ceph --conf "$CONF" --connect-timeout 10 pg stat 2>&1) || return 1
    [[ $SEEN =~ ^([0-9]+)\ pgs:\ ([0-9]+)\ active\+clean\; ]] &&
        [ "${BASH_REMATCH[1]}" -gt 0 ] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]
}

# ---------------------------------------------------------------- creation
write_config() {
    local authx=cephx fast_shutdown=true
    # A memstore OSD writes its RAM out only when it unmounts the store, which the fast
    # shutdown of a SIGTERM skips; BlueStore has everything on disk already.
    [ "$OSD_STORE" = bluestore ] || fast_shutdown=false
    cat >"$CONF" <<EOF
# A one-node test cluster written by tests/rbd/cluster.sh: everything under $DIR.
[global]
fsid = $1
mon_host = [v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_V1_PORT]
mon_initial_members = a
public_addr = 127.0.0.1
ms_bind_ipv6 = false
auth_cluster_required = $authx
auth_service_required = $authx
auth_client_required = $authx
run_dir = $RUN
pid_file = $RUN/\$name.pid
admin_socket = $RUN/\$name.asok
log_file = $LOG/\$name.log
crash_dir = $DIR/crash
# One OSD holds one copy of everything, on the one host.
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_crush_chooseleaf_type = 0
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
# A test disk may be fuller than a production monitor would accept.
mon_data_avail_warn = 2
mon_data_avail_crit = 1
# PG states reach 'ceph pg stat' within a second (5 s by default): start waits on them.
mgr_stats_period = 1
mon_mgr_digest_period = 1

[mon]
mon_data = $DIR/mon/\$cluster-\$id
keyring = \$mon_data/keyring
auth_allow_insecure_global_id_reclaim = false

[mgr]
mgr_data = $DIR/mgr/\$cluster-\$id
keyring = \$mgr_data/keyring
# only the always-on modules and iostat (not restful, nfs or the dashboard)
mgr_initial_modules = iostat

[osd]
osd_data = $DIR/osd/\$cluster-\$id
keyring = \$osd_data/keyring
osd_objectstore = $OSD_STORE
osd_memory_target = $OSD_MEMORY
bluestore_block_create = true
bluestore_block_size = $((OSD_GB << 30))
bluestore_block_db_create = false
bluestore_block_wal_create = false
bluestore_fsck_on_mount = false
memstore_device_bytes = $((OSD_GB << 30))
osd_fast_shutdown = $fast_shutdown

[client]
keyring = $DIR/keyring
admin_socket = $RUN/\$name.\$pid.asok
# a block target needs every acknowledged write on the OSD, not in a client's cache
rbd_cache = false
EOF
}

create() {
    local fsid osd_uuid id
    fsid=$(uuidgen)

    step "monitor" "$LOG/mon.a.out" "$LOG/mon.a.log"
    mkdir -p "$RUN" "$LOG" "$DIR/crash" "$DIR/mon" "$DIR/mgr" "$DIR/osd/ceph-0"
    write_config "$fsid"
    # The monitor's first keyring holds its own key and client.admin's, which the clients use.
    # (CEPH_CONF=/dev/null: our config would give ceph-authtool a log file named after -n.)
    CEPH_CONF=/dev/null quiet ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n client.admin \
        --cap mon 'allow *' --cap mgr 'allow *' --cap osd 'allow *' --cap mds 'allow *'
    CEPH_CONF=/dev/null quiet ceph-authtool --create-keyring "$DIR/mon-init.keyring" --gen-key -n mon. \
        --cap mon 'allow *'
    CEPH_CONF=/dev/null quiet ceph-authtool "$DIR/mon-init.keyring" --import-keyring "$DIR/keyring"
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_V1_PORT]" \
        "$DIR/monmap" >/dev/null
    quiet ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/mon-init.keyring"
    rm -f "$DIR/monmap" "$DIR/mon-init.keyring"
    launch mon.a
    wait_for "monitor quorum" mon_in_quorum mon.a
    step_done "monitor mon.a in quorum on 127.0.0.1:$MON_PORT (fsid $fsid)"

    step "manager" "$LOG/mgr.x.out" "$LOG/mgr.x.log" "$LOG/mon.a.log"
    mkdir -p "$DIR/mgr/ceph-x"
    quiet ceph_ auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
        -o "$DIR/mgr/ceph-x/keyring"
    launch mgr.x
    step_done "manager mgr.x started"

    step "osd.0 creation" "$LOG/osd.0.mkfs.log" "$LOG/mon.a.log"
    osd_uuid=$(uuidgen)
    id=$(ceph_ osd new "$osd_uuid")
    [ "$id" = 0 ] || fail "the monitor gave the new OSD id '$id', not 0"
    quiet ceph_ auth get-or-create osd.0 mon 'allow profile osd' mgr 'allow profile osd' osd 'allow *' \
        -o "$DIR/osd/ceph-0/keyring"
    ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" >"$LOG/osd.0.mkfs.log" 2>&1
    printf 'fsid %s\ncreated %s\n' "$fsid" "$(date -Is)" >"$MARK"
    step_done "osd.0 made ($OSD_STORE, $OSD_GB GiB)"
}

ensure_pool() {
    local pools
    pools=$(ceph_ osd pool ls)
    if [[ $'\n'$pools$'\n' == *$'\n'"$POOL"$'\n'* ]]; then return 0; fi
    quiet ceph_ osd pool create "$POOL" "$PG_NUM" "$PG_NUM" replicated
    quiet ceph_ osd pool set "$POOL" size 1 --yes-i-really-mean-it
    quiet rbd_ pool init "$POOL"
    step_done "pool $POOL made (size 1, $PG_NUM PGs)"
}

ensure_image() {
    [ -n "$IMAGE" ] || return 0
    if rbd_ info "$POOL/$IMAGE" >/dev/null 2>&1; then return 0; fi
    quiet rbd_ create --size "$IMAGE_SIZE" "$POOL/$IMAGE"
    step_done "image $POOL/$IMAGE made ($IMAGE_SIZE)"
}

# ---------------------------------------------------------------- commands
cmd_start() {
    need_tools
    local d pid missing=() running=()
    if [ -e "$MARK" ]; then
        for d in "${DAEMONS[@]}"; do
            if pid=$(pid_of "$d"); then running+=("$d:$pid"); else missing+=("$d"); fi
        done
        if [ ${#missing[@]} -eq 0 ]; then
            say "already running in $DIR (${running[*]})"
        else
            say "starting the cluster in $DIR (${missing[*]} not running)"
        fi
    elif [ ! -e "$DIR" ] || [ -z "$(ls -A "$DIR")" ]; then
        say "creating a cluster in $DIR (mon on 127.0.0.1:$MON_PORT and :$MON_V1_PORT)"
        create
    else
        fail "$DIR is neither empty nor a cluster this script finished creating (no $MARK); if an earlier start failed there, see $DIR/log, then run: $0 clean"
    fi

    if ! pid_of mon.a >/dev/null; then
        step "monitor" "$LOG/mon.a.out" "$LOG/mon.a.log"
        launch mon.a
        wait_for "monitor quorum" mon_in_quorum mon.a
        step_done "monitor mon.a in quorum"
    fi
    if ! pid_of mgr.x >/dev/null; then
        step "manager" "$LOG/mgr.x.out" "$LOG/mgr.x.log"
        launch mgr.x
    fi
    step "osd.0" "$LOG/osd.0.out" "$LOG/osd.0.log"
    pid_of osd.0 >/dev/null || launch osd.0
    wait_for "active osd.0" osd_active osd.0 mon.a
    step_done "osd.0 up"

    step "pool $POOL" "$LOG/osd.0.log" "$LOG/mon.a.log"
    ensure_pool
    step "active+clean" "$LOG/osd.0.log" "$LOG/mgr.x.log" "$LOG/mon.a.log"
    wait_for "active+clean placement groups" pgs_clean osd.0 mgr.x mon.a
    step_done "${SEEN%%;*}"
    step "image $POOL/$IMAGE" "$LOG/osd.0.log"
    ensure_image
    STEP=""
    say "ready: export CEPH_CONF=$CONF"
}

# stop_daemons NAME...: SIGTERM, up to STOP_GRACE seconds to exit, then SIGKILL. A daemon may
# exit at any moment in between (it was dying already, or someone killed it): a signal to a
# process that is gone is not an error, and neither is a pid file that went with it.
stop_daemons() {
    local name pid i live=() left=()
    for name; do
        pid=$(pid_of "$name") || continue
        kill -TERM "$pid" 2>/dev/null || true
        live+=("$name")
    done
    for ((i = 0; i < STOP_GRACE * 10 && ${#live[@]} > 0; i++)); do
        left=()
        for name in "${live[@]}"; do pid_of "$name" >/dev/null && left+=("$name"); done
        live=(${left[@]+"${left[@]}"})
        [ ${#live[@]} -eq 0 ] || sleep 0.1
    done
    for name in ${live[@]+"${live[@]}"}; do
        pid=$(pid_of "$name") || continue
        say "$name (pid $pid) still runs $STOP_GRACE s after SIGTERM: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    done
    for ((i = 0; i < 50 && ${#live[@]} > 0; i++)); do
        left=()
        for name in "${live[@]}"; do pid_of "$name" >/dev/null && left+=("$name"); done
        live=(${left[@]+"${left[@]}"})
        [ ${#live[@]} -eq 0 ] || sleep 0.1
    done
    [ ${#live[@]} -eq 0 ] || fail "${live[*]} still running after SIGKILL"
}

cmd_stop() {
    local d pid running=()
    for d in "${DAEMONS[@]}"; do pid=$(pid_of "$d") && running+=("$d:$pid"); done
    if [ ${#running[@]} -eq 0 ]; then
        say "not running ($DIR)"
    else
        say "stopping ${running[*]}"
        stop_daemons osd.0
        stop_daemons mgr.x mon.a
        say "stopped (data kept in $DIR)"
    fi
    rm -f "$RUN"/*.pid
}

cmd_clean() {
    if [ ! -e "$DIR" ]; then
        say "nothing to remove at $DIR"
        return 0
    fi
    # Only a directory this script made is removed wholesale (CLUSTER_DIR=$HOME must not be).
    if [ -n "$(ls -A "$DIR")" ] && ! grep -qs 'written by tests/rbd/cluster.sh' "$CONF"; then
        fail "$DIR does not look like a cluster made by this script (no $CONF of ours): not removed"
    fi
    cmd_stop
    rm -rf -- "$DIR"
    say "removed $DIR"
}

cmd_status() {
    local d pid all=1
    if [ ! -e "$MARK" ]; then
        echo "no cluster in $DIR"
        return 3
    fi
    for d in "${DAEMONS[@]}"; do
        if pid=$(pid_of "$d"); then
            printf '%-6s %s\n' "$d" "$(ps -o pid=,rss=,pcpu=,etime= -p "$pid" |
                awk '{printf "pid %s, %d MiB, %s%% CPU, up %s", $1, $2 / 1024, $3, $4}')"
        else
            printf '%-6s not running\n' "$d"
            all=0
        fi
    done
    if pid_of mon.a >/dev/null; then ceph_ -s || true; fi
    echo "export CEPH_CONF=$CONF"
    [ "$all" = 1 ] || return 3
}

cmd_install() {
    local pkgs=(ceph-mon ceph-osd ceph-mgr ceph-common uuid-runtime procps)
    local sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    say "apt-get install --no-install-recommends ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${pkgs[@]}"
    dpkg-query -W -f='${Package} ${Version}\n' ceph-mon ceph-osd ceph-mgr ceph-common
    say "installed"
}

case "${1:-}" in
    start | stop | clean | status | install)
        [ $# -eq 1 ] || fail "$1 takes no arguments"
        "cmd_$1"
        ;;
    -h | --help | help)
        usage
        ;;
    "")
        usage >&2
        exit 2
        ;;
    *)
        printf 'cluster.sh: unknown command "%s"\n\n' "$1" >&2
        usage >&2
        exit 2
        ;;
esac
