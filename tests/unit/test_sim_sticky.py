"""scripts/sim_sticky.py (ADR 0021): it runs, and its routing gives the hit rates it should."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from sim_sticky import Scenario, hit_rate, main, simulate, simulate_pair


def test_quick_mode_runs_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick"]) == 0

    out = capsys.readouterr().out
    assert "| typical | 1 | typical mix (all sizes) | 4 |" in out
    assert "| typical | 16 | typical mix (all sizes) | 4 |" in out


def test_one_container_and_one_run_goes_on_from_where_it_parked_every_time() -> None:
    result = simulate(Scenario(containers=1, runs_in_flight=1, sizes=(10,), per_size=2))

    runs = result["runs"]
    assert [r["kind"] for r in runs] == ["typical", "typical"]
    assert all(r["opportunities"] == r["invocations"] - 1 > 0 for r in runs)
    assert hit_rate(result) == 1.0


def test_sixteen_containers_and_many_runs_seldom_land_where_the_run_is_parked() -> None:
    result = simulate(Scenario(containers=16, runs_in_flight=8, sizes=(10,), per_size=6))

    resumed = sum(r["resumed"] for r in result["runs"])
    routed_back = sum(r["routed_back"] for r in result["runs"])
    assert hit_rate(result) < 1.0
    assert resumed == routed_back  # a run routed back to its container goes on there


def test_on_and_off_are_routed_alike_and_only_on_resumes() -> None:
    on, off = simulate_pair(Scenario(containers=4, runs_in_flight=2, sizes=(10,), per_size=3))

    assert [r["routed_back"] for r in on["runs"]] == [r["routed_back"] for r in off["runs"]]
    assert [r["invocations"] for r in on["runs"]] == [r["invocations"] for r in off["runs"]]
    assert sum(r["resumed"] for r in off["runs"]) == 0
    assert on["scenario"]["sticky"] and not off["scenario"]["sticky"]


def test_the_routing_alone_is_deterministic_given_a_seed() -> None:
    scenario = Scenario(containers=16, runs_in_flight=8, per_size=5, routing_only=True, seed=7)

    first, again = simulate(scenario), simulate(scenario)

    assert first["runs"] == again["runs"]
    assert 0 < hit_rate(first) < 0.5
