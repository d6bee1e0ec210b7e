"""End to end on the real thing: SmolLM2-135M-Instruct, TextWorldExpress twc, the quickstart spec
shrunk to two steps. Checks the run directory holds what it claims and that the deployment prompt
carries no scaffold."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from pats.backends.local.backend import LocalBackend
from pats.engine.run import new_run, train
from pats.logging.events import CardEvent, EditEvent, EvalEvent, GroupsEvent, StepEndEvent, read_events
from pats.scaffold.render import HEADER
from pats.spec import load_spec

pytestmark = pytest.mark.slow

TINY = [
    "trainer.steps=2",
    "trainer.tasks_per_step=2",
    "environment.max_turns=4",
    "eval.num_tasks=2",
    "eval.every=2",
    "eval.with_scaffold=false",  # every eval- episode is then a deployment episode (no scaffold view)
    "eval.gap_tasks=4",  # the likelihood gap the checks below read, not left to the quickstart's default
    # One greedy evaluation at the end, as these checks count it: the quickstart's own now also plays
    # sampled episodes before training (tests/test_heldout_summary.py checks that).
    "eval.at_start=false",
    "eval.greedy=true",
    "eval.samples_per_task=1",
    "logging.progress=false",
    "logging.wandb=offline",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory, repo):
    """One real run for the module's checks (the run directory, the deployment prompts, the report,
    `pats eval`, the benchmark's held-out test, resume): the quickstart shrunk to 2 steps of 2 tasks,
    4 turns and one greedy evaluation, so the shipped spec's whole path runs once, not once per check."""
    root = tmp_path_factory.mktemp("runs")
    spec = load_spec(repo / "experiments/quickstart.yaml", [*TINY, f"logging.root={root}"])
    prompts: list[tuple[str, bool, str]] = []  # (episode id, view empty, prompt text)
    original = LocalBackend.prompt_parts  # every prompt of both score paths and of generate mode

    def spy(self, ep, admissible):
        system, user = original(self, ep, admissible)
        prompts.append((ep.id, ep.view.empty, f"{system}\n{user}"))
        return system, user

    LocalBackend.prompt_parts = spy
    try:
        run_dir = asyncio.run(train(spec, new_run(spec)))
    finally:
        LocalBackend.prompt_parts = original
    return run_dir, prompts


def test_run_directory_holds_what_it_claims(run):
    run_dir, _ = run
    assert load_spec(run_dir / "spec.yaml").trainer.steps == 2
    events = read_events(run_dir / "events.jsonl")
    ends = [e for e in events if isinstance(e, StepEndEvent)]
    assert [e.step for e in ends] == [0, 1]
    cards = [e for e in events if isinstance(e, CardEvent)]
    assert {c.card.type for c in cards} == {"outcome", "contrast", "failure", "utility"}
    assert len([c for c in cards if c.card.type == "outcome"]) == 4  # 2 tasks x 2 steps
    groups = [g for e in events if isinstance(e, GroupsEvent) for g in e.groups]
    assert len(groups) == 4 and all(len(g.rewards) == 4 for g in groups)
    evals = [e for e in events if isinstance(e, EvalEvent)]
    assert len(evals) == 1 and "eval/success" in evals[0].metrics
    # The response-likelihood gap over the expert pairs of eval.gap_tasks training tasks.
    assert evals[0].metrics["eval/expert_pairs"] > 0
    assert evals[0].metrics["eval/expert_nll"] > 0 and "eval/likelihood_gap" in evals[0].metrics
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "train/success" in m] == [0, 1]
    versions = sorted((run_dir / "scaffold" / "versions").glob("*.json"))
    edits = [e for e in events if isinstance(e, EditEvent)]
    assert len(versions) == len({e.step for e in edits})  # one version per step that edited
    latest = json.loads((run_dir / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == 1 and (run_dir / "checkpoints" / "step_000001" / "policy" / "adapter").is_dir()
    assert list((run_dir / "wandb").glob("offline-run-*"))


def test_deployment_prompt_has_no_scaffold(run):
    run_dir, prompts = run
    texts = [e.edit.text for e in read_events(run_dir / "events.jsonl", EditEvent) if e.edit.op != "DELETE"]
    assert texts, "the review added nothing to check against"
    # Chosen by episode id, not by the view (the property under test): held-out evaluation and the
    # probe rollouts (the first `probes` of each group, s<step>-<task>-<i>) carry no scaffold text.
    probes = load_spec(run_dir / "spec.yaml").probe_count()
    deployed = [p for rid, _, p in prompts if rid.startswith("eval-")]
    probe_prompts = [
        p for rid, _, p in prompts if rid.startswith("s") and int(rid.rsplit("-", 1)[1]) < probes
    ]
    assert len(deployed) >= 2 and probe_prompts
    for prompt in deployed + probe_prompts:
        assert HEADER not in prompt and not any(t in prompt for t in texts)
    # Step 1's scaffolded rollouts show the guidance step 0's review added at type scope.
    step0 = [e.edit for e in read_events(run_dir / "events.jsonl", EditEvent) if e.step == 0]
    typed = [e.text for e in step0 if e.op == "ADD" and e.scope.startswith("type:")]
    scaffolded = [
        p for rid, _, p in prompts if rid.startswith("s1-") and int(rid.rsplit("-", 1)[1]) >= probes
    ]
    assert typed and scaffolded, "step 0 should add type-scoped guidance (every group failed or won)"
    for prompt in scaffolded:
        assert HEADER in prompt and any(t in prompt for t in typed)


def test_empty_view_prompt_is_byte_identical_to_the_plain_prompt(repo):
    from types import SimpleNamespace

    from pats.envs.prompting import instructions, render_prompt
    from pats.episode import Episode
    from pats.models import load_tokenizer
    from pats.protocols import StepResult
    from pats.types import EMPTY_VIEW, ScaffoldView, Task

    spec = load_spec(repo / "experiments/quickstart.yaml")
    tokenizer = load_tokenizer(spec.policy.model)

    def chat(system, user):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    backend = LocalBackend(spec, make_env=None, policy=SimpleNamespace(chat_ids=chat))
    state = StepResult(
        observation="You are in the kitchen.",
        admissible=("look around", "take apple"),
        task_description="Tidy up the house.",
    )
    task = Task(id="t", type="twc", split="train", env="twx")
    history = [("look around", "You see a fridge.")]
    plain = render_prompt(
        instructions("twx", "score"),
        state.task_description,
        history,
        state.observation,
        list(state.admissible),
        spec.environment.window,
    )
    bare = Episode("e", task, EMPTY_VIEW, state=state, history=history)
    assert backend.prompt_ids(bare, list(state.admissible)) == chat(plain.system, plain.user)
    view = ScaffoldView(version="v1", text="Guidance: take apple first.", tokens=7)
    guided = backend.prompt_ids(
        Episode("e", task, view, state=state, history=history), list(state.admissible)
    )
    assert guided != chat(plain.system, plain.user) and "Guidance: take apple first." in guided


def test_report_writes_plots(run):
    run_dir, _ = run
    proc = subprocess.run(
        [sys.executable, "-m", "pats", "report", str(run_dir)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("success.png", "scaffold.png", "edits.png", "prompt_tokens.png", "summary.md"):
        assert (run_dir / "report" / name).stat().st_size > 0
    assert "| train/success |" in (run_dir / "report" / "summary.md").read_text()


def test_generate_mode_episodes_train_on_the_policy_tokens_only(repo):
    """Free-text actions: parsed against the admissible ones, invalid ones kept as invalid turns,
    and every turn with output becomes a TrainItem whose mask covers only the response."""
    from pats.testing.engine import play_group

    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["policy.action=generate", "policy.max_new_tokens=8", "environment.max_turns=2"],
    )
    played = play_group(spec)
    rollouts = played.group.rollouts
    assert len(rollouts) == 2 and all(1 <= len(r.turns) <= 2 for r in rollouts)
    for r in rollouts:
        for turn in r.turns:
            assert 0 < turn.response_tokens <= 8
            assert turn.valid or turn.invalid_reason, "an invalid action must say why"
        items = played.training[r.id]
        assert len(items) == len(r.turns)
        item = played.backend.train_item(items[0], advantage=1.0, weight=0.5)
        prompt, response = items[0].prompt, items[0].response
        assert item.input_ids == tuple(prompt) + tuple(response)
        assert sum(item.loss_mask) == len(response) and item.loss_mask[: len(prompt)] == (0,) * len(prompt)


def test_eval_command_evaluates_the_latest_checkpoint(run):
    from pats.engine.evaluate import evaluate_run

    run_dir, _ = run
    metrics = evaluate_run(run_dir, split="eval", num_tasks=1, with_scaffold=True)
    assert metrics["eval/tasks"] == 1.0 and metrics["eval/checkpoint_step"] == 1.0
    assert 0.0 <= metrics["eval/success"] <= 1.0 and "eval_with_scaffold/success" in metrics
    saved = json.loads((run_dir / "report" / "eval_eval.json").read_text())
    assert saved == metrics


def test_the_benchmarks_held_out_test_is_pats_eval_kept_per_task(run, repo, tmp_path):
    """bench/common.py `heldout` plays pats' own held-out evaluation (play_heldout): the same
    episodes as `pats eval` on the same tasks, in the cell files' per-task format."""
    from pats.engine.evaluate import evaluate_run

    sys.path.insert(0, str(repo))  # the checkout, for bench.*
    from bench import common

    run_dir, _ = run
    metrics = evaluate_run(run_dir, split="eval", num_tasks=2)
    held = common.heldout(tmp_path / "heldout.json", 2, run_dir, chunk=2)  # chunk: tasks_per_step
    assert held["checkpoint_step"] == 1 and len(held["tasks"]) == metrics["eval/tasks"] == 2
    assert sum(held["success"]) / len(held["success"]) == pytest.approx(metrics["eval/success"])
    assert sum(held["reward"]) / len(held["reward"]) == pytest.approx(metrics["eval/reward"])
    assert json.loads((tmp_path / "heldout.json").read_text()) == held  # cached for the next call
    assert common.heldout_record(held)["episodes"] == len(held["tasks"])


def test_resume_redoes_steps_after_the_checkpoint_without_duplicates(run, tmp_path):
    """Guards `resume` from a checkpoint older than the log: the steps after it are redone (step 1
    trains again) and the events, metrics and scaffold versions hold each step once. On a copy of
    the module's run, so it pays for one step, not for a run."""
    import shutil

    from pats.engine.run import resume

    run_dir, _ = run
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    # Pretend the run died after step 0's checkpoint: latest.json still points at step 0.
    step0 = json.loads((copy / "checkpoints" / "step_000000" / "state.json").read_text())
    step0["path"] = str(copy / "checkpoints" / "step_000000")
    (copy / "checkpoints" / "latest.json").write_text(json.dumps(step0))
    versions_at_step0 = step0["scaffold_version"]
    resume(copy)
    events = read_events(copy / "events.jsonl")
    assert [e.step for e in events if isinstance(e, StepEndEvent)] == [0, 1]
    assert sorted({e.step for e in events if isinstance(e, CardEvent)}) == [0, 1]
    metric_steps = [json.loads(x)["step"] for x in (copy / "metrics.jsonl").read_text().splitlines()]
    assert metric_steps.count(0) == 1 and metric_steps.count(1) == 2  # step 1 + its evaluation
    numbers = sorted(int(p.stem) for p in (copy / "scaffold" / "versions").glob("*.json"))
    assert numbers == list(range(1, len(numbers) + 1)) and numbers[-1] >= versions_at_step0
    assert json.loads((copy / "checkpoints" / "latest.json").read_text())["step"] == 1
