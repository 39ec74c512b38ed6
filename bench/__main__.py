"""`python -m bench`: run every figure, write bench/results.json, print a Markdown table.

Timings are measured, never asserted: the table marks each figure against its target.
Run as root (network namespaces). `--quick` shrinks every figure for a smoke run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import (
    churn,
    cniattach,
    fleet,
    latency,
    lifecycle,
    node,
    nodechurn,
    nodelight,
    placement,
    publishing,
    rtnl,
)

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "dradriver", "handlers"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "git": rev + ("+dirty" if dirty else ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# Sections that run only when named with --only (each takes many minutes).
OPT_IN = frozenset({"node-churn"})


def run(quick: bool, only: frozenset[str] = frozenset(), churn_pods: int = 1000) -> dict[str, Any]:
    """Every figure (or the sections named in `only`); each section is timed too."""
    n = 20 if quick else 200
    out: dict[str, Any] = {"machine": machine(), "seconds": {}}

    def section(name: str, fn: Any, *args: Any) -> None:
        if (only and name not in only) or (name in OPT_IN and name not in only):
            return
        start = time.monotonic()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        out[name] = fn(*args)
        out["seconds"][name] = round(time.monotonic() - start, 1)

    section("kinds", lambda: [latency.kind_latency(k, n) for k in latency.KINDS])
    section("batches", latency.batches, (1, 8, 32, 128), 2 if quick else 5)
    section("restart", lifecycle.restart, 100 if quick else 1000, 3)
    section("startup", lifecycle.startup, 5)
    section("publishing", publishing.publishing, (0, 64, 512), 5 if quick else 20)
    section("memory", lifecycle.memory, 1000 if quick else 10000, 100)
    section("rtnl", rtnl.figures, n)
    section("placement", placement.placement, (1, 8, 16, 32), 1 if quick else 5)
    section("cni", cniattach.cni_attach, 5 if quick else 20)
    section("churn", churn.churn, 100 if quick else 1000, 25 if quick else 250)
    section("node", node.node_figures, 5 if quick else 20)
    section("node-light", nodelight.lightness, 1 if quick else 3, 5 if quick else 10)
    section("node-churn", nodechurn.node_churn, 50 if quick else churn_pods)
    section("fleet", fleet.fleet, 10 if quick else 50, 20 if quick else 60, 20 if quick else 60)
    out["leftover_drivers"] = lifecycle.leftover_drivers()
    return out


def _ok(good: bool) -> str:
    return "met" if good else "MISSED"


def table(r: dict[str, Any]) -> str:
    """The results as Markdown, each figure beside its floor and target."""
    m = r["machine"]
    lines = [
        f"Machine: {m['cores']} cores, kernel {m['kernel']}, Python {m['python']}, "
        f"git {m['git']}, {m['date']}",
        "",
        "| figure | driver | floor | ratio | target |",
        "|---|---|---|---|---|",
    ]
    for k in r.get("kinds", []):
        f, kind = k["floor"], k["kind"]
        virtual = kind != "host-device"  # the latency targets are stated for virtual kinds

        def target(text: str, ok: bool, virtual: bool = virtual) -> str:
            return f"{text}: {_ok(ok)}" if virtual else "(targets are for virtual kinds)"

        p, fp = k["prepare"], f["prepare"]
        lines.append(
            f"| {kind} prepare p50 / p99 (ms) | {p['p50_ms']:.2f} / {p['p99_ms']:.2f} "
            f"| {fp['p50_ms']:.2f} / {fp['p99_ms']:.2f} | {p['p50_ms'] / fp['p50_ms']:.1f}x | "
            + target(
                "p50 <= 5x floor, p99 <= 25", p["p50_ms"] <= 5 * fp["p50_ms"] and p["p99_ms"] <= 25
            )
            + " |"
        )
        g, fg = k["unprepare_ns_gone"], f["unprepare_ns_gone"]
        lines.append(
            f"| {kind} unprepare, pod namespace gone, p50 / p99 (ms) | {g['p50_ms']:.2f} / "
            f"{g['p99_ms']:.2f} | {fg['p50_ms']:.2f} / {fg['p99_ms']:.2f} | "
            f"{g['p50_ms'] / fg['p50_ms']:.1f}x | " + target("p99 <= 10", g["p99_ms"] <= 10) + " |"
        )
        h, fd = k["unprepare_on_host"], f["link_delete"]
        op = "link delete" if virtual else "link set"
        lines.append(
            f"| {kind} unprepare, still on host, p50 / p99 (ms) | {h['p50_ms']:.2f} / "
            f"{h['p99_ms']:.2f} | {fd['p50_ms']:.2f} / {fd['p99_ms']:.2f} ({op}) | "
            f"{h['p50_ms'] / fd['p50_ms']:.2f}x | "
            + target("p50 <= 1.5x link delete", h["p50_ms"] <= 1.5 * fd["p50_ms"])
            + " |"
        )
        hp = k["handler"]
        lines.append(
            f"| {kind} handler alone, in process: prepare / unprepare p50 (ms) | "
            f"{hp['prepare']['p50_ms']:.2f} / {hp['unprepare_on_host']['p50_ms']:.2f} | "
            f"{f['link_create']['p50_ms']:.2f} / {fd['p50_ms']:.2f} | | |"
        )
    if "kinds" in r and "batches" in r:
        veth_delete = next(k for k in r["kinds"] if k["kind"] == "veth")["floor"]["link_delete"]
        by = {b["claims"]: b for b in r["batches"]}
        for b in r["batches"]:
            lines.append(
                f"| batch of {b['claims']}: prepare total / per claim (ms) | "
                f"{b['prepare_total_ms']:.0f} / {b['prepare_per_claim_ms']:.2f} | | | |"
            )
            lines.append(
                f"| batch of {b['claims']}: unprepare on host total / per claim (ms) | "
                f"{b['unprepare_total_ms']:.0f} / {b['unprepare_per_claim_ms']:.2f} | "
                f"{b['claims'] * veth_delete['p50_ms']:.0f} (deletions in a row) | "
                f"{b['unprepare_total_ms'] / (b['claims'] * veth_delete['p50_ms']):.2f}x | |"
            )
        if 128 in by and 8 in by:
            flat = by[128]["prepare_per_claim_ms"] / by[8]["prepare_per_claim_ms"]
            lines.append(
                f"| 128 claims in one call, per-claim cost 128 vs 8 | "
                f"{by[128]['prepare_total_ms'] / 1e3:.2f} s, {flat:.2f}x | | | <= 1.5 s, "
                f"flat: {_ok(by[128]['prepare_total_ms'] <= 1500 and flat <= 1.25)} |"
            )
    if "restart" in r:
        rs = r["restart"]
        lines.append(
            f"| restart with {rs['records']} records: to GetInfo / first prepare (s) | "
            f"{rs['to_registration_s']:.2f} / {rs['to_first_prepare_s']:.2f} | | | "
            f"<= 2 s: {_ok(rs['to_registration_s'] <= 2)} |"
        )
    if "startup" in r:
        for mode in ("cdi", "nri"):
            st = r["startup"][mode]
            lines.append(
                f"| start-up, {mode.upper()} mode, exec to registration socket, median / max "
                f"(s) | {st['median_s']:.2f} / {st['max_s']:.2f} | | | <= 0.4: "
                f"{_ok(st['median_s'] <= 0.4)} |"
            )
    if "publishing" in r:
        for p in r["publishing"]:
            lines.append(
                f"| slice for {p['devices']} devices: build / first publish / unchanged "
                f"check (ms), bytes | {p['build_ms']:.1f} / {p['first_publish_ms']:.1f} / "
                f"{p['unchanged_check_ms']:.1f}, {p['bytes']} B in {p['slices']} slice(s) | "
                f"| | |"
            )
    if "memory" in r:
        mem = r["memory"]
        lines.append(
            f"| RSS idle / with 128 claims / after {mem['cycles']} cycles (MB) | "
            f"{mem['idle_mb']:.1f} / {mem['with_128_mb']:.1f} / {mem['after_cycles_mb']:.1f}"
            f" | | | idle <= 55: {_ok(mem['idle_mb'] <= 55)} |"
        )
        lines.append(
            f"| RSS growth from cycle 1000 to the last (MB) | "
            f"{mem['growth_after_first_1000_mb']:+.1f} (from idle: "
            f"{mem['growth_from_idle_mb']:+.1f}) | | | <= 2: "
            f"{_ok(mem['growth_after_first_1000_mb'] <= 2)} from cycle 1000, "
            f"{_ok(mem['growth_from_idle_mb'] <= 2)} from idle |"
        )
    lines += rtnl_rows(r)
    lines += placement.rows(r.get("placement", []))
    lines += cniattach.rows(r.get("cni"))
    lines += churn.rows(r.get("churn"))
    lines += node_rows(r)
    lines += nodelight.rows(r.get("node-light"))
    lines += nodechurn.rows(r.get("node-churn"))
    lines += fleet.rows(r.get("fleet"))
    total = sum(r["seconds"].values())
    lines += ["", f"Sections (s): {r['seconds']}, total {total:.0f} s"]
    return "\n".join(lines)


def rtnl_rows(r: dict[str, Any]) -> list[str]:
    """The rtnetlink backend beside pyroute2 (the "floor" column) for the same requests."""
    n = r.get("rtnl")
    if n is None:
        return []
    ours, theirs = n["ours"], n["pyroute2"]
    names = {"find": "lookup by name", "links": f"dump of {n['links_dumped']} links"}
    names |= {"create": "veth create", "delete": "veth delete"}
    lines = [
        f"| netlink {what}, in process, p50 / p99 (us), ours (beside: pyroute2) | "
        f"{ours[k]['p50_ms'] * 1e3:.0f} / {ours[k]['p99_ms'] * 1e3:.0f} | "
        f"{theirs[k]['p50_ms'] * 1e3:.0f} / {theirs[k]['p99_ms'] * 1e3:.0f} | "
        f"{ours[k]['p50_ms'] / theirs[k]['p50_ms']:.2f}x | |"
        for k, what in names.items()
    ]
    lines.append(
        f"| RSS of the daemon's imports + one netlink request (MB), ours (beside: with "
        f"pyroute2 loaded) | {n['rss_ours_mb']:.1f} | {n['rss_with_pyroute2_mb']:.1f} | "
        f"{n['rss_ours_mb'] - n['rss_with_pyroute2_mb']:+.1f} MB | |"
    )
    return lines


def node_rows(r: dict[str, Any]) -> list[str]:
    """The real node's figures, beside the socket-level ones of the same run."""
    n = r.get("node")
    if n is None:
        return []
    if "skipped" in n:
        return [f"| real node (localcluster) | skipped: {n['skipped']} | | | |"]
    sp, sc = n["start_plain"], n["start_with_claim"]
    lines = [
        f"| real node: pod create -> Running, no claim, p50 / p99 (ms), {n['pods']} pods | "
        f"{sp['p50_ms']:.0f} / {sp['p99_ms']:.0f} | | | |",
        f"| real node: pod create -> Running, one veth claim, p50 / p99 (ms) | "
        f"{sc['p50_ms']:.0f} / {sc['p99_ms']:.0f} | {sp['p50_ms']:.0f} (no claim) | "
        f"{sc['p50_ms'] / sp['p50_ms']:.2f}x | |",
        f"| real node: pod delete -> gone, no claim / one claim, p50 (ms) | "
        f"{n['delete_plain']['p50_ms']:.0f} / {n['delete_with_claim']['p50_ms']:.0f} | | | |",
    ]
    veth = next((k for k in r.get("kinds", []) if k["kind"] == "veth"), None)
    socket = {
        "NodePrepareResources": veth and veth["prepare"],
        "NodeUnprepareResources": veth and veth["unprepare_ns_gone"],
    }
    targets = {"NodePrepareResources": (4.5, 10.0), "NodeUnprepareResources": (5.0, None)}
    for method, k in n["kubelet"].items():
        if not k.get("n"):
            continue
        s = socket.get(method)
        beside = f"{s['mean_ms']:.2f} (socket-level mean)" if s else ""
        ratio = f"{k['mean_ms'] / s['mean_ms']:.1f}x" if s else ""
        mean_target, p99_target = targets.get(method, (None, None))
        log = k.get("from_log")
        wanted = []
        if mean_target is not None:
            wanted.append(f"mean <= {mean_target:g}: {_ok(k['mean_ms'] <= mean_target)}")
        if p99_target is not None and log:
            wanted.append(f"p99 <= {p99_target:g}: {_ok(log['p99_ms'] <= p99_target)}")
        lines.append(
            f"| real node ({n.get('injection', '?')} mode): {method} as the kubelet measures "
            f"it, mean (ms), n={k['n']} | {k['mean_ms']:.2f} | {beside} | {ratio} | "
            f"{', '.join(wanted)} |"
        )
        if log:
            lines.append(
                f"| real node: {method}, kubelet log send-to-answer p50 / p99 / mean (ms) | "
                f"{log['p50_ms']:.2f} / {log['p99_ms']:.2f} / {log['mean_ms']:.2f} | | | |"
            )
        phases = n.get("driver_phases_ms", {}).get(method)
        if phases:
            handler = phases.get("handler", 0.0)
            parts = ", ".join(
                f"{name} {ms:.2f}"
                for name, ms in sorted(phases.items(), key=lambda item: -item[1])
                if name not in ("handler", "calls") and ms >= 0.05
            )
            lines.append(
                f"| real node: {method} inside the driver, mean (ms) by phase | "
                f"{handler:.2f} ({parts}) | | | |"
            )
    return lines


def main() -> int:
    """Run, save, print."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sample sizes (smoke run)")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results.json")
    parser.add_argument(
        "--only", action="append", default=[], help="run only this section (repeatable)"
    )
    parser.add_argument(
        "--churn-pods",
        type=int,
        default=1000,
        help="pods of the node-churn section (run only with --only node-churn)",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root (network namespaces)", file=sys.stderr)
        return 2
    results = run(args.quick, frozenset(args.only), args.churn_pods)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
