"""bench/perf/quickstart.py's phase table, from a run's progress lines and metrics (crafted here; the
benchmark itself runs the quickstart, minutes, and is not a test)."""

from __future__ import annotations

import pytest

from bench.perf.quickstart import phases


def test_the_phases_cut_the_run_at_its_progress_lines_and_add_up_to_it():
    marks = [
        (20.0, "[quickstart] training steps 0-1 of 2; first the evaluation before training", 1.2),
        (50.0, "[quickstart] eval of the checkpoint before training: held-out success 25%", 1.4),
        (80.0, "[quickstart] step 0 (1/2): success 50% | 30 s", 2.0),
        (115.0, "[quickstart] step 1 (2/2): success 67% | 31 s", 1.9),
        (160.0, "[quickstart] eval of the checkpoint after step 1: held-out success 25%", 1.5),
        (166.0, "exit", 1.3),
    ]
    metrics = [
        {"step": 0, "time/rollout_s": 10.0, "time/update_s": 19.0, "time/step_s": 30.0},
        {"step": 0, "eval/success": 0.25},  # an evaluation's line: no step time
        {"step": 1, "time/rollout_s": 11.0, "time/update_s": 18.0, "time/step_s": 31.0},
    ]
    table = {p.name: (p.seconds, p.peak_gib) for p in phases(marks, metrics)}
    assert table == {
        "imports, first model load and conversion, environments": (20.0, 1.2),
        "eval of the checkpoint before training": (30.0, 1.4),
        "step 0: rollout": (10.0, 2.0),
        "step 0: update": (19.0, 2.0),
        "step 0: review and commit after the update": (1.0, 2.0),
        "step 1: rollout": (11.0, 1.9),
        "step 1: update": (18.0, 1.9),
        "step 1: review and commit after the update": (2.0, 1.9),
        "eval of the checkpoint after step 1": (45.0, 1.5),
        # step 1 began 4 s after step 0's line (step 0's checkpoint), the exit 6 s after the last line
        "checkpoints, W&B, summary (between the above)": (pytest.approx(10.0), 1.3),
    }
    assert sum(s for s, _ in table.values()) == pytest.approx(166.0)
