"""Our rtnetlink backend of dradriver.kernel.netlink: no third-party library, no per-request state.

`wire` frames netlink messages, attributes and errors; `links`, `addresses` and `routes`
build the rtnetlink requests and parse the kernel's answers into netlink's Link, Route
and VfSettings (pure, unit-tested from captured kernel replies); `client` is the only
part with effects: one socket per thread, sequence numbers, bounded waits; `events`
subscribes to link events (the publisher wakes on them).
"""
