"""combo plugin: RoCE (an RDMA device with its own Ethernet netdev)."""
