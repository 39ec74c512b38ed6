"""The NRI injection mode: pod sandbox events and moving interfaces into and out of sandboxes."""
