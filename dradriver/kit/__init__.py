"""The handler kit: what device-family plugins share. Part of the plugin contract.

A handler plugin, built-in or third-party, may import `dradriver.contract.hookspecs` (the
contract), `dradriver.base.errors`, `dradriver.kernel.netlink`, `dradriver.contract.naming`
and these modules, and nothing else of the core; plugin families never import each other.

- `netconfig`: the fields every netdev config has, their schema fragments and checks,
  and configuring a link from them;
- `podsettings`: a claim's routes and sysctls against what the kernel takes in the pod;
- `links`: the links the driver makes: their names and tags, creating, configuring and
  deleting them;
- `hostif`: host interfaces handed whole to a pod (which may be, claiming, giving back);
- `rdma`: RDMA devices in sysfs and the CDI edits that hand one to a container;
- `sysfs`: sysfs readers rooted at `--sysfs-root`.

Undo payloads (what `Prepared.undo` holds) are typed dataclasses with `to_json` and
`from_json`; readers ignore keys they do not know, so a record written by a newer
driver can still be unprepared by an older one.
"""
