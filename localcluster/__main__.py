"""`python -m localcluster demo up|down [--workdir DIR]`: see demo.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __doc__ as package_doc
from . import demo


def parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per tool (so far: demo)."""
    top = argparse.ArgumentParser(
        prog="python -m localcluster",
        description=package_doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tools = top.add_subparsers(dest="tool", required=True, metavar="TOOL")
    d = tools.add_parser(
        "demo",
        help="a real node here with the driver and deploy/'s examples (make demo)",
        description=demo.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument("command", choices=("up", "down"))
    d.add_argument("--workdir", type=Path, default=demo.DEFAULT_WORKDIR)
    d.add_argument("--nodes", type=int, default=2, help="nodes of the cluster (default 2)")
    return top


def main(argv: list[str] | None = None) -> int:
    """Run the tool the command line names; its exit status."""
    args = parser().parse_args(argv)
    return demo.main(args.command, args.workdir, args.nodes)


if __name__ == "__main__":
    sys.exit(main())
