#!/usr/bin/env bash
# Builds the interop tests' Linux VM: Debian's kernel (linux-image-6.12-amd64 by default) and
# an initramfs with BusyBox, kmod, nvme-cli, fio, mke2fs/e2fsck, blkdiscard and the kernel
# modules the tests load (NVMe/TCP host and target, null_blk, ext4, 9p, ...), all from the
# Debian packages of this machine. Missing host packages (QEMU among them) are installed.
#
# The result goes to the cache, $SENS_VM_CACHE (default ~/.cache/sens-vm):
#   image/vmlinux        the kernel as an ELF, booted through PVH (no in-guest decompression)
#   image/initramfs.img  the root file system (lz4, legacy format: what the kernel reads)
#   image/MANIFEST       what it was built from; written last
#   debs/, kernel/       the kernel package, downloaded once, and its unpacked tree
# When the image is up to date with its inputs (this script, guest-init, the kernel package
# asked for, the versions of the guest's packages) it returns at once; otherwise it
# rebuilds by itself. SENS_VM_KERNEL names another kernel package; FORCE=1 rebuilds.
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,/^set -e/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${SENS_VM_CACHE:-$HOME/.cache/sens-vm}
KPKG=${SENS_VM_KERNEL:-linux-image-6.12-amd64}
GUEST_PKGS="busybox-static kmod nvme-cli fio e2fsprogs util-linux"
HOST_PKGS="qemu-system-x86 socat cpio lz4 xz-utils zstd"
MODULES="virtio_pci virtio_net virtio_rng configfs nvme-tcp nvme-fabrics nvme-auth nvmet nvmet-tcp
  null_blk loop ext4 tls gcm ghash-generic aesni-intel ghash-clmulni-intel crc32c_generic
  crc32c-intel 9p 9pnet_virtio"
say() { echo "vm/build: $*" >&2; }
die() { say "$*"; exit 1; }

mkdir -p "$CACHE"
exec 9> "$CACHE/.lock"
flock 9 # one build at a time

# Host packages: one dpkg query; what is missing is installed (apt may be busy elsewhere).
have=$(dpkg-query -W -f '${db:Status-Abbrev}${Package} ${Version}\n' $GUEST_PKGS $HOST_PKGS \
  2> /dev/null || true)
missing=""
for p in $GUEST_PKGS $HOST_PKGS; do
  [[ $'\n'$have == *$'\n'"ii $p "* ]] || missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "installing:$missing"
  [ "$(id -u)" = 0 ] || die "missing packages:$missing (install them as root: apt-get install$missing)"
  apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      --no-install-recommends $missing > "$CACHE/apt.log" 2>&1
  }
  apt_install || { apt-get -o DPkg::Lock::Timeout=600 update -qq > /dev/null 2>&1 && apt_install; } ||
    { cat "$CACHE/apt.log" >&2; die "cannot install$missing (apt-get install$missing)"; }
  have=$(dpkg-query -W -f '${db:Status-Abbrev}${Package} ${Version}\n' $GUEST_PKGS $HOST_PKGS)
fi

# Up to date?
guest=$(echo "$have" | grep -E "^ii (${GUEST_PKGS// /|}) " | cut -c4-)
inputs=$(cat "$HERE/build.sh" "$HERE/guest-init" <(echo "$KPKG $guest") | sha256sum)
inputs=${inputs:0:16}
IMG=$CACHE/image
if [ "${FORCE:-0}" != 1 ] && grep -qx "inputs=$inputs" "$IMG/MANIFEST" 2> /dev/null; then
  exit 0
fi
t0=$SECONDS

# The kernel package: a name like linux-image-6.12-amd64 depends on the versioned one.
concrete() {
  local d
  d=$({ apt-cache depends "$1" 2> /dev/null || true; } | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)/\1/p;T;q')
  if [ -n "$d" ]; then echo "$d"; elif apt-cache show "$1" > /dev/null 2>&1; then echo "$1"; fi
}
pkg=$(concrete "$KPKG")
if [ -z "$pkg" ]; then
  [ "$(id -u)" = 0 ] && apt-get -o DPkg::Lock::Timeout=600 update -qq > /dev/null 2>&1 || true
  pkg=$(concrete "$KPKG")
fi
[ -n "$pkg" ] || die "apt knows no kernel package $KPKG (Debian 12: bookworm-security or" \
  "bookworm-backports main has linux-image-6.12-amd64; add one, apt-get update, or set SENS_VM_KERNEL)"
mkdir -p "$CACHE/debs"
deb=$(ls "$CACHE/debs/${pkg}"_*.deb 2> /dev/null | sort -V | tail -n 1 || true)
if [ -z "$deb" ]; then
  say "downloading $pkg"
  (cd "$CACHE/debs" && apt-get download "$pkg" > "$CACHE/apt.log" 2>&1) ||
    { cat "$CACHE/apt.log" >&2; die "cannot download $pkg (apt-get download $pkg)"; }
  deb=$(ls "$CACHE/debs/${pkg}"_*.deb | sort -V | tail -n 1)
fi
KROOT=$CACHE/kernel/$pkg
if [ ! -d "$KROOT/lib/modules" ]; then
  rm -rf "$KROOT" "$KROOT.tmp"
  mkdir -p "$KROOT.tmp"
  dpkg-deb -x "$deb" "$KROOT.tmp"
  KV=$(ls "$KROOT.tmp/lib/modules")
  depmod -b "$KROOT.tmp" "$KV"
  mv "$KROOT.tmp" "$KROOT"
fi
KV=$(ls "$KROOT/lib/modules")
say "kernel $KV from $(basename "$deb")"

# The root: merged /usr as on Debian, so that a library goes where ldd says it is.
R=$CACHE/root
rm -rf "$R"
mkdir -p "$R"/usr/{bin,sbin,lib/x86_64-linux-gnu,lib64} "$R"/{dev,proc,sys,tmp,run,root,mnt,etc/nvme}
for d in bin sbin lib lib64; do ln -s usr/$d "$R/$d"; done
with_libs() { # with_libs BINARY...: copies each binary and the libraries that ldd names
  local b l
  for b; do
    cp -L "$b" "$R/usr/${b#/usr/}"
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
      while read -r l; do
        [ -e "$R$l" ] || { mkdir -p "$(dirname "$R$l")"; cp -L "$l" "$R$l"; }
      done
  done
}
with_libs /usr/sbin/nvme /usr/bin/fio /usr/bin/kmod /usr/sbin/mke2fs /usr/sbin/e2fsck \
  /usr/sbin/blkdiscard
for t in modprobe insmod rmmod lsmod modinfo depmod; do ln -s ../bin/kmod "$R/usr/sbin/$t"; done
ln -s mke2fs "$R/usr/sbin/mkfs.ext4"
ln -s e2fsck "$R/usr/sbin/fsck.ext4"
# BusyBox for the rest (sh, ip, nc, mount, awk, ...), where no real tool is.
cp /usr/bin/busybox "$R/usr/bin/busybox"
for a in $(busybox --list-full); do
  [ -e "$R/$a" ] || [ -L "$R/$a" ] || ln -s /usr/bin/busybox "$R/$a"
done

# Modules with what they depend on, decompressed (no xz in the guest's modprobe).
for m in $MODULES; do
  modprobe -d "$KROOT" -S "$KV" --show-depends "$m" 2> /dev/null ||
    die "no module $m in $pkg"
done | awk '$1 == "insmod" { print $2 }' | sort -u | while read -r ko; do
  rel=${ko#"$KROOT"/lib/}
  mkdir -p "$(dirname "$R/usr/lib/$rel")"
  case $ko in
    *.xz) xz -dc "$ko" > "$R/usr/lib/${rel%.xz}" ;;
    *.zst) zstd -qdc "$ko" > "$R/usr/lib/${rel%.zst}" ;;
    *) cp "$ko" "$R/usr/lib/$rel" ;;
  esac
done
cp "$KROOT/lib/modules/$KV"/modules.{order,builtin,builtin.modinfo} "$R/usr/lib/modules/$KV/"
depmod -b "$R" "$KV"
nmods=$(find "$R/usr/lib/modules" -name '*.ko' | wc -l)
install -m 755 "$HERE/guest-init" "$R/init"

# The kernel as an ELF: the bzImage's payload (setup header: payload_offset, payload_length),
# decompressed here, so that QEMU boots it through PVH and TCG need not run the decompressor.
mkdir -p "$IMG"
rm -f "$IMG/MANIFEST"
vmlinuz=$KROOT/boot/vmlinuz-$KV
setup=$(od -An -tu1 -j $((0x1f1)) -N 1 "$vmlinuz")
read -r off len < <(od -An -tu4 -j $((0x248)) -N 8 "$vmlinuz")
start=$(((${setup// /} + 1) * 512 + off))
payload() { # less its last 4 bytes, the decompressed size
  dd if="$vmlinuz" bs=1M iflag=skip_bytes,count_bytes skip=$start count=$((len - 4)) status=none
}
case $(od -An -tx1 -j $start -N 4 "$vmlinuz" | tr -d ' ') in
  28b52ffd) payload | zstd -qdc > "$IMG/vmlinux" ;;
  fd377a58) payload | xz -dc --single-stream > "$IMG/vmlinux" ;;
  1f8b*) payload | gzip -dc > "$IMG/vmlinux" ;;
  *) die "$vmlinuz: unknown payload compression" ;;
esac
[ "$(head -c 4 "$IMG/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || die "no ELF in $vmlinuz"

(cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --owner 0:0 --quiet) |
  lz4 -l -9 -q > "$IMG/initramfs.img"
rm -rf "$R"
{
  echo "kernel=$pkg ($KV)"
  echo "$guest" | sed 's/ /=/'
  echo "initramfs=$(stat -c %s "$IMG/initramfs.img") bytes, $nmods modules"
  echo "inputs=$inputs"
} > "$IMG/MANIFEST.tmp"
mv "$IMG/MANIFEST.tmp" "$IMG/MANIFEST"
say "built $IMG in $((SECONDS - t0)) s"
