"""dra-driver: a Kubernetes DRA driver for network interfaces and RDMA devices.

The folders are the layers (docs/architecture.md): base, kernel, contract, kit, state,
admission, apiserver, claims, nrimode, nri, kubelet; the CLI, the daemon's wiring and the
settings sit here at the top.
"""

from dradriver import _compat

_compat.install()
