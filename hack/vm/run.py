#!/usr/bin/env python3
"""Run one command inside a full Debian kernel booted under qemu (virtme-ng).

Usage:
    python hack/vm/run.py [options] -- <command...>

The machine's own kernel lacks dummy, ipvlan and RDMA; this boots the Debian
kernel cached by hack/vm/setup.sh ONCE, with the host's root filesystem shared
read-only, and runs the command as root with the repository as the working
directory. The command's stdout/stderr are streamed; run.py exits with the
command's exit code. Any failure of the tier itself (setup, boot, timeout)
exits non-zero (never 0) with a message naming the step:

    3    setup failed (hack/vm/setup.sh)
    4    the VM did not boot / the command never started ("boot timeout ...")
    5    the VM died before the command reported its exit code
    124  the command exceeded --timeout
    130/143  interrupted (SIGINT/SIGTERM)

Inside the guest:
  * the repository is an overlay: writes (__pycache__, .pytest_cache, ...)
    work and are discarded; /root, /tmp, /etc, /var, /usr are overlays too and
    /run is a tmpfs (so `ip netns add` works). Nothing reaches the host except
  * the results directory (--results-dir, default <repo>/.cache/vm/results),
    which is shared read-write at the same path; $DRA_VM_RESULTS_DIR names it,
    e.g. `pytest --junitxml "$DRA_VM_RESULTS_DIR/junit.xml"`.
  * $DRA_KERNEL_VM=1 is set, plus PATH from the host and any --env.

KVM: /dev/kvm is probed with a short boot running an echo (--kvm-probe-timeout,
a hang counts as "no KVM"); the answer is cached per host boot in
<repo>/.cache/vm/kvm-probe.json. Without KVM, qemu's TCG emulation is used.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("DRA_VM_CACHE") or REPO / ".cache" / "vm").resolve()
HACK_VM = Path(__file__).resolve().parent
UDEV_RULES = HACK_VM / "udev-rules.d"

EXIT_SETUP = 3
EXIT_BOOT = 4
EXIT_VM_DIED = 5
EXIT_TIMEOUT = 124

PROBE_MARKER = "dra-vm-kvm-probe-ok"


def log(msg: str) -> None:
    print(f"vm run: {msg}", file=sys.stderr, flush=True)


class StepFailed(Exception):
    def __init__(self, step: str, detail: str, code: int) -> None:
        super().__init__(f"step '{step}' failed: {detail}")
        self.step = step
        self.detail = detail
        self.code = code


@dataclass(frozen=True)
class KernelEnv:
    kver: str
    kimg: Path
    vng: Path
    virtiofsd: Path | None


@dataclass
class Timings:
    setup: float = 0.0
    probe: float = 0.0
    boot: float | None = None
    command: float | None = None


def read_kernel_env() -> KernelEnv:
    path = CACHE / "kernel.env"
    values: dict[str, str] = {}
    try:
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip()
    except OSError as exc:
        raise StepFailed("read kernel.env", f"{path}: {exc}", EXIT_SETUP) from exc
    try:
        env = KernelEnv(
            kver=values["KVER"],
            kimg=Path(values["KIMG"]),
            vng=Path(values["VNG"]),
            virtiofsd=Path(values["VIRTIOFSD"]) if values.get("VIRTIOFSD") else None,
        )
    except KeyError as exc:
        raise StepFailed("read kernel.env", f"{path} lacks {exc}", EXIT_SETUP) from exc
    for p in (env.kimg, env.vng):
        if not p.exists():
            raise StepFailed(
                "read kernel.env", f"{p} is missing: rerun hack/vm/setup.sh", EXIT_SETUP
            )
    return env


def run_setup() -> None:
    script = HACK_VM / "setup.sh"
    rc = subprocess.call(["bash", str(script)], stdin=subprocess.DEVNULL, stdout=sys.stderr)
    if rc != 0:
        raise StepFailed("setup", f"{script} exited {rc} (see its message above)", EXIT_SETUP)


def tool_env(kenv: KernelEnv, tmpdir: Path) -> dict[str, str]:
    """Environment for vng: its venv and our virtiofsd first on PATH; its
    temporary files (virtiofsd sockets, pid files) in a directory of this run,
    removed by us even when vng is killed before its own cleanup."""
    env = dict(os.environ)
    env["TMPDIR"] = str(tmpdir)
    path = [str(kenv.vng.parent)]
    if kenv.virtiofsd is not None:
        path.append(str(kenv.virtiofsd.parent))
    env["PATH"] = os.pathsep.join([*path, env.get("PATH", "/usr/bin:/bin")])
    return env


# virtme-ng's guest init mounts a tmpfs over these after it has overlaid the repository,
# so a repository below one of them (a CI clone in /var/tmp, say) would vanish.
GUEST_TMPFS = ("/var/tmp", "/var/log", "/var/cache", "/var/lib/apt", "/var/lib/private")


def repo_share_args() -> list[str]:
    """How the repository reaches the guest, at the same path (the venv refers to it)."""
    if any(Path(d) == REPO or Path(d) in REPO.parents for d in GUEST_TMPFS):
        # --rwdir is mounted after those tmpfs mounts. It is the host directory itself,
        # so the results directory inside it stays shared; callers keep the guest from
        # writing elsewhere in it (PYTHONDONTWRITEBYTECODE, pytest -p no:cacheprovider).
        return [f"--rwdir={REPO}"]
    return ["--overlay-rwdir", str(REPO)]  # writable, writes discarded at power-off


def vng_base_args(
    kenv: KernelEnv, args: argparse.Namespace, kvm: bool, nics: bool = True
) -> list[str]:
    cmd = [
        str(kenv.vng),
        "--run",
        str(kenv.kimg),
        "--disable-microvm",
        "--memory",
        args.memory,
        "--cpus",
        str(args.cpus),
        # Only the udev rule that names the virtio-serial ports; see the file.
        f"--rodir=/usr/lib/udev/rules.d={UDEV_RULES}",
        *repo_share_args(),
        "--overlay-rwdir",
        "/root",
        "--cwd",
        str(REPO),
    ]
    if args.nics and nics:
        cmd.append("--qemu-opts=" + " ".join(nic_options(args.nics)))  # "=": it starts with -
    if kenv.virtiofsd is None:
        cmd.append("--force-9p")
    if not kvm:
        cmd.append("--disable-kvm")
    if args.verbose:
        cmd.append("--verbose")
    return cmd


NIC_MODELS = ("igb", "e1000e")  # SR-IOV capable (82576, 7 VFs) and a plain PCIe NIC


def nic_options(models: str) -> list[str]:
    """qemu options adding one emulated PCI NIC per model in `models` (comma-separated),
    each behind a PCIe root port of its own and on a qemu hub port of its own (carrier
    up, no DHCP: a user-mode network's would give the node a default route through
    it), without an option ROM (nothing boots from them)."""
    out: list[str] = []
    for i, model in enumerate(m for m in models.split(",") if m):
        if model not in NIC_MODELS:
            raise StepFailed("setup", f"--nics: {model!r} is not one of {', '.join(NIC_MODELS)}", 2)
        # A PCIe root port each: an igb's VFs take fixed device numbers after its PF's,
        # so two igbs on one bus would claim the same slots for their VFs.
        out += [
            f"-device pcie-root-port,id=draport{i},chassis={40 + i},slot={40 + i}",
            f"-netdev hubport,id=dranic{i},hubid={i}",
            f"-device {model},bus=draport{i},netdev=dranic{i},romfile=",
        ]
    return out


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the live processes in process group pgid."""
    out: list[tuple[int, str]] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            out.append((int(entry.name), comm))
    return out


def kill_group(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Terminate vng and everything it started (qemu, virtiofsd).

    qemu and vng go first: killing virtiofsd under a running qemu makes qemu
    print a screenful of vhost-user errors. Whatever is left is SIGKILLed."""
    if proc.poll() is None:
        # virtme-run kills its virtiofsd when it gets SIGTERM: qemu goes first.
        for first in (True, False):
            targets = [
                pid
                for pid, comm in group_members(proc.pid)
                if comm.startswith("qemu-system") == first and comm != "virtiofsd"
            ]
            for pid in targets:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(
                pid in targets for pid, _ in group_members(proc.pid)
            ):
                time.sleep(0.05)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)


def pump(src: IO[bytes], dst: IO[bytes]) -> None:
    """Copy a child's output as it comes. qemu reopens /proc/self/fd/1 and 2
    with O_TRUNC, which would clobber a file our caller redirected us to, so
    vng never gets our own stdout/stderr: only pipes, copied here."""
    fd = src.fileno()
    broken = False
    while chunk := os.read(fd, 65536):
        if broken:
            continue  # keep draining so the guest never blocks on a full pipe
        try:
            dst.write(chunk)
            dst.flush()
        except (BrokenPipeError, ValueError):
            broken = True


def host_boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def probe_kvm(kenv: KernelEnv, args: argparse.Namespace) -> tuple[bool, str]:
    """Can a KVM guest boot here? A quick `true` boot; a hang means no."""
    if args.kvm == "no":
        return False, "disabled by --kvm no"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is absent or not accessible"
    qemu = shutil.which("qemu-system-x86_64") or ""
    key = {
        "boot_id": host_boot_id(),
        "kimg": str(kenv.kimg),
        "qemu_mtime": os.stat(qemu).st_mtime if qemu else 0,
        "timeout": args.kvm_probe_timeout,
    }
    cache_file = CACHE / "kvm-probe.json"
    if args.kvm == "auto" and not args.reprobe_kvm:
        try:
            cached = json.loads(cache_file.read_text())
            if cached.get("key") == key:
                return bool(cached["kvm"]), f"{cached['detail']} (cached for this host boot)"
        except (OSError, ValueError, KeyError):
            pass
    # Without the NICs: the probe asks about KVM only, and its answer is cached.
    cmd = [*vng_base_args(kenv, args, kvm=True, nics=False), "--exec", f"echo {PROBE_MARKER}"]
    tmpdir = Path(tempfile.mkdtemp(prefix="dra-vm-"))
    rc: int | None
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=tool_env(kenv, tmpdir),
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=args.kvm_probe_timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            kill_group(proc, grace=2.0)
            out, _ = proc.communicate()
            rc = None
        finally:
            kill_group(proc, grace=2.0)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    text = out.decode(errors="replace")
    if rc is None:
        ok, detail = (
            False,
            f"KVM guest did not finish booting within {args.kvm_probe_timeout:g} s (hang)",
        )
    elif rc == 0 and PROBE_MARKER in text:
        ok, detail = True, "KVM guest booted"
    else:
        last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        ok, detail = False, f"KVM guest failed (exit {rc}): {last[0][:200]}"
    with contextlib.suppress(OSError):
        cache_file.write_text(json.dumps({"key": key, "kvm": ok, "detail": detail}))
    return ok, detail


def guest_script(
    run_dir: Path, results_dir: Path, command: list[str], extra_env: dict[str, str]
) -> str:
    env = {
        "DRA_KERNEL_VM": "1",
        "DRA_VM_RESULTS_DIR": str(results_dir),
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": "/root",
        "TMPDIR": "/tmp",
    }
    env.update(extra_env)
    # virtme-ng-init keeps only a few variables; PATH must still reach the
    # system directories where ip, rdma, modprobe live.
    env["PATH"] = env["PATH"] + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    lines = [
        "#!/bin/bash",
        "# generated by hack/vm/run.py; runs inside the guest",
        f"run_dir={shlex.quote(str(run_dir))}",
        'date +%s.%N > "$run_dir/started"',
        *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
        f"cd {shlex.quote(str(REPO))} || exit 126",
        shlex.join(command),
        "rc=$?",
        'echo "$rc" > "$run_dir/exit_code.tmp" && mv "$run_dir/exit_code.tmp" "$run_dir/exit_code"',
        "exit $rc",
        "",
    ]
    return "\n".join(lines)


def parse_env(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            if name not in os.environ:
                continue
            value = os.environ[name]
        out[name] = value
    return out


_interrupted: list[int] = []


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    _interrupted.append(signum)


def run_vm(kenv: KernelEnv, args: argparse.Namespace, kvm: bool, timings: Timings) -> int:
    results_dir = Path(args.results_dir).resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    runs = CACHE / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=runs))
    tmpdir = Path(tempfile.mkdtemp(prefix="dra-vm-"))  # short: holds unix sockets
    try:
        script = run_dir / "guest.sh"
        script.write_text(guest_script(run_dir, results_dir, args.command, parse_env(args.env)))
        cmd = [
            *vng_base_args(kenv, args, kvm),
            "--rwdir",
            str(run_dir),
            "--rwdir",
            str(results_dir),
            "--exec",
            f"bash {shlex.quote(str(script))}",
        ]
        if args.verbose:
            log("+ " + shlex.join(cmd))
        started_file = run_dir / "started"
        exit_file = run_dir / "exit_code"
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=tool_env(kenv, tmpdir),
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        pumps = [
            threading.Thread(target=pump, args=(proc.stdout, sys.stdout.buffer), daemon=True),
            threading.Thread(target=pump, args=(proc.stderr, sys.stderr.buffer), daemon=True),
        ]
        for th in pumps:
            th.start()
        booted_at: float | None = None
        try:
            while True:
                rc = proc.poll()
                now = time.monotonic()
                if booted_at is None and started_file.exists():
                    booted_at = now
                    timings.boot = booted_at - t0
                    mode = "KVM" if kvm else "TCG"
                    log(f"step 'boot' done in {timings.boot:.1f}s ({mode}); command started")
                if rc is not None:
                    break
                if _interrupted:
                    kill_group(proc)
                    sig = _interrupted[0]
                    raise StepFailed("command", f"interrupted by signal {sig}", 128 + sig)
                if booted_at is None and now - t0 > args.boot_timeout:
                    kill_group(proc)
                    raise StepFailed(
                        "boot", f"boot timeout after {args.boot_timeout:g} s", EXIT_BOOT
                    )
                if now - t0 > args.timeout:
                    kill_group(proc)
                    raise StepFailed(
                        "command",
                        f"timeout after {args.timeout:g} s (boot + command)",
                        EXIT_TIMEOUT,
                    )
                time.sleep(0.1)
        finally:
            kill_group(proc)  # leftovers (virtiofsd) if vng exited on its own
            for th in pumps:
                th.join(timeout=5)
        end = time.monotonic()
        if booted_at is None and started_file.exists():
            booted_at = end
            timings.boot = end - t0
        if booted_at is None:
            raise StepFailed(
                "boot", f"the VM exited (vng exit {rc}) before the command started", EXIT_BOOT
            )
        timings.command = end - booted_at
        try:
            code = int(exit_file.read_text().strip())
        except (OSError, ValueError):
            raise StepFailed(
                "command",
                f"the VM exited (vng exit {rc}) without the command's exit code "
                "(guest crash, panic or out of memory?)",
                EXIT_VM_DIED,
            ) from None
        if rc != code:
            log(f"note: vng exited {rc}, the command {code}; using the command's")
        return code
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if not args.keep_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    if "--" not in argv and not {"-h", "--help"} & set(argv):
        print("usage: hack/vm/run.py [options] -- <command...>  (see --help)", file=sys.stderr)
        sys.exit(2)
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(
        prog="hack/vm/run.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--timeout", type=float, default=1800.0, help="limit for boot + command, seconds (1800)"
    )
    p.add_argument(
        "--boot-timeout", type=float, default=180.0, help="limit for the boot, seconds (180)"
    )
    p.add_argument(
        "--results-dir",
        default=str(CACHE / "results"),
        help="host directory shared read-write at the same path ($DRA_VM_RESULTS_DIR)",
    )
    p.add_argument(
        "--kvm", choices=("auto", "yes", "no"), default="auto", help="auto: probe (default)"
    )
    p.add_argument("--kvm-probe-timeout", type=float, default=30.0, help="seconds (30)")
    p.add_argument("--reprobe-kvm", action="store_true", help="ignore the cached probe result")
    p.add_argument("--no-setup", action="store_true", help="skip hack/vm/setup.sh (must have run)")
    p.add_argument(
        "--nics",
        default="",
        help=f"emulated PCI NICs to add, comma-separated models of {', '.join(NIC_MODELS)} "
        "(needs qemu >= 8, which setup.sh installs)",
    )
    p.add_argument("--memory", default="2G", help="guest memory (2G)")
    p.add_argument("--cpus", type=int, default=min(2, os.cpu_count() or 1), help="guest CPUs (2)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="set in the guest; NAME alone copies the host's value (repeatable)",
    )
    p.add_argument(
        "--keep-run-dir", action="store_true", help="keep .cache/vm/runs/<id> (debugging)"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show vng command and boot console")
    args = p.parse_args(argv[:split])
    args.command = argv[split + 1 :]
    if not args.command:
        p.error("no command given after --")
    return args


def main(argv: list[str]) -> int:
    t_start = time.monotonic()
    args = parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    timings = Timings()
    code: int
    try:
        t = time.monotonic()
        try:
            if not args.no_setup:
                run_setup()
        finally:
            timings.setup = time.monotonic() - t
        kenv = read_kernel_env()
        t = time.monotonic()
        if args.kvm == "yes":
            kvm, detail = True, "forced by --kvm yes"
        else:
            kvm, detail = probe_kvm(kenv, args)
        timings.probe = time.monotonic() - t
        log(
            f"step 'kvm probe' done in {timings.probe:.1f}s: {detail}; "
            f"using {'KVM' if kvm else 'TCG (software emulation)'}"
        )
        log(f"step 'boot' {kenv.kver} ...")
        code = run_vm(kenv, args, kvm, timings)
    except StepFailed as exc:
        log(f"step '{exc.step}' failed: {exc.detail}")
        code = exc.code
    total = time.monotonic() - t_start
    parts = [f"setup {timings.setup:.1f}s", f"kvm probe {timings.probe:.1f}s"]
    if timings.boot is not None:
        parts.append(f"boot {timings.boot:.1f}s")
    if timings.command is not None:
        parts.append(f"command {timings.command:.1f}s")
    log(f"total {total:.1f}s ({', '.join(parts)}), exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
