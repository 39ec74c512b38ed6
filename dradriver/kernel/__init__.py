"""The kernel: the netlink facade and its rtnetlink backend, network namespaces, RDMA
netlink, deferred deletion of released links."""
