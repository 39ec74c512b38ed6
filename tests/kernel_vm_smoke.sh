#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted snippets are run by bash -c
# Smoke test of the kernel-VM tier (hack/vm/): boots the Debian kernel once and
# checks inside it that dummy, ipvlan, soft-RoCE (rdma_rxe), network
# namespaces, the project venv and pytest (with a junit report written to the
# shared results directory) all work; then checks the report on the host.
#
#   bash tests/kernel_vm_smoke.sh            # on the host (runs setup too)
#   bash tests/kernel_vm_smoke.sh --in-vm    # the part that runs in the guest
#
# Ends with a 'N passed, N failed' line; exits non-zero on any failure.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

if [ "${1:-}" != "--in-vm" ]; then
    results="${DRA_VM_CACHE:-$REPO/.cache/vm}/results/smoke"
    rm -rf "$results"
    mkdir -p "$results"
    python3 hack/vm/run.py --timeout "${SMOKE_TIMEOUT:-900}" --results-dir "$results" \
        -- bash tests/kernel_vm_smoke.sh --in-vm
    rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "kernel-vm smoke: run.py exited $rc" >&2
        exit "$rc"
    fi
    # The junit report was written inside the guest; it must be here now.
    if ! grep -q 'tests="2"' "$results/junit.xml" 2>/dev/null \
        || ! grep -q 'failures="0"' "$results/junit.xml"; then
        echo "kernel-vm smoke: $results/junit.xml missing or wrong on the host" >&2
        echo "0 passed, 1 failed"
        exit 1
    fi
    echo "kernel-vm smoke: junit report readable on the host: $results/junit.xml"
    exit 0
fi

# ---------------------------------------------------------------- in the guest
[ "${DRA_KERNEL_VM:-}" = "1" ] || { echo "--in-vm outside the VM" >&2; exit 2; }
passed=0
failed=0
check() {
    local name="$1"
    shift
    local out
    if out=$("$@" 2>&1); then
        passed=$((passed + 1))
        echo "ok   $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name"
        printf '%s\n' "$out" | sed 's/^/     /'
    fi
}

check "uname is the Debian kernel" bash -c 'uname -r | grep -q -- "-amd64$"'
check "dummy link" bash -c 'modprobe dummy && ip link add d0 type dummy && ip link del d0'
check "ipvlan link on a veth" bash -c '
    modprobe ipvlan && ip link add p0 type veth peer name p1 &&
    ip link add iv0 link p0 type ipvlan mode l2 && ip link del iv0'
check "macvlan link on a veth" bash -c 'ip link add mv0 link p0 type macvlan mode bridge && ip link del mv0'
check "rdma_rxe on p0 gives rxe0 + uverbs0" bash -c '
    modprobe rdma_rxe && rdma link add rxe0 type rxe netdev p0 &&
    test -c /dev/infiniband/uverbs0 &&
    test "$(cat /sys/class/infiniband/rxe0/parent)" = p0 &&
    test "$(cat /sys/class/infiniband_verbs/uverbs0/ibdev)" = rxe0 &&
    test "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0)" = p0'
check "rxe0 port ACTIVE once p0 and p1 are up" bash -c '
    ip link set p0 up && ip link set p1 up &&
    for _ in $(seq 50); do
        grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state && exit 0; sleep 0.1
    done; cat /sys/class/infiniband/rxe0/ports/1/state; exit 1'
check "rdma link delete" bash -c 'rdma link delete rxe0 && ! test -e /sys/class/infiniband/rxe0'
check "network namespaces" bash -c 'ip netns add smoke && ip -n smoke link show lo >/dev/null && ip netns del smoke'
check "writable repo overlay, /tmp, /run" bash -c '
    touch .vm-smoke-write && rm .vm-smoke-write && touch /tmp/x /run/x /var/run/y'
check "project venv imports pyroute2 + pytest" .venv/bin/python -c 'import pyroute2, pytest'

# pytest, with a junit report in the shared results directory
tdir=$(mktemp -d)
cat >"$tdir/test_vm_smoke.py" <<'EOF'
import os
import pathlib


def test_in_vm():
    assert os.environ["DRA_KERNEL_VM"] == "1"


def test_dummy_kind_available():
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        ipr.link("add", ifname="pyd0", kind="dummy")
        try:
            assert ipr.link_lookup(ifname="pyd0")
        finally:
            ipr.link("del", ifname="pyd0")
    assert pathlib.Path("/sys/module/dummy").exists()
EOF
check "pytest in the VM writes junit to \$DRA_VM_RESULTS_DIR" \
    .venv/bin/python -m pytest -q -p no:cacheprovider --rootdir "$tdir" "$tdir" \
    --junitxml "$DRA_VM_RESULTS_DIR/junit.xml"
check "junit.xml present in the guest" test -s "$DRA_VM_RESULTS_DIR/junit.xml"
ip link del p0 2>/dev/null || true

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
