"""A CNI plugin stand-in for tests without root: it speaks the CNI exec protocol as the
real plugins do (VERSION, ADD with prevResult, DEL that succeeds when nothing is left,
CHECK, errors as JSON objects with a non-zero exit) and keeps what it "made" as a file
per (network, container, interface, plugin) in the directory its config names
(`stateDir`), the way host-local keeps its leases. An ADD of what is there already fails
(as a real plugin's does when the interface exists); `"fail": "ADD"` in its config
makes that command fail, `"sleep": s` makes ADD take that long first."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = """
import json, os, pathlib, sys, time
cmd = os.environ["CNI_COMMAND"]
conf = json.load(sys.stdin)
me = pathlib.Path(sys.argv[0]).name
version = conf.get("cniVersion", "1.0.0")
def fail(code, msg):
    print(json.dumps({"cniVersion": version, "code": code, "msg": msg, "details": me}))
    sys.exit(1)
if cmd == "VERSION":
    print(json.dumps({"cniVersion": version, "supportedVersions": ["0.4.0", "1.0.0"]}))
    sys.exit(0)
if conf.get("fail") == cmd:
    fail(11, "injected failure")
ifname, container = os.environ["CNI_IFNAME"], os.environ["CNI_CONTAINERID"]
made = pathlib.Path(conf["stateDir"]) / f"{conf['name']}-{container}-{ifname}-{me}"
if cmd == "ADD":
    time.sleep(conf.get("sleep", 0))
    if not os.environ.get("CNI_NETNS"):
        fail(4, "CNI_NETNS is required")
    if made.exists():  # as macvlan's: the interface is in the namespace already
        fail(11, f"container veth name provided ({ifname}) already exists")
    made.write_text(os.environ["CNI_NETNS"])
    result = conf.get("prevResult") or {
        "cniVersion": version,
        "interfaces": [
            {"name": ifname, "mac": "02:00:00:aa:bb:01", "sandbox": os.environ["CNI_NETNS"]}
        ],
        "ips": [{"address": conf.get("address", "10.99.0.5/24"), "interface": 0}],
    }
    print(json.dumps(result))
elif cmd == "DEL":
    made.unlink(missing_ok=True)
elif cmd == "CHECK":
    if not made.exists():
        fail(999, f"{ifname} is not there")
"""


def install(bin_dir: Path, *names: str) -> None:
    """Plugins `names` in `bin_dir`, each an executable running this stand-in."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{SCRIPT}")
        path.chmod(0o755)


def made(state_dir: Path) -> list[str]:
    """What the plugins hold now (file names: network-container-ifname-plugin)."""
    return sorted(p.name for p in state_dir.iterdir())
