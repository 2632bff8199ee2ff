"""The arithmetic of the benchmark scripts: billed units, percentiles, predictions, tables."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from bench_billing import Bill, Ledger
from bench_instructions import collected, replay_costs, replayed
from bench_instructions import markdown as instructions_table
from bench_local import percentile
from bench_markers import write_section
from bench_peers import _predict, markdown

HEADER = {"gsi1pk": {"S": "STATUS#RUNNING"}, "gsi1sk": {"S": "1#r"}, "gsi3pk": {"S": "TENANT#t"}}
HEADER["gsi3sk"] = {"S": "RUNNING#1#r"}


def test_a_status_change_in_a_transaction_moves_the_header_in_its_one_index() -> None:
    running = {"gsi1pk": {"S": "STATUS#RUNNING#3"}, "gsi1sk": {"S": "1#r"}}
    waking = {"gsi1pk": {"S": "WAKE#5"}, "gsi1sk": {"S": "9#r"}}

    units = Ledger._write_units((473, running, "a"), (638, waking, "b"), tx=True)

    # 2 (table, transactional) + gsi1 moved (1 + 1): ADR 0029's one slot
    assert units == 4


def test_a_header_of_the_earlier_layout_moved_in_every_index() -> None:
    suspended = {**HEADER, "gsi1pk": {"S": "STATUS#SUSPENDED"}, "gsi3sk": {"S": "SUSPENDED#2#r"}}
    suspended |= {"gsi2pk": {"S": "WAKE"}, "gsi2sk": {"S": "9#r"}}

    units = Ledger._write_units((473, HEADER, "a"), (638, suspended, "b"), tx=True)

    # 2 (table, transactional) + gsi1 moved (1 + 1) + gsi2 entered (1) + gsi3 moved (1 + 1)
    assert units == 7


def test_any_change_rewrites_the_entries_of_an_all_projected_index() -> None:
    # Same keys, other values: each index the item is in writes its entry again.
    assert Ledger._write_units((500, HEADER, "a"), (500, HEADER, "b"), tx=False) == 3


def test_a_failed_condition_bills_the_table_write_only() -> None:
    assert Ledger._write_units((1500, HEADER, "x"), (1500, HEADER, "x"), tx=False) == 2
    assert Ledger._write_units((0, None, ""), (0, None, ""), tx=False) == 1


def test_an_entry_outside_the_indexes_costs_one_unit_per_kilobyte() -> None:
    assert Ledger._write_units((0, None, ""), (1025, {"gsi1pk": None}, "e"), tx=False) == 2


def test_reads_are_billed_per_4_kb_half_for_index_queries() -> None:
    item = {"pk": {"S": "x" * 5000}}
    strong = Ledger._read_units("Query", {"ConsistentRead": True}, {"Items": [item]})
    index = Ledger._read_units("Query", {"IndexName": "gsi1"}, {"Items": [item]})
    empty = Ledger._read_units("GetItem", {"ConsistentRead": True}, {})
    assert (strong, index, empty) == (2.0, 1.0, 1.0)


def test_bills_subtract_and_price() -> None:
    one = Bill(wru=2, rru=1, event_chunks=1, lambdas=1)
    one.requests["PutItem"] = 2
    assert (one - Bill()).durable_writes == 2
    assert round(1000 * one.dollars(), 6) == 0.002575


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]
    assert [percentile(values, q) for q in (0.5, 0.95, 0.99, 1.0)] == [50, 95, 99, 100]
    assert percentile([7.0], 0.99) == 7


def test_faithful_mode_is_predicted_quadratic_the_others_linear() -> None:
    done = {100: [1.0, 3.0, 2.0], 1000: []}
    assert _predict(done, 1000, "da-faithful") == 200.0
    assert _predict(done, 1000, "dbos-sqlite") == 20.0
    assert _predict({100: []}, 1000, "da-faithful") is None


def test_the_peers_table_shows_predictions_and_ratios() -> None:
    results = {
        "sizes": [100, 1000],
        "rounds": 1,
        "samples": {"da-continuous": {100: [0.5], 1000: [5.0]}, "da-faithful": {100: [1.0]}},
        "predicted": {"da-continuous": {}, "da-faithful": {1000: 100.0}},
    }
    text = markdown(results)
    assert "~100 (predicted, not run)" in text
    assert "| durable_agents harness, faithful | 2.00x | - |" in text


def test_the_invocations_bench_predicts_replaying_quadratic_sticky_linear() -> None:
    from bench_invocations import _predict as predict_invocations

    done = {100: [{"wall": 1.0, "cpu": 0.5}]}
    assert predict_invocations(done, 1000, "faithful") == 100.0
    assert predict_invocations(done, 1000, "sticky") == 10.0
    assert predict_invocations({}, 1000, "sticky") is None


def test_callgrind_totals_are_read_and_a_failed_run_is_said() -> None:
    assert collected("==1== Events    : Ir\n==1== Collected : 1895724442\n") == 1895724442
    with pytest.raises(ValueError, match="no instruction count"):
        collected("valgrind: command not found")


def test_faithful_excess_is_split_into_replayed_operations_and_invocations() -> None:
    per_op, per_invocation = 5_900, 100_000
    excess = {n: per_op * replayed(n) + per_invocation * n for n in (200, 400)}
    x, y = replay_costs(excess[200], excess[400], 200)
    assert (round(x, 6), round(y, 6)) == (per_op, per_invocation)
    assert replayed(1) == 0 and replayed(3) == 3


def test_the_instructions_table_shows_the_sticky_ratio() -> None:
    figures = {"steps": 200, "continuous": 200_000, "sticky": 360_000}
    figures |= {"replayed_operation": 6_000, "replay_setup": 100_000}
    table = instructions_table(figures)
    assert "| sticky against continuous | 1.80x |" in table
    # 360,000 + 100,000 + 6,000 * 999 / 2
    assert "| a step of a 1,000-step faithful run, on average (predicted) | 3,457,000 |" in table


def test_results_are_written_between_their_markers_and_appended_without_them(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Title\n\n<!-- s -->\nold\n<!-- e -->\n\nProse after.\n")
    write_section(doc, "<!-- s -->", "<!-- e -->", "| new |\n")
    assert doc.read_text() == "# Title\n\n<!-- s -->\n| new |\n<!-- e -->\n\nProse after.\n"
    write_section(doc, "<!-- s2 -->", "<!-- e2 -->", "more")
    assert doc.read_text().endswith("Prose after.\n<!-- s2 -->\nmore\n<!-- e2 -->")
    fresh = tmp_path / "new.md"
    write_section(fresh, "<!-- s -->", "<!-- e -->", "only")
    assert fresh.read_text() == "<!-- s -->\nonly\n<!-- e -->"


def test_the_sticky_floor_drives_a_run_to_its_end_through_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench_sticky_floor import measure

    from durable_agents.engine.runtime import Runtime

    through_runtime: list[str] = []
    original = Runtime.execute

    def counted(runtime: Any, run_id: str, **options: Any) -> Any:
        through_runtime.append(run_id)
        return original(runtime, run_id, **options)

    monkeypatch.setattr(Runtime, "execute", counted)
    assert measure("floor", 30) > 0  # raises unless the run SUCCEEDED
    # The first invocation (nothing parked yet) and the last (the run ends) go through the
    # runtime; the 28 between take the floor.
    assert len(through_runtime) == 2


def test_the_cold_start_bench_times_each_handler_and_its_first_set_up(tmp_path: Path) -> None:
    # One round per handler on this interpreter: every handler imports in the template's
    # environment, and the handlers that build a runtime have their set-up timed (the Api's
    # is in api.services).
    import argparse

    from bench_cold_start import HANDLERS, markdown, measure

    args = argparse.Namespace(
        python=sys.executable,
        source=Path(__file__).resolve().parents[2],
        against=None,
        runs=1,
        handlers=list(HANDLERS),
        tracing="off",
        instructions=False,
        breakdown=False,
    )
    results = measure(args)
    assert set(results["handlers"]) == set(HANDLERS)
    for label, row in results["handlers"].items():
        assert row["handler_import"][1] > 0 and row["handler_ratio"] > 0, label
        assert row["handler_setup"][1] > 0, f"{label}: no first invocation's set-up was timed"
    table = markdown(results, "python scripts/bench_cold_start.py --runs 1")
    assert table.count("\n| ") == len(HANDLERS) + 1  # a header row and one row per handler
