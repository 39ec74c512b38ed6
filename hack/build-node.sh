#!/usr/bin/env bash
# Build the container runtime of the local node (localcluster/, make demo, make test-node):
# containerd, containerd-shim-runc-v2 and ctr at the containerd version pinned
# in hack/node/go.mod, runc (with seccomp) at its pinned version, and the
# sandbox's pause program (hack/node/pause.c), into .cache/node/<versions>/bin/.
# The same versions as kind-node/Dockerfile, so both install paths run the same
# runtime. Installs the Debian packages the node needs when they are missing.
#
#   hack/build-node.sh              build if needed (a no-op when up to date)
#   hack/build-node.sh --bin-dir    print the bin directory and exit
#   hack/build-node.sh --force      rebuild even if up to date
#   hack/build-node.sh --packages   only check/install the Debian packages
#
# Environment:
#   NODE_APT_INSTALL=0  never run apt-get: a missing package is an error that
#       names it (default: install missing packages when running as root).
#   GOCACHE / GOMODCACHE  Go's own defaults unless set (see hack/build-k8s.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD_DIR="$ROOT/hack/node"

mod_version() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$MOD_DIR/go.mod"; }
CONTAINERD_VERSION="$(mod_version github.com/containerd/containerd/v2)"
RUNC_VERSION="$(mod_version github.com/opencontainers/runc)"
if [[ -z "$CONTAINERD_VERSION" || -z "$RUNC_VERSION" ]]; then
    echo "build-node: cannot find containerd and runc in $MOD_DIR/go.mod" >&2
    exit 1
fi
OUT_DIR="$ROOT/.cache/node/containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION/bin"

# Debian packages: what the build needs, then what the running node needs.
#   gcc, libc6-dev      the static pause program; runc's cgo parts
#   libseccomp-dev      runc's seccomp support (libseccomp.a, pkg-config file)
#   pkg-config          how runc's cgo finds libseccomp
#   busybox-static      /bin/busybox for the busybox image the examples run
#   containernetworking-plugins  bridge, host-local, loopback in /usr/lib/cni
#   iproute2, util-linux  ip (namespaces, links), nsenter, mount
PACKAGES=(gcc libc6-dev libseccomp-dev pkg-config busybox-static containernetworking-plugins
    iproute2 util-linux)

FORCE=0
ONLY_PACKAGES=0
for arg in "$@"; do
    case "$arg" in
        --bin-dir) echo "$OUT_DIR"; exit 0 ;;
        --force) FORCE=1 ;;
        --packages) ONLY_PACKAGES=1 ;;
        -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-node: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

# shellcheck source=hack/lib/debian-packages.sh
source "$ROOT/hack/lib/debian-packages.sh"
ensure_debian_packages build-node NODE_APT_INSTALL "${PACKAGES[@]}"
[[ "$ONLY_PACKAGES" == 1 ]] && exit 0

if command -v go >/dev/null 2>&1; then
    GO="$(command -v go)"
elif [[ -x /usr/local/go/bin/go ]]; then
    GO=/usr/local/go/bin/go
else
    echo "build-node: no Go toolchain found (PATH or /usr/local/go/bin)" >&2
    exit 1
fi
export GOCACHE="${GOCACHE:-$("$GO" env GOCACHE)}"
export GOMODCACHE="${GOMODCACHE:-$("$GO" env GOMODCACHE)}"
export GOTOOLCHAIN=local
export GOFLAGS="-modcacherw -mod=readonly -buildvcs=false"

BINARIES=(containerd containerd-shim-runc-v2 ctr runc pause)
STAMP_KEY="$(
    {
        echo "$CONTAINERD_VERSION $RUNC_VERSION"
        "$GO" env GOVERSION
        gcc --version | head -1
        dpkg-query -W -f='${Version}\n' libseccomp-dev
        cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" "$MOD_DIR/pause.c" "${BASH_SOURCE[0]}"
    } | sha256sum | cut -c1-16
)"
STAMP="$OUT_DIR/.stamp"

up_to_date() {
    [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_KEY" ]] || return 1
    local b
    for b in "${BINARIES[@]}"; do [[ -x "$OUT_DIR/$b" ]] || return 1; done
}

if [[ "$FORCE" == 0 ]] && up_to_date; then
    echo "build-node: containerd $CONTAINERD_VERSION, runc $RUNC_VERSION are up to date in $OUT_DIR"
    exit 0
fi

START=$SECONDS
echo "build-node: building containerd $CONTAINERD_VERSION, runc $RUNC_VERSION and pause" \
    "with $("$GO" env GOVERSION) on $(nproc) cores into $OUT_DIR"
mkdir -p "$OUT_DIR"
rm -f "$STAMP"
TMP_OUT="$(mktemp -d "$OUT_DIR/.tmp.XXXXXX")"
trap 'rm -rf "$TMP_OUT"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
cd "$MOD_DIR"

t0=$SECONDS
"$GO" mod download
echo "build-node: [modules] done in $((SECONDS - t0))s"

# containerd as its Makefile builds it (version variables, the snapshotters a
# node without btrfs/devmapper/zfs never selects left out), but without cgo:
# nothing it needs here uses cgo, and a static binary does not depend on libc.
t0=$SECONDS
CPKG=github.com/containerd/containerd/v2
CLDFLAGS="-s -w -X $CPKG/version.Version=$CONTAINERD_VERSION -X $CPKG/version.Revision=$CONTAINERD_VERSION -X $CPKG/version.Package=$CPKG"
CGO_ENABLED=0 "$GO" build -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "$CLDFLAGS" \
    -o "$TMP_OUT/" "$CPKG/cmd/containerd" "$CPKG/cmd/containerd-shim-runc-v2" "$CPKG/cmd/ctr"
echo "build-node: [containerd, containerd-shim-runc-v2, ctr] done in $((SECONDS - t0))s"

# runc as `make static` builds it: cgo (libcontainer/nsenter, libseccomp), a
# static PIE, the seccomp tag (without it every pod fails: the CRI always gives
# the sandbox a seccomp profile).
t0=$SECONDS
CGO_ENABLED=1 "$GO" build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs netgo osusergo" \
    -ldflags "-X main.gitCommit=$RUNC_VERSION -linkmode external -extldflags -static-pie" \
    -o "$TMP_OUT/runc" github.com/opencontainers/runc
echo "build-node: [runc] done in $((SECONDS - t0))s"

t0=$SECONDS
gcc -Os -static -Wall -Werror -o "$TMP_OUT/pause" "$MOD_DIR/pause.c"
strip "$TMP_OUT/pause"
echo "build-node: [pause] done in $((SECONDS - t0))s"

# Refuse binaries that are not what was asked for. (grep without -q reads all its
# input: with pipefail, an early exit would fail the writer with SIGPIPE.)
"$TMP_OUT/runc" --version | grep -x "runc version ${RUNC_VERSION#v}" >/dev/null || {
    echo "build-node: runc reports $("$TMP_OUT/runc" --version | head -1), want ${RUNC_VERSION#v}" >&2
    exit 1
}
"$TMP_OUT/runc" --version | grep "^libseccomp: " >/dev/null || {
    echo "build-node: runc was built without seccomp" >&2
    exit 1
}
"$TMP_OUT/containerd" --version | grep -F " $CONTAINERD_VERSION " >/dev/null || {
    echo "build-node: containerd reports $("$TMP_OUT/containerd" --version)" >&2
    exit 1
}

for b in "${BINARIES[@]}"; do mv -f "$TMP_OUT/$b" "$OUT_DIR/$b"; done
echo "$STAMP_KEY" > "$STAMP"
echo "build-node: $(cd "$OUT_DIR" && ls -sh --block-size=M "${BINARIES[@]}" | tr '\n' ' ')"
echo "build-node: built in $((SECONDS - START))s total"
