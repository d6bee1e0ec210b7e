"""bench/studies/stage2_secondary.py reads a cell's numbers as its log wrote them: means over the steps
(plan-class means over the steps that had such groups), edits summed by kind, the expert NLL after the
last step and, for scaffold cells, before training from the seed's `none` cell; unfinished cells are
left out."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for bench.*

from bench.studies import stage2_secondary as secondary  # noqa: E402
from pats.logging.events import EventLog  # noqa: E402
from pats.sweep.record import CellStatus, write_status  # noqa: E402


def cell(
    root: Path, name: str, steps: list[dict[str, float]], evals: dict[int, dict[str, float]], state: str
):
    folder = root / name
    folder.mkdir(parents=True)
    log = EventLog(folder / "events.jsonl")
    if -1 in evals:
        log.write(-1, "eval", metrics=evals[-1])
    for step, metrics in enumerate(steps):
        log.end_step(step, metrics=metrics)
    if len(steps) - 1 in evals:
        log.write(len(steps) - 1, "eval", metrics=evals[len(steps) - 1])
    log.close()
    write_status(folder, CellStatus(status=state))


def test_a_grids_cells_read_as_their_logs_wrote_them(tmp_path):
    cell(tmp_path, "stage2-none-s0", [{"train/success": 0.1, "train/informative_fraction": 0.2}] * 2,
         {-1: {"eval/expert_nll": 3.5}, 1: {"eval/expert_nll": 4.0}}, "finished")  # fmt: skip
    shown = {
        "coverage/plan_groups": 4.0,
        "coverage/plan_informative_fraction": 1.0,
        "coverage/plan_steps": 5.0,
    }
    steps = [
        {"train_with_scaffold/success": 0.8, "train_without_scaffold/success": 0.0, "edits/ADD": 2.0,
         "coverage/plan_fraction": 1.0, **shown},
        {"train_with_scaffold/success": 0.6, "train_without_scaffold/success": 0.5, "edits/DELETE": 3.0,
         "coverage/plan_fraction": 0.0, "coverage/plan_groups": 0.0, "scaffold/entries": 29.0},
    ]  # fmt: skip
    end = {"eval/expert_nll": 9.0, "eval/likelihood_gap": 7.0}
    cell(tmp_path, "stage2-pats-expert-s0", steps, {1: end}, "finished")
    cell(tmp_path, "stage2-static-expert-s0", steps[:1], {}, "running")
    read = secondary.cells(tmp_path)
    assert [(c.condition, c.seed) for c in read] == [("stage2-none", 0), ("stage2-pats-expert", 0)]
    none, pats = read
    assert (none.scaffolded_success, none.probe_success, none.nll_start, none.nll_end) == (
        0.1,
        None,
        3.5,
        4.0,
    )
    assert pats.scaffolded_success == 0.7 and pats.probe_success == 0.25 and pats.plan_fraction == 0.5
    assert pats.informative_plan == 1.0 and pats.plan_steps == 5.0  # the step shown no plan is not averaged
    assert (pats.adds, pats.updates, pats.removals, pats.entries_last) == (2, 0, 3, 29.0)
    assert (pats.nll_start, pats.nll_end, pats.gap_end) == (3.5, 9.0, 7.0)  # untrained: the none cell's
    assert "| stage2-pats-expert-s0 | 0.700 | 0.250 |" in secondary.table(read)
