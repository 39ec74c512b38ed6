#!/usr/bin/env bash
# The kernel-VM tier (make test-kernel): boots Debian's full kernel once under qemu and
# runs the handler tests there, where dummy, ipvlan and soft-RoCE exist. Inside the VM a
# missing kernel feature fails the test instead of skipping it (tests/conftest.py).
# Prints the per-kind report and the total time, setup included.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
start=$(date +%s)
python=${PYTHON:-.venv/bin/python}
results=${DRA_VM_CACHE:-.cache/vm}/results/kernel
rm -rf "$results" && mkdir -p "$results"
# Two SR-IOV capable igb NICs and an e1000e: tests/kernel/test_emulated_nics.py.
python3 hack/vm/run.py --timeout "${KERNEL_TIER_TIMEOUT:-1500}" --results-dir "$results" \
    --nics igb,igb,e1000e \
    --env PYTHONDONTWRITEBYTECODE=1 -- \
    "$python" -m pytest tests/kernel -q -rs -p no:cacheprovider --junitxml "$results/junit.xml"
rc=$?
if [ "$rc" -eq 0 ] && ! grep -q 'failures="0"' "$results/junit.xml" 2>/dev/null; then
    echo "kernel-vm tier: no test report came back from the VM" >&2
    rc=1
fi
echo "kernel-vm tier: total $(( $(date +%s) - start ))s (setup, boot and tests), exit $rc"
exit "$rc"
