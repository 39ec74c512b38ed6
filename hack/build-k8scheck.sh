#!/usr/bin/env bash
# Build tests/deploy/k8scheck (Kubernetes' CEL and admission code, for the deploy tests;
# see tests/deploy/test_k8s_real.py) into .cache/deploy-tests/k8scheck. `make test` runs
# it before pytest: built cold, beside other builds on 2 cores, it takes longer than one
# test's timeout. Up to date, it returns in seconds (the deploy tests' fixture runs it
# again). Go's caches default to .cache/go/ (GOCACHE, GOMODCACHE override them).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# What it prints when it builds nothing begins "build-k8scheck: not built" (the deploy
# tests skip with it).
if [ -n "${DRA_SKIP_K8S_LIBS:-}" ]; then
    echo "build-k8scheck: not built: DRA_SKIP_K8S_LIBS is set"
    exit 0
fi
GO="$(command -v go || echo /usr/local/go/bin/go)"
if [ ! -x "$GO" ]; then
    echo "build-k8scheck: not built: no Go toolchain (the deploy tests that need it skip)"
    exit 0
fi
cd "$ROOT/tests/deploy/k8scheck"
GOTOOLCHAIN=local GOFLAGS="-mod=readonly -modcacherw" \
    GOCACHE="${GOCACHE:-$ROOT/.cache/go/build}" GOMODCACHE="${GOMODCACHE:-$ROOT/.cache/go/mod}" \
    "$GO" build -o "$ROOT/.cache/deploy-tests/k8scheck" .
