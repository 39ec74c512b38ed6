"""The `dra-driver` command: run, discover, handlers, validate-config, schema,
admission-policy."""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dradriver import settings as settings_mod
from dradriver.base.errors import DriverError

if TYPE_CHECKING:
    from dradriver.contract.config import ConfigSchema

# Each subcommand imports what it needs: none loads what only another one uses.


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: parse `argv` (the command line when None) and run its subcommand."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command != "run":  # behave like a filter when piped into head & co.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        gc.enable()  # off since __main__ for start-up; `run` turns it on once it serves
    try:
        return int(args.func(args))
    except DriverError as exc:
        print(f"dra-driver: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-driver",
        description="Kubernetes DRA driver for network interfaces and RDMA devices",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the kubelet plugin daemon")
    settings_mod.add_flags(run, run=True)
    run.set_defaults(func=_run)

    discover = sub.add_parser("discover", help="print the ResourceSlices this node would publish")
    settings_mod.add_flags(discover, run=False)
    discover.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    discover.set_defaults(func=_discover)

    handlers = sub.add_parser("handlers", help="list every (type, kind) and its plugin")
    handlers.set_defaults(func=_handlers)

    validate = sub.add_parser("validate-config", help="validate opaque config parameters")
    validate.add_argument("file", help="YAML or JSON file with the parameters object, or -")
    validate.add_argument("--driver-name", default=settings_mod.DEFAULT_DRIVER_NAME)
    _schema_flags(validate)
    validate.set_defaults(func=_validate)

    schema = sub.add_parser("schema", help="print the JSON Schema of the opaque config")
    schema.add_argument("--driver-name", default=settings_mod.DEFAULT_DRIVER_NAME)
    schema.set_defaults(func=_schema)

    policy = sub.add_parser(
        "admission-policy",
        help="print the admission policies that refuse bad opaque configs at apply time",
    )
    policy.add_argument("--driver-name", default=settings_mod.DEFAULT_DRIVER_NAME)
    _schema_flags(policy)
    policy.set_defaults(func=_admission_policy)

    addresses = sub.add_parser(
        "addresses", help="list the pool addresses this node handed out, and to which claims"
    )
    addresses.add_argument(
        "--state-dir",
        default=str(settings_mod.Settings("n").state_dir),
        help="the driver's state directory (default: %(default)s)",
    )
    addresses.set_defaults(func=_addresses)
    return parser


def _schema_flags(parser: argparse.ArgumentParser) -> None:
    """The settings the schema depends on, defaulting as the daemon's flags do (from the
    environment: run in the driver's container, they are the driver's own)."""
    macs, plugins = (
        settings_mod.env_name("macvlan_global_macs"),
        settings_mod.env_name("cni_plugins"),
    )
    parser.add_argument(
        "--macvlan-global-macs",
        default=os.environ.get(macs, ""),
        help="comma-separated globally administered MACs a macvlan claim may set, as the "
        f"driver's flag of that name allows them (env {macs})",
    )
    parser.add_argument(
        "--cni-plugins",
        default=os.environ.get(plugins, settings_mod.DEFAULT_CNI_PLUGINS),
        help="comma-separated CNI plugins a claim's inline network may name, as the "
        f"driver's flag of that name allows them (env {plugins}; default: %(default)s)",
    )


def _config_schema(args: argparse.Namespace) -> ConfigSchema:
    """The config schema for --driver-name, --macvlan-global-macs and --cni-plugins."""
    from dradriver.contract.config import ConfigSchema  # noqa: PLC0415
    from dradriver.contract.registry import HandlerRegistry  # noqa: PLC0415

    entries = settings_mod.split_list(args.macvlan_global_macs)
    plugins = settings_mod.cni_plugins(args.cni_plugins)
    try:
        return ConfigSchema(HandlerRegistry(), args.driver_name, entries, plugins)
    except ValueError as exc:
        raise SystemExit(f"--macvlan-global-macs: {exc}") from None


def _run(args: argparse.Namespace) -> int:
    from dradriver import daemon  # noqa: PLC0415 - keeps the other subcommands light

    daemon.limit_malloc_arenas()  # before any thread starts
    return daemon.run(settings_mod.from_args(args))


def _discover(args: argparse.Namespace) -> int:
    from dradriver.apiserver import slices  # noqa: PLC0415
    from dradriver.apiserver.inventory import Inventory  # noqa: PLC0415
    from dradriver.contract.registry import HandlerRegistry  # noqa: PLC0415
    from dradriver.daemon import context_of  # noqa: PLC0415

    settings = settings_mod.from_args(args)
    inventory = Inventory(HandlerRegistry(), context_of(settings))
    built = slices.build_slices(
        settings.driver_name, settings.node_name, "", inventory.refresh(), generation=1
    )
    for body in built:  # the Node UID is only known to the API server
        del body["metadata"]["ownerReferences"]
    doc = {"apiVersion": "v1", "kind": "List", "items": built}
    if args.output == "json":
        print(json.dumps(doc, indent=2))
    else:
        import yaml  # noqa: PLC0415 - `run` never loads YAML (0.9 MB of its resident memory)

        print(yaml.safe_dump(doc, sort_keys=False), end="")
    return 0


def _addresses(args: argparse.Namespace) -> int:
    from dradriver.state.ipamstore import IpamStore  # noqa: PLC0415

    store = IpamStore(Path(args.state_dir))
    print(f"{'POOL':<12} {'ADDRESS':<40} CLAIM")
    for pool in store.pools():
        state = store.load(pool)
        for address, holder in sorted(state.addresses.items()):
            print(f"{pool:<12} {address:<40} {holder.namespace}/{holder.name} ({holder.claim})")
        if state.blocks:
            print(f"{pool:<12} {'blocks held: ' + ','.join(map(str, sorted(state.blocks))):<40}")
    return 0


def _handlers(args: argparse.Namespace) -> int:
    from dradriver.contract.registry import HandlerRegistry  # noqa: PLC0415

    rows = HandlerRegistry().table()
    width = max((len(t) + len(k) + 1 for t, k, _ in rows), default=10)
    print(f"{'TYPE/KIND':<{width}}  PLUGIN")
    for type_, kind, plugin in rows:
        print(f"{type_ + '/' + kind:<{width}}  {plugin}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    import yaml  # noqa: PLC0415 - see _discover

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        parameters = yaml.safe_load(text)
    except (OSError, UnicodeError) as exc:
        print(f"{args.file}: $: cannot read: {exc}", file=sys.stderr)
        return 1
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())  # one line: every line of stderr names a path
        print(f"{args.file}: $: not YAML or JSON: {reason}", file=sys.stderr)
        return 1
    except (RecursionError, ValueError) as exc:  # nesting or an integer beyond the parser
        print(f"{args.file}: $: cannot be read: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    schema = _config_schema(args)
    try:
        resolved = schema.resolve(parameters, None)
    except DriverError as exc:
        issues = getattr(exc, "issues", [("$", str(exc))])
        for path, message in issues:
            print(f"{args.file}: {path}: {message}", file=sys.stderr)
        return 1
    print(f"{args.file}: valid ({resolved.type}/{resolved.kind})")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from dradriver.contract.config import ConfigSchema  # noqa: PLC0415
    from dradriver.contract.registry import HandlerRegistry  # noqa: PLC0415

    print(ConfigSchema(HandlerRegistry(), args.driver_name).dumps())
    return 0


def _admission_policy(args: argparse.Namespace) -> int:
    from dradriver import admission  # noqa: PLC0415 - only this command needs it

    generated = admission.build(_config_schema(args), args.driver_name)
    for warning in generated.warnings:
        print(f"dra-driver: not checked by the policy: {warning}", file=sys.stderr)
    print(admission.render(generated, admission.header(args.driver_name)), end="")
    return 0
