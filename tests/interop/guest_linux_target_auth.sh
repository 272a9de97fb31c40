# Runs inside the test VM (BusyBox sh): the Linux kernel target (nvmet-tcp) on guest
# port 4420 with DH-HMAC-CHAP keys in configfs, for sens as the host. One subsystem; three
# allowed hosts, each with its own key, hash and DH group (HOSTS: "NQN,KEY,CTRLKEY,HASH,GROUP"
# separated by spaces; CTRLKEY "-" for none). Prints TARGET_READY, then holds until the host
# connects to guest port 5555 or HOLD seconds pass.
. /files/guest_common.sh
set -e
DEV=$(nullblk_dev ${SIZE_MB:-256} 1)
nvmet_load
nvmet_subsys "$NQN"
echo 0 > "$NVMET/subsystems/$NQN/attr_allow_any_host"
nvmet_ns "$NQN" 1 "$DEV"
for h in $HOSTS; do
  IFS=, read -r hnqn key ckey hash group << EOT
$h
EOT
  d=$NVMET/hosts/$hnqn
  mkdir "$d"
  echo "$key" > "$d/dhchap_key"
  [ "$ckey" = - ] || echo "$ckey" > "$d/dhchap_ctrl_key"
  echo "hmac($hash)" > "$d/dhchap_hash"
  echo "$group" > "$d/dhchap_dhgroup"
  ln -s "$d" "$NVMET/subsystems/$NQN/allowed_hosts/$hnqn"
done
nvmet_port 1 0.0.0.0 4420
nvmet_link 1 "$NQN"
note "TARGET_READY nqn=$NQN dev=$DEV listening 10.0.2.15:4420"
set +e
wait_release 5555 "${HOLD:-400}"; note "released rc=$?"
dmesg | grep -E 'nvmet' | tail -n 30
