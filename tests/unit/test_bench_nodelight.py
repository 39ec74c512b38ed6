"""The node-light table: ours against the Go original's figures of the same runs."""

from __future__ import annotations

from typing import Any

from bench.nodelight import TARGETS, rows


def _run(unprepare: float, peer: float | None = None) -> dict[str, Any]:
    run: dict[str, Any] = {
        "startup_s": 0.2,
        "rss_idle_mb": 35.0,
        "rss_after_block_mb": 36.0,
        "unprepare_mean_ms": unprepare,
        "prepare_mean_ms": 4.0,
    }
    if peer is not None:
        run["peer"] = {**run, "startup_s": 0.1, "unprepare_mean_ms": peer, "prepare_mean_ms": 9.0}
    return run


def _result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"runs": runs, "pods": 10, "targets": TARGETS}


def _unprepare_row(table: list[str]) -> str:
    (row,) = [r for r in table if r.startswith("| real node: NodeUnprepareResources mean")]
    return row


def test_unprepare_is_met_only_when_at_most_the_peers_in_every_run() -> None:
    met = rows(_result([_run(6.0, 9.0), _run(8.0, 8.0), _run(5.0, 12.0)]))
    assert "the Go original's of the same run: met" in _unprepare_row(met)
    assert "0.67, 1.00, 0.42" in _unprepare_row(met)
    missed = rows(_result([_run(6.0, 9.0), _run(8.5, 8.0), _run(5.0, 12.0)]))
    assert "the Go original's of the same run: MISSED" in _unprepare_row(missed)


def test_the_peers_figures_stand_beside_ours() -> None:
    table = rows(_result([_run(6.0, 9.0)]))
    peer = [r for r in table if r.startswith("| real node, the Go original:")]
    assert len(peer) == 5  # start-up, RSS idle and after, unprepare, prepare
    assert any("NodePrepareResources" in r and "9.00 ms" in r for r in peer)


def test_without_a_peer_the_bar_is_the_last_measured_figure() -> None:
    table = rows(_result([_run(9.0), _run(10.0)]))
    assert "<= 9.6: MISSED (worst 10.00)" in _unprepare_row(table)
    assert not [r for r in table if "the Go original" in r]
