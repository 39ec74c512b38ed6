"""`python -m dradriver` and the `dra-driver` console script: the CLI, with the garbage
collector off while the driver imports and wires itself. Start-up makes tens of
thousands of objects that live as long as the process, and the collections they set off
would walk them again and again; the daemon freezes them and turns the collector on once
it serves the kubelet (daemon.serve_kubelet), the other subcommands as they begin."""

import gc


def main() -> int:
    """Run the CLI with the collector off until the command turns it on."""
    gc.disable()
    from dradriver.cli import main as cli_main  # noqa: PLC0415 - imported with it off

    return cli_main()


if __name__ == "__main__":
    raise SystemExit(main())
