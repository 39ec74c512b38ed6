#!/usr/bin/env bash
# Build the driver image from the project's unchanged Dockerfile without a Docker engine
# (make image): buildah, as root, with its storage under .cache/image/, from a Python base
# made here from Debian packages (mmdebstrap). Writes a docker-archive that
# `ctr -n k8s.io images import` and `docker load` take:
#   .cache/image/dra-driver-<key>.tar   the image, named docker.io/library/<IMAGE>
#   .cache/image/dra-driver.tar         a symlink to the current archive
#   .cache/image/dra-driver.json        the current archive, its image name, key and base
# The key hashes everything the image takes (the files the Dockerfile copies, the base,
# the image name, this script): with an archive of that key present nothing is built.
# Installs the Debian packages it needs when they are missing (as root, with apt-get), as
# hack/build-node.sh does; IMAGE_APT_INSTALL=0: a missing one is an error that names it.
#
#   hack/build-image.sh               build if needed (a no-op when up to date)
#   hack/build-image.sh --archive     print the current archive's path and exit
#   hack/build-image.sh --force       rebuild the image even if up to date
#   hack/build-image.sh --force-base  remake the base too (e.g. for Debian's updates)
#   hack/build-image.sh --packages    only check (and install) the Debian packages
#
# Environment:
#   IMAGE=dra-driver:dev  the image's name and tag (docker.io/library/ is added to a
#       name without a registry, as docker does)
#   IMAGE_SUITE=trixie    the Debian release of the base (trixie: Python 3.13;
#       bookworm: Python 3.11, the oldest the project supports)
#   IMAGE_MIRROR=http://deb.debian.org/debian  where the base's packages come from
#   PYTHON_IMAGE          use this base instead (a name buildah finds or pulls); no
#       base is made then
#   IMAGE_BUILD_CA=/etc/ssl/certs/ca-certificates.crt  bind-mounted read-only over the
#       build's CA bundle while it runs (pip reaches the package index through it); not
#       part of any layer. Empty: the base's own bundle.
#   IMAGE_STEP_TIMEOUT=1200  seconds any one step (base, build, export) may take
#   IMAGE_APT_INSTALL=0   never run apt-get: a missing package is an error that names it
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache/image"
LINK="$CACHE/dra-driver.tar"
MANIFEST="$CACHE/dra-driver.json"

IMAGE="${IMAGE:-dra-driver:dev}"
SUITE="${IMAGE_SUITE:-trixie}"
MIRROR="${IMAGE_MIRROR:-http://deb.debian.org/debian}"
BUILD_CA="${IMAGE_BUILD_CA-/etc/ssl/certs/ca-certificates.crt}"
STEP_TIMEOUT="${IMAGE_STEP_TIMEOUT:-1200}"
LOCK_TIMEOUT=600

# The base: what the Dockerfile calls (python, pip, python -m venv) and pip's TLS roots.
#   python3, python-is-python3  python (the official image's name for it)
#   python3-venv, python3-pip   python -m venv, pip
#   ca-certificates             Debian's CA bundle (/etc/ssl/certs/ca-certificates.crt)
#   containernetworking-plugins the standard CNI plugins claims of type cni run
BASE_PACKAGES=(python3 python-is-python3 python3-venv python3-pip ca-certificates
    containernetworking-plugins)
# Documentation and manual pages stay out of the base, as in Debian's slim images.
BASE_DPKG_OPTS=(path-exclude=/usr/share/man/* path-exclude=/usr/share/doc/*
    path-include=/usr/share/doc/*/copyright path-exclude=/usr/share/locale/*)
# What the Dockerfile copies (its COPY lines), less what .dockerignore drops.
CONTEXT_FILES=(Dockerfile pyproject.toml README.md dradriver handlers)
CONTEXT_EXCLUDES=(__pycache__ '*.py[co]' '*.egg-info')

FORCE=0
FORCE_BASE=0
ONLY_PACKAGES=0
for arg in "$@"; do
    case "$arg" in
        --archive)
            if [[ ! -e "$LINK" ]]; then
                echo "build-image: no image archive yet: run make image" >&2
                exit 1
            fi
            echo "$CACHE/$(readlink "$LINK")"
            exit 0
            ;;
        --force) FORCE=1 ;;
        --force-base) FORCE=1; FORCE_BASE=1 ;;
        --packages) ONLY_PACKAGES=1 ;;
        -h|--help) sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-image: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

say() { echo "build-image: $*"; }
die() { echo "build-image: $*" >&2; exit 1; }

# Debian packages: buildah builds; mmdebstrap makes the base (not needed with PYTHON_IMAGE).
PACKAGES=(buildah)
[[ -z "${PYTHON_IMAGE:-}" ]] && PACKAGES+=(mmdebstrap debian-archive-keyring)
# shellcheck source=hack/lib/debian-packages.sh
source "$ROOT/hack/lib/debian-packages.sh"
ensure_debian_packages build-image IMAGE_APT_INSTALL "${PACKAGES[@]}"
[[ "$ONLY_PACKAGES" == 1 ]] && exit 0
[[ "$(id -u)" == 0 ]] || die "needs root (buildah's chroot isolation and vfs storage; mmdebstrap)"
if [[ -n "$BUILD_CA" && ! -r "$BUILD_CA" ]]; then
    die "IMAGE_BUILD_CA=$BUILD_CA is not a readable file (set it empty to use the base's own CA bundle)"
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock -w "$LOCK_TIMEOUT" 9 || die "another build holds $CACHE/.lock for over ${LOCK_TIMEOUT}s"

# buildah keeps everything under .cache/image: removing .cache removes it all.
BUILDAH=(buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver vfs)
export BUILDAH_ISOLATION=chroot

# Temporary files and containers, removed on any exit; a failure leaves no archive.
TMP="$(mktemp -d "$CACHE/.tmp.XXXXXX")"
CONTAINER=""
BUILT=""
cleanup() {
    if [[ -n "$CONTAINER" ]]; then "${BUILDAH[@]}" rm "$CONTAINER" >/dev/null 2>&1 || true; fi
    if [[ -n "$BUILT" ]]; then "${BUILDAH[@]}" rmi "$BUILT" >/dev/null 2>&1 || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# step NAME COMMAND...: run a step bounded by IMAGE_STEP_TIMEOUT, its output in
# .cache/image/NAME.log; on failure say which step, why, and show the log's end.
step() {
    local name="$1" status=0
    shift
    timeout --foreground "$STEP_TIMEOUT" "$@" >"$CACHE/$name.log" 2>&1 || status=$?
    [[ "$status" == 0 ]] && return 0
    if [[ "$status" == 124 ]]; then
        echo "build-image: [$name] took over ${STEP_TIMEOUT}s (IMAGE_STEP_TIMEOUT) and was stopped" >&2
    else
        echo "build-image: [$name] failed (exit $status); its last lines:" >&2
        tail -n 25 "$CACHE/$name.log" | sed 's/^/    /' >&2
        if grep -q CERTIFICATE_VERIFY_FAILED "$CACHE/$name.log"; then
            echo "build-image: pip could not verify the package index's certificate: set" \
                "IMAGE_BUILD_CA to a CA bundle that holds its CA (now: '${BUILD_CA}')" >&2
        fi
    fi
    echo "build-image: the whole output is in $CACHE/$name.log; no archive was written" >&2
    exit 1
}

# The base's key: what it is made of, not when (a rebuild a day later reuses it).
if [[ -n "${PYTHON_IMAGE:-}" ]]; then
    BASE="$PYTHON_IMAGE"
else
    BASE_KEY="$(
        {
            echo "$SUITE"
            printf '%s\n' "${BASE_PACKAGES[@]}" "${BASE_DPKG_OPTS[@]}"
            dpkg-query -W -f='${Version}\n' mmdebstrap
        } | sha256sum | cut -c1-16
    )"
    BASE="localhost/dra-driver-base:$SUITE-$BASE_KEY"
fi

make_base() {
    local t0=$SECONDS opts=() o
    for o in "${BASE_DPKG_OPTS[@]}"; do opts+=(--dpkgopt="$o"); done
    say "making the base $BASE from Debian $SUITE ($MIRROR): ${BASE_PACKAGES[*]}"
    CONTAINER="$("${BUILDAH[@]}" from scratch)"
    local mnt
    mnt="$("${BUILDAH[@]}" mount "$CONTAINER")"
    # mmdebstrap's own temporary directory under $TMP too: removed whatever happens.
    TMPDIR="$TMP" step base mmdebstrap --quiet --variant=minbase \
        --include="$(IFS=,; echo "${BASE_PACKAGES[*]}")" "${opts[@]}" "$SUITE" "$TMP/base.tar" "$MIRROR"
    tar -x --numeric-owner -f "$TMP/base.tar" -C "$mnt"
    rm -f "$TMP/base.tar"
    local python
    python="$(chroot "$mnt" python3 --version)" || die "the base $BASE has no working python3"
    "${BUILDAH[@]}" umount "$CONTAINER" >/dev/null
    # The official python images' configuration: the Dockerfile's PATH extends this one.
    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 --cmd python3 "$CONTAINER"
    "${BUILDAH[@]}" commit --quiet --rm "$CONTAINER" "$BASE" >/dev/null
    CONTAINER=""
    say "[base] $python, done in $((SECONDS - t0))s"
}

base_present() { "${BUILDAH[@]}" inspect --type image "$BASE" >/dev/null 2>&1; }

# The build context: exactly the files the Dockerfile copies, staged so that the key
# hashes what the build reads (an editor's backup in dradriver/ is copied and hashed too).
CONTEXT="$TMP/context"
mkdir -p "$CONTEXT"
excludes=()
for e in "${CONTEXT_EXCLUDES[@]}"; do excludes+=(--exclude="$e"); done
present=()
for f in "${CONTEXT_FILES[@]}"; do [[ -e "$ROOT/$f" ]] && present+=("$f"); done
tar -c -C "$ROOT" "${excludes[@]}" "${present[@]}" | tar -x -C "$CONTEXT"
KEY="$(
    {
        echo "$IMAGE $BASE ${BUILD_CA:+ca}"
        (cd "$CONTEXT" && find . -type f -printf '%p %m\n' | LC_ALL=C sort)
        (cd "$CONTEXT" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
        sha256sum < "${BASH_SOURCE[0]}"
        dpkg-query -W -f='${Version}\n' buildah
    } | sha256sum | cut -c1-16
)"
ARCHIVE="$CACHE/dra-driver-$KEY.tar"
# The image's full name, as docker and containerd spell it.
case "$IMAGE" in
    localhost/*|*.*/*|*:*/*) NAME="$IMAGE" ;;
    */*) NAME="docker.io/$IMAGE" ;;
    *) NAME="docker.io/library/$IMAGE" ;;
esac

publish() {
    ln -sfn "$(basename "$ARCHIVE")" "$LINK"
    printf '{"archive": "%s", "image": "%s", "key": "%s", "base": "%s"}\n' \
        "$ARCHIVE" "$NAME" "$KEY" "$BASE" > "$MANIFEST.tmp"
    mv -f "$MANIFEST.tmp" "$MANIFEST"
}

size_mb() { echo "$(( ($(stat -c %s "$1") + 524287) / 1048576 )) MB"; }

if [[ "$FORCE" == 0 && -f "$ARCHIVE" ]]; then
    publish
    say "$NAME is up to date: $ARCHIVE ($(size_mb "$ARCHIVE"))"
    exit 0
fi

START=$SECONDS
if [[ -z "${PYTHON_IMAGE:-}" ]]; then
    if [[ "$FORCE_BASE" == 1 ]] && base_present; then "${BUILDAH[@]}" rmi "$BASE" >/dev/null; fi
    if base_present; then
        say "[base] $BASE is up to date"
    else
        make_base
    fi
fi

t0=$SECONDS
say "building $NAME from $BASE (key $KEY)"
# Built under its final name only (a docker-archive lists every name the image has), and
# removed from the storage once exported: the storage keeps only the base.
BUILT="$NAME"
# The base made here is never pulled; PYTHON_IMAGE is, when the storage lacks it.
pull=never
[[ -n "${PYTHON_IMAGE:-}" ]] && pull=false
bud=(bud --force-rm --layers=false "--pull=$pull" --build-arg "PYTHON_IMAGE=$BASE"
    -f "$CONTEXT/Dockerfile" -t "$BUILT")
[[ -n "$BUILD_CA" ]] && bud+=(-v "$BUILD_CA:/etc/ssl/certs/ca-certificates.crt:ro")
step build "${BUILDAH[@]}" "${bud[@]}" "$CONTEXT"
say "[build] done in $((SECONDS - t0))s"

t0=$SECONDS
PARTIAL="$TMP/image.tar"
step export "${BUILDAH[@]}" push --quiet "$BUILT" "docker-archive:$PARTIAL:$NAME"
"${BUILDAH[@]}" rmi "$BUILT" >/dev/null
BUILT=""
mv -f "$PARTIAL" "$ARCHIVE"
publish
say "[export] done in $((SECONDS - t0))s"

# Only the current archive stays (each is a few hundred MB); and only the current base.
for old in "$CACHE"/dra-driver-*.tar; do
    [[ "$old" == "$ARCHIVE" ]] || rm -f "$old"
done
if [[ -z "${PYTHON_IMAGE:-}" ]]; then
    "${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}}' | while read -r img; do
        if [[ "$img" == localhost/dra-driver-base:* && "$img" != "$BASE" ]]; then
            "${BUILDAH[@]}" rmi "$img" >/dev/null || true
        fi
    done
fi

say "$NAME: $ARCHIVE ($(size_mb "$ARCHIVE")), built in $((SECONDS - START))s"
