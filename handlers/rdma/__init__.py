"""rdma plugin: RDMA devices (uverbs)."""
