"""Built-in handler plugins: netdev (virtual and physical interfaces), rdma, combo (RoCE)."""
