"""A sweep's `order: seed`: every condition of a seed before the next seed, so a campaign stopped
early (one session's budget) holds paired cells; `order: spec` (the default) keeps each spec's seeds
together."""

from __future__ import annotations

from pathlib import Path

from pats.sweep import SweepSpec, cells


def names(repo: Path, root: Path, order: str) -> list[str]:
    specs = (str(repo / "experiments/quickstart.yaml"), str(repo / "experiments/baselines/grpo.yaml"))
    sweep = SweepSpec(name="o", specs=specs, seeds=(2, 0), root=str(root), order=order)  # type: ignore[arg-type]
    return [c.name for c in cells(sweep)]


def test_seed_order_runs_every_condition_of_a_seed_first(repo, tmp_path):
    assert names(repo, tmp_path, "seed") == [
        "quickstart-s2",
        "quickstart-grpo-s2",
        "quickstart-s0",
        "quickstart-grpo-s0",
    ]
    assert names(repo, tmp_path, "spec") == [
        "quickstart-s2",
        "quickstart-s0",
        "quickstart-grpo-s2",
        "quickstart-grpo-s0",
    ]
