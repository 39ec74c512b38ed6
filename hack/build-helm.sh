#!/usr/bin/env bash
# Build helm from the Go module pinned in hack/helm/go.mod into
# .cache/helm/<version>/bin/helm (for the chart's tests and `make helm-*`).
#
#   hack/build-helm.sh              build if needed (idempotent; a no-op when
#                                   the binary for this version exists)
#   hack/build-helm.sh --bin        print the path of the helm binary and exit
#   hack/build-helm.sh --force      rebuild even if up to date
#
# Environment:
#   GOCACHE / GOMODCACHE  Go's own defaults (~/.cache/go-build, ~/go/pkg/mod)
#       unless set, as in hack/build-k8s.sh: they outlive a fresh clone on the
#       same machine. Nothing here is required to be cached.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD_DIR="$ROOT/hack/helm"

HELM_VERSION="$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' "$MOD_DIR/go.mod")"
if [[ -z "$HELM_VERSION" ]]; then
    echo "build-helm: cannot find helm.sh/helm/v4 in $MOD_DIR/go.mod" >&2
    exit 1
fi
OUT_DIR="$ROOT/.cache/helm/$HELM_VERSION/bin"
HELM="$OUT_DIR/helm"

FORCE=0
for arg in "$@"; do
    case "$arg" in
        --bin) echo "$HELM"; exit 0 ;;
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-helm: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

if command -v go >/dev/null 2>&1; then
    GO="$(command -v go)"
elif [[ -x /usr/local/go/bin/go ]]; then
    GO=/usr/local/go/bin/go
else
    echo "build-helm: no Go toolchain found (PATH or /usr/local/go/bin)" >&2
    exit 1
fi

export GOCACHE="${GOCACHE:-$("$GO" env GOCACHE)}"
export GOMODCACHE="${GOMODCACHE:-$("$GO" env GOMODCACHE)}"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="-modcacherw -mod=readonly -buildvcs=false"

# The stamp keys a build by everything that changes its output.
STAMP_KEY="$(
    {
        echo "$HELM_VERSION"
        "$GO" env GOVERSION
        cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" "${BASH_SOURCE[0]}"
    } | sha256sum | cut -c1-16
)"
STAMP="$OUT_DIR/.stamp"

if [[ "$FORCE" == 0 && -x "$HELM" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_KEY" ]]; then
    echo "build-helm: helm $HELM_VERSION is up to date in $OUT_DIR"
    exit 0
fi

START=$SECONDS
echo "build-helm: building helm $HELM_VERSION with $("$GO" env GOVERSION) on $(nproc) cores into $OUT_DIR"
mkdir -p "$OUT_DIR"
rm -f "$STAMP"
cd "$MOD_DIR"

t0=$SECONDS
"$GO" mod download
echo "build-helm: [modules] done in $((SECONDS - t0))s"

# As helm's own Makefile does for a tagged release: version set, metadata empty.
LDFLAGS="-s -w \
 -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION \
 -X helm.sh/helm/v4/internal/version.metadata= \
 -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

TMP_OUT="$(mktemp "$OUT_DIR/.helm.XXXXXX")"
BUILD_PID=""
cleanup() {
    if [[ -n "$BUILD_PID" ]]; then kill "$BUILD_PID" 2>/dev/null || true; fi
    rm -f "$TMP_OUT"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t0=$SECONDS
"$GO" build -trimpath -ldflags="$LDFLAGS" -o "$TMP_OUT" helm.sh/helm/v4/cmd/helm &
BUILD_PID=$!
tick=0
while kill -0 "$BUILD_PID" 2>/dev/null; do
    sleep 1
    tick=$((tick + 1))
    if ((tick % 60 == 0)); then echo "build-helm: ... still compiling ($((SECONDS - t0))s)"; fi
done
status=0
wait "$BUILD_PID" || status=$?
BUILD_PID=""
if [[ "$status" != 0 ]]; then
    echo "build-helm: go build failed (exit $status)" >&2
    exit "$status"
fi
echo "build-helm: [helm] done in $((SECONDS - t0))s"

mv -f "$TMP_OUT" "$HELM"
echo "$STAMP_KEY" > "$STAMP"
echo "build-helm: $("$HELM" version --short) in $HELM ($(ls -sh --block-size=M "$HELM" | cut -d' ' -f1)), built in $((SECONDS - START))s total"
