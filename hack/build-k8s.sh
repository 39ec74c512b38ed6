#!/usr/bin/env bash
# Build the real Kubernetes control plane (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, and kubectl) for the e2e tier, and
# the kubelet for the node tier, from the Go module pinned in hack/k8s/go.mod
# (the default release) or hack/k8s/<version>.mod (K8S_VERSION=<version>, an
# earlier release the tiers also run on), into .cache/k8s/<version>/bin/.
#
#   hack/build-k8s.sh              build if needed (idempotent; a no-op when
#                                  the binaries for this version exist)
#   hack/build-k8s.sh --bin-dir    print the bin directory and exit
#   hack/build-k8s.sh --force      rebuild even if up to date
#
# Environment:
#   K8S_VERSION=v1.36.3  build that release (hack/k8s/v1.36.3.mod); unset or
#       empty: the one hack/k8s/go.mod pins.
#   K8S_BUILD_KUBECTL=0  skip kubectl (on by default: ~25 s more on a cold
#       build; the tests apply objects with Python, kubectl is for people).
#   K8S_BUILD_MODE=sequential|single  sequential (default): one `go build` per
#       component, timed each; single: one `go build` for all (measured: no
#       faster on 2 cores, 394 s against 378 s cold).
#   GOCACHE / GOMODCACHE  Go's own defaults (~/.cache/go-build, ~/go/pkg/mod)
#       unless set: they outlive a fresh clone on the same machine, so a
#       rebuild there takes ~15 s instead of ~6.5 min. For a self-contained
#       build: GOCACHE=$PWD/.cache/go/build GOMODCACHE=$PWD/.cache/go/mod.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD_DIR="$ROOT/hack/k8s"

DEFAULT_VERSION="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$MOD_DIR/go.mod")"
if [[ -z "$DEFAULT_VERSION" ]]; then
    echo "build-k8s: cannot find k8s.io/kubernetes in $MOD_DIR/go.mod" >&2
    exit 1
fi
K8S_VERSION="${K8S_VERSION:-$DEFAULT_VERSION}"
MOD_FILE="$MOD_DIR/go.mod"
if [[ "$K8S_VERSION" != "$DEFAULT_VERSION" ]]; then
    MOD_FILE="$MOD_DIR/$K8S_VERSION.mod"
    if [[ ! "$K8S_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ || ! -f "$MOD_FILE" ]]; then
        echo "build-k8s: K8S_VERSION=$K8S_VERSION: no $MOD_FILE; the releases here:" \
            "$DEFAULT_VERSION (go.mod)" $(cd "$MOD_DIR" && ls v*.mod 2>/dev/null | sed 's/\.mod$//') >&2
        exit 2
    fi
fi
SUM_FILE="${MOD_FILE%.mod}.sum"
OUT_DIR="$ROOT/.cache/k8s/$K8S_VERSION/bin"

FORCE=0
for arg in "$@"; do
    case "$arg" in
        --bin-dir) echo "$OUT_DIR"; exit 0 ;;
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,/^set -euo/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-k8s: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

if command -v go >/dev/null 2>&1; then
    GO="$(command -v go)"
elif [[ -x /usr/local/go/bin/go ]]; then
    GO=/usr/local/go/bin/go
else
    echo "build-k8s: no Go toolchain found (PATH or /usr/local/go/bin)" >&2
    exit 1
fi

export GOCACHE="${GOCACHE:-$("$GO" env GOCACHE)}"
export GOMODCACHE="${GOMODCACHE:-$("$GO" env GOMODCACHE)}"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
# -modcacherw: the module cache stays deletable with a plain rm -rf;
# -buildvcs=false: the binaries do not depend on the state of this git tree.
export GOFLAGS="-modcacherw -mod=readonly -buildvcs=false -modfile=$MOD_FILE"

# name=package; the etcd main lives in the helper module itself.
COMPONENTS=(
    "etcd=./cmd/etcd"
    "kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver"
    "kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
    "kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager"
    # The node tier's kubelet: ~25 s on top of the others (most packages are shared).
    "kubelet=k8s.io/kubernetes/cmd/kubelet"
)
if [[ "${K8S_BUILD_KUBECTL:-1}" != 0 ]]; then
    COMPONENTS+=("kubectl=k8s.io/kubernetes/cmd/kubectl")
fi

# The stamp keys a build by everything that changes its output.
STAMP_KEY="$(
    {
        echo "$K8S_VERSION"
        "$GO" env GOVERSION
        cat "$MOD_FILE" "$SUM_FILE" "$MOD_DIR/cmd/etcd/main.go" "${BASH_SOURCE[0]}"
        printf '%s\n' "${COMPONENTS[@]}"
    } | sha256sum | cut -c1-16
)"
STAMP="$OUT_DIR/.stamp"

up_to_date() {
    [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_KEY" ]] || return 1
    local c
    for c in "${COMPONENTS[@]}"; do
        [[ -x "$OUT_DIR/${c%%=*}" ]] || return 1
    done
}

if [[ "$FORCE" == 0 ]] && up_to_date; then
    echo "build-k8s: Kubernetes $K8S_VERSION is up to date in $OUT_DIR"
    exit 0
fi

START=$SECONDS
now() { echo $((SECONDS - START)); }

echo "build-k8s: building Kubernetes $K8S_VERSION with $("$GO" env GOVERSION) on $(nproc) cores into $OUT_DIR"
echo "build-k8s: GOCACHE=$GOCACHE GOMODCACHE=$GOMODCACHE"

mkdir -p "$OUT_DIR"
rm -f "$STAMP"
cd "$MOD_DIR"

t0=$SECONDS
echo "build-k8s: [modules] downloading ..."
"$GO" mod download
echo "build-k8s: [modules] done in $((SECONDS - t0))s (total $(now)s)"

VPKG=k8s.io/component-base/version
MINOR="${K8S_VERSION#v*.}"; MINOR="${MINOR%%.*}"
MAJOR="${K8S_VERSION#v}"; MAJOR="${MAJOR%%.*}"
LDFLAGS="-s -w \
 -X $VPKG.gitVersion=$K8S_VERSION \
 -X $VPKG.gitMajor=$MAJOR \
 -X $VPKG.gitMinor=$MINOR \
 -X $VPKG.gitTreeState=clean \
 -X $VPKG.buildDate=1970-01-01T00:00:00Z"
BUILD=("$GO" build -trimpath -ldflags="$LDFLAGS")

# go build -o DIR/ names binaries after the package's last path element;
# build into a temporary directory and move each into place atomically.
TMP_OUT="$(mktemp -d "$OUT_DIR/.tmp.XXXXXX")"
BUILD_PID=""
cleanup() {
    if [[ -n "$BUILD_PID" ]]; then kill "$BUILD_PID" 2>/dev/null || true; fi
    rm -rf "$TMP_OUT"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# go_build LABEL ARGS...: run `go build ARGS` in the background, printing a
# heartbeat every 60 s and each binary of COMPONENTS as it lands in TMP_OUT.
go_build() {
    local label="$1" start=$SECONDS tick=0 seen="" c base status=0
    shift
    "${BUILD[@]}" "$@" &
    BUILD_PID=$!
    while kill -0 "$BUILD_PID" 2>/dev/null; do
        sleep 1
        tick=$((tick + 1))
        if [[ "$label" == all ]]; then
            for c in "${COMPONENTS[@]}"; do
                base="${c#*=}"; base="${base##*/}"
                if [[ -e "$TMP_OUT/$base" && " $seen " != *" $base "* ]]; then
                    seen="$seen $base"
                    echo "build-k8s: [${c%%=*}] linked after ~$((SECONDS - start))s"
                fi
            done
        fi
        if ((tick % 60 == 0)); then
            echo "build-k8s: [$label] ... still compiling ($((SECONDS - start))s)"
        fi
    done
    wait "$BUILD_PID" || status=$?
    BUILD_PID=""
    return "$status"
}

MODE="${K8S_BUILD_MODE:-sequential}"
case "$MODE" in
    sequential)
        for c in "${COMPONENTS[@]}"; do
            name="${c%%=*}"; pkg="${c#*=}"
            t0=$SECONDS
            echo "build-k8s: [$name] building $pkg ..."
            go_build "$name" -o "$TMP_OUT/$name" "$pkg"
            echo "build-k8s: [$name] done in $((SECONDS - t0))s (total $(now)s)"
        done
        ;;
    single)
        pkgs=()
        for c in "${COMPONENTS[@]}"; do pkgs+=("${c#*=}"); done
        t0=$SECONDS
        echo "build-k8s: [all] building ${pkgs[*]} in one go build ..."
        go_build all -o "$TMP_OUT/" "${pkgs[@]}"
        for c in "${COMPONENTS[@]}"; do
            pkg="${c#*=}"; base="${pkg##*/}"
            [[ "$base" == "${c%%=*}" ]] || mv "$TMP_OUT/$base" "$TMP_OUT/${c%%=*}"
        done
        echo "build-k8s: [all] done in $((SECONDS - t0))s (total $(now)s)"
        ;;
    *)
        echo "build-k8s: unknown K8S_BUILD_MODE=$MODE (single|sequential)" >&2
        exit 2
        ;;
esac

for c in "${COMPONENTS[@]}"; do
    name="${c%%=*}"
    mv -f "$TMP_OUT/$name" "$OUT_DIR/$name"
done
echo "$STAMP_KEY" > "$STAMP"

echo "build-k8s: $(cd "$OUT_DIR" && ls -sh --block-size=M "${COMPONENTS[@]%%=*}" | tr '\n' ' ')"
echo "build-k8s: Kubernetes $K8S_VERSION built in $(now)s total"
