"""`pats compare`: conditions from run folders, intervals checked against hand computations on crafted
runs (the crossed design and the nested one), the baseline, the files; and the engine's eval events
keep the per-game outcomes compare resamples."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from pats.compare import compare, read_run, run_dirs
from pats.compare.output import csv_text, markdown
from pats.compare.runs import condition_of
from pats.errors import PrerequisiteError
from pats.logging.events import EvalEvent, EventLog, read_events
from pats.scaffold.store import ScaffoldStore
from pats.spec import load_spec, spec_to_yaml
from pats.stats import Interval, wilson
from pats.types import AddEdit


def craft(
    root: Path,
    repo: Path,
    name: str,
    seed: int,
    mode: str,
    heldout,
    with_scaffold=None,
    steps=None,
    at_start=None,
    overrides=(),
    guidance: str | None = None,
) -> Path:
    """A run folder as pats writes one: spec.yaml, and events.jsonl with an evaluation of the untrained
    policy (`at_start`, step -1) if given, step ends, and a last evaluation (`heldout`; None: none); a
    run with a scaffold also gets one scaffold version at step 0 holding `guidance` (default: the
    condition's name, so each condition's history is its own)."""
    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        [f"name={name}", f"seed={seed}", f"scaffold.mode={mode}", *overrides],
    )
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "spec.yaml").write_text(spec_to_yaml(spec))
    log = EventLog(run_dir / "events.jsonl")
    if at_start is not None:
        log.write(-1, "eval", metrics={"eval/success": 0.0}, outcomes=at_start)
    steps = steps or [{"train/success": 0.5}] * 3
    for step, metrics in enumerate(steps):
        log.end_step(step, metrics=metrics)
    extra = {"outcomes_with_scaffold": with_scaffold} if with_scaffold else {}
    if heldout is not None:
        log.write(len(steps) - 1, "eval", metrics={"eval/success": 0.0}, outcomes=heldout, **extra)
    log.close()
    if mode != "none":
        text = guidance if guidance is not None else f"guidance of {condition_of(name, seed)}"
        store = ScaffoldStore(len, 100, run_dir / "scaffold")
        store.seed([AddEdit(kind="skill", scope="general", text=text)], step=0)
    return run_dir


# Two seeds, two games, one episode each: A wins g0 in both seeds and g1 in seed 1 only; B wins nothing.
A = {0: {"g0": [1.0], "g1": [0.0]}, 1: {"g0": [1.0], "g1": [1.0]}}
ZERO = {"g0": [0.0], "g1": [0.0]}
ALL = {"g0": [1.0], "g1": [1.0]}


@pytest.fixture
def crafted(tmp_path, repo) -> Path:
    steps = {
        0: [{"train/success": 0.2, "edits/ADD": 2.0, "edits/DELETE": 1.0, "scaffold/entries": 1.0},
            {"train/success": 0.4, "edits/UPDATE": 1.0, "scaffold/entries": 3.0, "scaffold/tokens": 40.0}],
        1: [{"train/success": 0.4}, {"train/success": 0.6, "scaffold/entries": 5.0, "scaffold/tokens": 60.0}],
    }  # fmt: skip
    for seed in (0, 1):
        craft(tmp_path, repo, f"pats-s{seed}", seed, "pats", A[seed], ALL, steps[seed])
        craft(tmp_path, repo, f"grpo-s{seed}", seed, "none", ZERO)
    return tmp_path


def test_conditions_and_intervals_match_a_hand_computation(crafted):
    result = compare([read_run(d) for d in run_dirs([crafted])])
    rows = {r.condition: r for r in result.rows}
    assert set(rows) == {"pats", "grpo"} and result.baselines == ("grpo",)  # the one without a scaffold
    pats = rows["pats"]
    assert (pats.seeds, pats.games, pats.episodes, pats.design, pats.steps) == (
        (0, 1),
        ((0, 2), (1, 2)),
        4,
        "crossed",
        "2/3",
    )
    # Crossed: 4 equally likely seed draws x 4 game draws. Seeds (0,0) give 1, .5, .5, 0; (1,1) 1 four
    # times; (0,1) and (1,0) 1, .75, .75, .5. P(0) = 1/16 > 2.5%, P(1) = 7/16: [0, 1] around 3/4.
    assert pats.heldout == Interval(0.75, 0.0, 1.0)
    assert pats.heldout_with_scaffold == Interval(1.0, *wilson(2, 2))  # at 1: Wilson over the 2 games
    # Reliance gap, with - without: seed 0 (0, 1), seed 1 (0, 0). Draws: (0,0) give 0, .5, .5, 1; (1,1)
    # 0 four times; mixed 0, .25, .25, .5 each. P(0) = 7/16, P(1) = 1/16 > 2.5%: [0, 1] around 1/4.
    gap = pats.reliance_gap
    assert (
        gap is not None and gap.interval == Interval(0.25, 0.0, 1.0) and gap.per_seed == ((0, 0.5), (1, 0.0))
    )
    grpo = rows["grpo"]
    assert grpo.heldout == Interval(0.0, *wilson(0, 2)) and grpo.heldout_with_scaffold is None
    assert grpo.heldout.hi == pytest.approx(0.6576, abs=1e-4)  # (z^2/4 + 1.96 * 0.49) / (1 + z^2/2), z = 1.96
    (diff,) = result.differences
    assert diff.condition == "pats" and diff.difference.design == "crossed"
    assert diff.difference.interval == Interval(0.75, 0.0, 1.0)  # B is all 0: the distribution of A's rate
    assert diff.difference.per_seed == ((0, 0.5), (1, 1.0))
    # per-run numbers averaged over seeds: train success (0.3 + 0.5) / 2; edits 4 and 0; removals 1 and 0
    assert pats.train_success == pytest.approx(0.4)
    assert (pats.edits, pats.removals, pats.scaffold_entries, pats.scaffold_tokens) == (2.0, 0.5, 4.0, 50.0)
    assert any("pats-s0: 2 of 3 steps done" in n for n in result.notes)


def test_seeds_on_different_games_get_the_nested_interval(tmp_path, repo):
    # The same outcomes, but seed 1 played other games (g2, g3): nothing to draw jointly, so nested.
    # Nested with seeds (0,0) needs g1 in all four game draws for 0 (1/4 * 1/16 < 2.5%); 0.25 adds
    # 1/4 * 4/16: P(<= .25) = 5/64 > 2.5%, so the lower end is 0.25.
    craft(tmp_path, repo, "pats-s0", 0, "pats", A[0])
    craft(tmp_path, repo, "pats-s1", 1, "pats", {"g2": [1.0], "g3": [1.0]})
    craft(tmp_path, repo, "grpo-s0", 0, "none", ZERO)
    craft(tmp_path, repo, "grpo-s1", 1, "none", {"g2": [0.0], "g3": [0.0]})
    result = compare([read_run(d) for d in run_dirs([tmp_path])], ["grpo"])
    pats = next(r for r in result.rows if r.condition == "pats")
    assert pats.design == "nested" and pats.heldout == Interval(0.75, 0.25, 1.0)
    assert result.differences[0].difference.design == "nested"
    assert result.differences[0].difference.interval == Interval(0.75, 0.25, 1.0)


def test_the_table_files_and_the_refusals(crafted, tmp_path, capsys):
    from pats.cli.main import main

    out = tmp_path / "out"
    assert main(["compare", str(crafted), "--baseline", "grpo", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        "| pats | pats | 0, 1 | 2/3 | 2 per seed | 0.750 [0.000, 1.000] | 1.000 [0.342, 1.000] | +0.250 [+0.000, +1.000] |"
        in printed
    )
    assert "| pats | +0.750 [+0.000, +1.000] | crossed | 2 per seed | s0 +0.500, s1 +1.000 |" in printed
    assert (out / "curves.png").stat().st_size > 10_000
    rows = list(csv.DictReader(io.StringIO((out / "comparison.csv").read_text())))
    pats = next(r for r in rows if r["condition"] == "pats")
    assert (float(pats["minus_baseline"]), float(pats["minus_baseline_lo"]), pats["baseline"]) == (
        0.75,
        0.0,
        "grpo",
    )
    assert (out / "comparison.md").read_text() == markdown(
        compare([read_run(d) for d in run_dirs([crafted])], ["grpo"])
    )
    with pytest.raises(
        PrerequisiteError, match="--baseline nope is none of the conditions compared: grpo, pats"
    ):
        compare([read_run(d) for d in run_dirs([crafted])], ["nope"])
    twin = craft(tmp_path / "elsewhere", Path(__file__).resolve().parents[1], "pats-s0", 0, "pats", A[0])
    with pytest.raises(PrerequisiteError, match="two runs of condition pats with seed 0"):
        compare([read_run(d) for d in run_dirs([crafted, twin])])
    with pytest.raises(PrerequisiteError, match="neither a pats run"):
        run_dirs([tmp_path / "missing"])
    assert csv_text(compare([read_run(crafted / "grpo-s0")])).count("\n") == 2  # header and one row


def test_the_engine_keeps_each_held_out_games_outcomes(repo, tmp_path):
    from pats.engine.run import run_spec
    from pats.testing.sweep import scripted_trainers

    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["trainer.steps=2", "eval.every=1", "eval.with_scaffold=true", "eval.gap_tasks=0", "logging.wandb=disabled",
         "logging.progress=false", f"logging.root={tmp_path}"],
    )  # fmt: skip
    run_dir = run_spec(spec, scripted_trainers())
    evals = read_events(run_dir / "events.jsonl", EvalEvent)
    assert [e.step for e in evals] == [-1, 0, 1]  # before training (eval.at_start), after each step
    for e in evals:
        assert sorted(e.outcomes) == [f"fake:eval:{1000 + i}" for i in range(4)]  # FakeEnv's 4 held-out games
        pooled = [x for v in e.outcomes.values() for x in v]
        assert sum(pooled) / len(pooled) == e.metrics["eval/success"]
        if e.step == -1:  # the scaffold is empty before training: every prompt is the bare one, not replayed
            assert e.outcomes_with_scaffold == {} and "eval_with_scaffold/success" not in e.metrics
        else:
            assert sorted(e.outcomes_with_scaffold) == sorted(e.outcomes)
    assert read_run(run_dir).heldout == evals[-1].outcomes


def test_a_pats_eval_of_the_final_checkpoint_replaces_the_last_training_evaluation(
    repo, tmp_path, monkeypatch
):
    from pats.engine import evaluate
    from pats.engine.run import run_spec
    from pats.testing import FakeEnv, ScriptedBackend, improving_schedule
    from pats.testing.sweep import scripted_trainers

    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["trainer.steps=2", "eval.at_start=false", "eval.gap_tasks=0", "logging.wandb=disabled",
         "logging.progress=false", f"logging.root={tmp_path}"],
    )  # fmt: skip
    run_dir = run_spec(spec, scripted_trainers())
    assert read_run(run_dir).heldout_source == "training" and len(read_run(run_dir).heldout) == 4
    monkeypatch.setattr(
        evaluate, "make_env_factory", lambda s: lambda: FakeEnv(num_tasks=s.environment.num_eval_tasks)
    )
    monkeypatch.setattr(evaluate, "make_backend", lambda s, make_env: ScriptedBackend(improving_schedule()))
    evaluate.evaluate_run(
        run_dir, num_tasks=12, with_scaffold=True, say=lambda line: None
    )  # 12 > the spec's 8
    played = evaluate.EvalOutcomes.model_validate_json(evaluate.outcomes_path(run_dir, "eval").read_text())
    assert (played.checkpoint_step, len(played.outcomes), len(played.outcomes_with_scaffold)) == (1, 12, 12)
    record = read_run(run_dir)
    assert (record.heldout, record.heldout_source, record.eval_step) == (played.outcomes, "pats eval", 1)
    assert any("from `pats eval`" in n for n in compare([record]).notes)
    # an evaluation of an older checkpoint than the run's latest is not the run's result: left out
    stale = played.model_copy(update={"checkpoint_step": 0})
    evaluate.outcomes_path(run_dir, "eval").write_text(stale.model_dump_json())
    assert read_run(run_dir).heldout_source == "training"
