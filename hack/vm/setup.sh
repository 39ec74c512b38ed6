#!/usr/bin/env bash
# Idempotent setup for the kernel-VM test tier (see hack/vm/README.md).
#
# Everything downloaded is cached under <repo>/.cache/vm/ (or $DRA_VM_CACHE):
#   venv/                    virtme-ng (vng) in a venv of its own
#   bin/virtiofsd            Rust virtiofsd built by `cargo install` (optional)
#   kernel/<kver>/           `dpkg -x` of linux-image-<kver> (+ depmod -b),
#                            marker file .complete when fully unpacked
#   kernel.env               KVER / KIMG / KROOT / VNG for hack/vm/run.py
#   logs/setup-<step>.log    full output of the last run of each step
#
# The only things installed on the machine itself are Debian packages
# (qemu-system-x86 from bookworm-backports, whose source it adds, for the igb NIC model;
# kmod, busybox-static, udev, and `file` if absent) and an empty
# /usr/lib/modules directory (the guest mounts a tmpfs there); the kernel is
# NOT installed as the machine's kernel and its modules stay in the cache.
#
# Environment:
#   DRA_VM_CACHE        cache directory (default <repo>/.cache/vm); must be
#                       visible in the guest, so not under /var/cache, /run,
#                       /var/tmp or /var/log (tmpfs there)
#   DRA_VM_KERNEL_PKG   kernel package to use (default: what
#                       `apt-cache depends linux-image-amd64` names)
#   DRA_VM_EXTRA_APT    extra Debian packages to install (space separated)
#   DRA_VM_VIRTIOFSD=0  share the root over 9p even if virtiofsd is built
#   DRA_VM_VERBOSE=1    stream every step's output instead of only its tail
#                       on failure
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${DRA_VM_CACHE:-$REPO/.cache/vm}"
LOGS="$CACHE/logs"
VIRTME_NG_VERSION="1.42"
VIRTIOFSD_VERSION="1.14.0"
mkdir -p "$CACHE" "$LOGS"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    SUDO=(sudo -n)
fi

T0=$(date +%s.%N)
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# step NAME FUNCTION [ARGS...]: run FUNCTION, print its name and elapsed time;
# on failure print which step failed with the tail of its log and exit 1.
step() {
    local name="$1"
    shift
    local log="$LOGS/setup-${name//[^A-Za-z0-9._-]/_}.log"
    local t
    t=$(now)
    printf 'vm setup: step %s ...\n' "'$name'"
    local rc=0
    CUR_NOTE="$log.note"
    rm -f "$CUR_NOTE"
    # errexit is ignored inside anything that is the left side of || or &&,
    # so run the step's subshell as a plain command with errexit on inside.
    set +e
    if [ "${DRA_VM_VERBOSE:-0}" = "1" ]; then
        (set -e; "$@") 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
    else
        (set -e; "$@") >"$log" 2>&1
        rc=$?
    fi
    set -e
    if [ "$rc" -ne 0 ]; then
        echo "---- last lines of $log ----" >&2
        tail -n 25 "$log" >&2 || true
        echo "----" >&2
        printf "vm setup: step '%s' failed (exit %d) after %ss: %s\n" \
            "$name" "$rc" "$(elapsed "$t")" \
            "$(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-200)" >&2
        exit 1
    fi
    printf "vm setup: step '%s' done in %ss%s\n" "$name" "$(elapsed "$t")" \
        "$(cat "$log.note" 2>/dev/null || true)"
    rm -f "$log.note"
}
note() { printf ' (%s)' "$*" >"$CUR_NOTE"; }

# Serialise concurrent setups (two test runs started at once).
exec 9>"$CACHE/.setup.lock"
if ! flock -w 900 9; then
    echo "vm setup: step 'lock' failed: another setup held $CACHE/.setup.lock for 900 s" >&2
    exit 1
fi

APT_UPDATED=0
apt_update() {
    if [ "$APT_UPDATED" = 0 ]; then
        echo "+ apt-get update"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
        APT_UPDATED=1
    fi
}

has_candidate() {
    apt-cache policy "$1" 2>/dev/null | grep 'Candidate: [^(]' >/dev/null
}

# ---------------------------------------------------------------- apt
# command -> package; only missing commands cause an install.
step_apt() {
    local want=()
    command -v qemu-system-x86_64 >/dev/null || want+=(qemu-system-x86)
    { command -v depmod && command -v modprobe; } >/dev/null || want+=(kmod)
    [ -x /bin/busybox ] && file -L /bin/busybox | grep 'statically linked' >/dev/null \
        || want+=(busybox-static)
    command -v file >/dev/null || want+=(file)
    # virtme-ng's guest init needs udevd to name the virtio-serial ports that
    # carry the command's stdout/stderr/exit code; without it vng falls back
    # to the console, shows nothing and always exits 255.
    [ -x /lib/systemd/systemd-udevd ] || [ -x /usr/lib/systemd/systemd-udevd ] \
        || want+=(udev)
    command -v ip >/dev/null && command -v rdma >/dev/null || want+=(iproute2)
    local p
    for p in ${DRA_VM_EXTRA_APT:-}; do
        dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -x installed >/dev/null \
            || want+=("$p")
    done
    if [ "${#want[@]}" -eq 0 ]; then
        echo "all present"
        note "all present"
        return 0
    fi
    echo "missing: ${want[*]}"
    for p in "${want[@]}"; do
        if ! has_candidate "$p"; then
            echo "no candidate for $p: package lists missing or stale"
            apt_update
            break
        fi
    done
    local install=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q --no-install-recommends "${want[@]}")
    echo "+ ${install[*]}"
    if ! "${install[@]}"; then
        [ "$APT_UPDATED" = 1 ] && return 1
        echo "install failed; retrying after apt-get update (stale lists?)"
        apt_update
        "${install[@]}"
    fi
    command -v qemu-system-x86_64 && command -v depmod && command -v modprobe
    file -L /bin/busybox | grep 'statically linked'
    [ -x /lib/systemd/systemd-udevd ] || [ -x /usr/lib/systemd/systemd-udevd ]
    note "installed ${want[*]}"
}

# ---------------------------------------------------------------- qemu with igb
# The emulated NICs (SR-IOV igb, e1000e) need qemu >= 8: Debian 12's qemu (7.2) has no
# igb model, bookworm-backports' (10.x) has. Added as an apt source of its own, pinned
# at backports' default priority (100): only packages asked for with -t come from it.
BACKPORTS_LIST=/etc/apt/sources.list.d/dra-bookworm-backports.sources
qemu_has_igb() {
    qemu-system-x86_64 -device help 2>/dev/null | grep -q '"igb"'
}
step_qemu_igb() {
    if qemu_has_igb; then
        note "$(qemu-system-x86_64 --version | head -n 1 | awk '{print $4}'), igb present"
        return 0
    fi
    if [ ! -f "$BACKPORTS_LIST" ] && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d; then
        echo "+ adding bookworm-backports to apt's sources ($BACKPORTS_LIST)"
        printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' \
            'Suites: bookworm-backports' 'Components: main' \
            'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
            | "${SUDO[@]}" tee "$BACKPORTS_LIST" >/dev/null
    fi
    APT_UPDATED=0
    apt_update
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends -t bookworm-backports qemu-system-x86
    qemu_has_igb || { echo "qemu from bookworm-backports has no igb device model"; return 1; }
    note "installed $(qemu-system-x86_64 --version | head -n 1 | awk '{print $4}') from bookworm-backports"
}

# ---------------------------------------------------------------- kernel
resolve_kernel_pkg() {
    if [ -n "${DRA_VM_KERNEL_PKG:-}" ]; then
        echo "$DRA_VM_KERNEL_PKG"
        return
    fi
    apt-cache depends linux-image-amd64 2>/dev/null \
        | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}

step_resolve_kernel() {
    local pkg
    pkg=$(resolve_kernel_pkg)
    if [ -z "$pkg" ]; then
        apt_update
        pkg=$(resolve_kernel_pkg)
    fi
    if [ -z "$pkg" ]; then
        echo "apt-cache depends linux-image-amd64 names no linux-image-<version> package"
        return 1
    fi
    echo "$pkg" >"$CACHE/.kernel_pkg"
    echo "kernel package: $pkg"
    note "$pkg"
}

step_download_kernel() {
    local dl="$CACHE/download"
    rm -rf "$dl"
    mkdir -p "$dl"
    cd "$dl"
    echo "+ apt-get download $KPKG"
    if ! apt-get download "$KPKG"; then
        [ "$APT_UPDATED" = 1 ] && return 1
        echo "download failed; retrying after apt-get update (stale lists?)"
        apt_update
        apt-get download "$KPKG"
    fi
    ls -l "$dl"
    note "$(du -h "$dl"/*.deb | cut -f1)"
}

step_unpack_kernel() {
    local tmp="$KROOT.tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    local deb
    deb=$(ls "$CACHE"/download/"$KPKG"_*.deb)
    echo "+ dpkg -x $deb $tmp"
    dpkg -x "$deb" "$tmp"
    test -f "$tmp/boot/vmlinuz-$KVER"
    test -d "$tmp/lib/modules/$KVER"
    rm -rf "$KROOT"
    mv "$tmp" "$KROOT"
    rm -rf "$CACHE/download"
}

step_depmod() {
    # virtme-ng would run depmod itself when modules.dep is missing, but
    # silently; doing it here makes a failure visible.
    echo "+ depmod -a -b $KROOT $KVER"
    depmod -a -b "$KROOT" "$KVER"
    test -s "$KROOT/lib/modules/$KVER/modules.dep"
    # Modules the tier relies on must exist in this kernel.
    local m
    for m in dummy ipvlan macvlan veth rdma_rxe ib_uverbs; do
        modinfo -b "$KROOT" -k "$KVER" -F filename "$m"
    done
    touch "$KROOT/.complete"
}

step_prune_kernels() {
    # Keep only the kernel in use; each unpacked tree is ~400 MB.
    local d
    for d in "$CACHE"/kernel/*; do
        [ -e "$d" ] || continue
        [ "$d" = "$KROOT" ] && continue
        echo "removing $d"
        rm -rf "$d"
    done
}

step_modules_mountpoint() {
    # The guest mounts a tmpfs on /lib/modules (-> /usr/lib/modules) and
    # symlinks the cached modules tree into it (virtme-ng's
    # virtme_link_mods); the host root is read-only in the guest, so the
    # mount point has to exist on the host. An empty directory is all this
    # needs; nothing is installed into it.
    if [ ! -d /lib/modules ]; then
        "${SUDO[@]}" mkdir -p /usr/lib/modules
    fi
    test -d /lib/modules
}

# ---------------------------------------------------------------- virtme-ng
step_virtme_ng() {
    local venv="$CACHE/venv"
    local have=""
    if [ -x "$venv/bin/vng" ] && [ -x "$venv/bin/python" ]; then
        have=$("$venv/bin/python" -c \
            'import importlib.metadata as m; print(m.version("virtme-ng"))' 2>/dev/null || true)
    fi
    if [ "$have" = "$VIRTME_NG_VERSION" ]; then
        echo "virtme-ng $VIRTME_NG_VERSION already in $venv"
        note "cached"
        return 0
    fi
    local py
    py=$(command -v python3)
    rm -rf "$venv"
    echo "+ $py -m venv $venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
        "virtme-ng==$VIRTME_NG_VERSION"
    "$venv/bin/vng" --version
    note "installed $VIRTME_NG_VERSION"
}


# ---------------------------------------------------------------- virtiofsd
# virtme-ng shares the host root with the guest through virtiofs when a Rust
# virtiofsd is available, else through 9p. Under TCG, 9p is ~3x slower for
# reading files (importing pytest + pyroute2: ~25 s vs ~6 s). Debian 12 has no
# Rust virtiofsd package (qemu's own C virtiofsd in /usr/lib/qemu fails with
# virtme-ng and costs ~3 s per share to fall back), so build it with `cargo install`
# once (~1.5-2 min) and cache the binary. If that is impossible the tier still
# works over 9p: this step warns instead of failing.
# errexit does not work in here (called from `if !`): every command is checked.
build_virtiofsd() {
    local cargo="$1" bin="$2"
    local want=() p
    for p in libseccomp-dev libcap-ng-dev pkg-config; do
        dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -x installed >/dev/null \
            || want+=("$p")
    done
    if [ "${#want[@]}" -gt 0 ]; then
        local install=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive
            apt-get install -y -q --no-install-recommends "${want[@]}")
        echo "+ ${install[*]}"
        "${install[@]}" || { apt_update && "${install[@]}"; } || return 1
    fi
    local tgt="$CACHE/cargo-target"
    echo "+ cargo install --locked virtiofsd@$VIRTIOFSD_VERSION"
    CARGO_TARGET_DIR="$tgt" "$cargo" install --locked --quiet \
        --root "$CACHE/virtiofsd-root" "virtiofsd@$VIRTIOFSD_VERSION" || return 1
    mkdir -p "$CACHE/bin" || return 1
    install -m 0755 "$CACHE/virtiofsd-root/bin/virtiofsd" "$bin" || return 1
    rm -rf "$tgt" "$CACHE/virtiofsd-root"
    "$bin" --version
}

step_virtiofsd() {
    local bin="$CACHE/bin/virtiofsd"
    if [ "${DRA_VM_VIRTIOFSD:-1}" = "0" ]; then
        note "disabled by DRA_VM_VIRTIOFSD=0: 9p"
        return 0
    fi
    if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -x "virtiofsd $VIRTIOFSD_VERSION" >/dev/null; then
        note "cached"
        return 0
    fi
    local cargo
    cargo=$(command -v cargo || true)
    [ -z "$cargo" ] && [ -x "$HOME/.cargo/bin/cargo" ] && cargo="$HOME/.cargo/bin/cargo"
    if [ -z "$cargo" ]; then
        echo "no cargo: the guest root will be shared over 9p (slower)"
        note "WARNING: no cargo, using 9p (slower)"
        return 0
    fi
    if ! build_virtiofsd "$cargo" "$bin"; then
        rm -f "$bin"
        echo "WARNING: building virtiofsd failed; the guest root will be shared over 9p (slower)"
        note "WARNING: build failed (see $LOGS/setup-virtiofsd.log), using 9p (slower)"
        return 0
    fi
    note "built $VIRTIOFSD_VERSION"
}

step apt_packages step_apt
step qemu_igb step_qemu_igb
step resolve_kernel_version step_resolve_kernel
KPKG=$(cat "$CACHE/.kernel_pkg")
KVER=${KPKG#linux-image-}
KROOT="$CACHE/kernel/$KVER"
KIMG="$KROOT/boot/vmlinuz-$KVER"
if [ -f "$KROOT/.complete" ]; then
    echo "vm setup: step 'kernel $KVER' cached in $KROOT"
else
    step "download $KPKG" step_download_kernel
    step "unpack $KPKG" step_unpack_kernel
    step "depmod $KVER" step_depmod
fi
step prune_old_kernels step_prune_kernels
step modules_mountpoint step_modules_mountpoint
step virtme-ng step_virtme_ng
step virtiofsd step_virtiofsd
VIRTIOFSD=""
if [ -x "$CACHE/bin/virtiofsd" ] && [ "${DRA_VM_VIRTIOFSD:-1}" != "0" ]; then
    VIRTIOFSD="$CACHE/bin/virtiofsd"
fi

cat >"$CACHE/kernel.env.tmp" <<EOF
KVER=$KVER
KROOT=$KROOT
KIMG=$KIMG
VNG=$CACHE/venv/bin/vng
VIRTIOFSD=$VIRTIOFSD
EOF
mv "$CACHE/kernel.env.tmp" "$CACHE/kernel.env"
echo "vm setup: ready in $(elapsed "$T0")s (kernel $KVER, $CACHE/kernel.env)"
