"""`pats warm-start SPEC`: behaviour cloning from expert plans, before any RL, so the policy reads guidance.

Made the way instruct models are: supervised examples of following instructions. The `warm_start`
section names an environment of another game family than the run's (twx coin or cookingworld for a
twc run; the spec refuses the run's own game). Its first `num_tasks` training-fold tasks have their
expert plans replayed (`reliance.expert_pairs`: only replays that win), giving one example per expert
decision. The tasks are split once, with the spec's seed: `guided_fraction` of them carry the task's own
expert plan as a task-scoped scaffold view (the text the rules reviser writes from the expert card,
"Steps to try: ..."), placed where `scaffold.placement` puts it, every turn; the others carry none. So
the policy learns to follow guidance when it is there, not to play one game.

Guidance can be made necessary (`necessary_fraction`, issue 34 item 4): in that share of the guided
examples the target is not the expert's action but another admissible one, drawn with the seed, that
the example's plan names as its next step (the plan is the expert's with that one step swapped). The
game state cannot predict such a target; only reading the guidance can. A target is never an action
the episode has already taken (the progress and next views would count it as done), and only steps
within the plan's shown length are swapped. The report adds the NLL of those examples' own targets,
before and after, beside the uniform guess's (log of the number of admissible actions).

Training is the local backend's own update (training.run_update) with every advantage 1, one
optimizer step per `batch_size` examples and one epoch per call: the PPO ratio is exactly 1 (no
clipping), so the gradient is that of the mean negative log-likelihood of the expert's choice. Score
mode: a `ChoiceItem`, cross-entropy over the admissible actions (the distribution the policy acts
from); generate mode: a `TrainItem`, the tokens of `<action>A</action>` and the end token. LoRA as
`policy.lora`, from `policy.model` (never from `policy.init_adapter`); the local trainer's other
settings (threads, max_grad_norm, micro_batch, prefix sharing) apply.

`<logging.root>/<name>/warm_start/` gets: `adapter/` (a PEFT adapter: give it to later specs as
`policy.init_adapter`), `examples.jsonl` (one decision a line, with its NLL before and after where
measured), `report.json` (examples, guided share, the expert choice's mean NLL with and without
guidance and on the guided examples, before and after, over the decisions of the first `report_tasks`
tasks; updates, seconds), `spec.yaml` (the resolved spec it ran), and `sft.parquet` (the same episodes
as verl's multi-turn SFT dataset reads them: a `messages` column, one growing chat per episode as pats'
verl agent loop renders it).

Departures: the guided/unguided split is per task (an episode is guided throughout), so the guided
share of examples is close to, not exactly, `guided_fraction`; examples are expert decisions only
(no corrective data, as DAgger would add); a necessary example is one decision, not an episode (the
game goes on from the expert's action), so `sft.parquet` holds the expert episodes only.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from pats.errors import PrerequisiteError, SpecError, install_hint
from pats.fileio import write_atomic
from pats.scaffold.plans import changes_nothing
from pats.spec import ExperimentSpec, spec_to_yaml
from pats.types import EMPTY_VIEW, ScaffoldEntry, ScaffoldView, Task

FOLDER = "warm_start"


@dataclass(frozen=True)
class Example:
    """One expert decision as the policy sees it: the prompt parts, the admissible actions, the action."""

    task_id: str
    turn: int
    guided: bool
    system: str
    user: str
    admissible: tuple[str, ...]
    action: str  # the target: the expert's action, or the one only the guidance names (necessary)
    necessary: bool = False


def warm_start_dir(spec: ExperimentSpec) -> Path:
    return Path(spec.logging.root) / spec.name / FOLDER


def cloning_spec(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec the warm start plays and trains under: the warm start's environment, a local trainer at
    its lr with one optimizer pass per batch, no KL and no init adapter; policy and scaffold as given."""
    ws = spec.warm_start
    if ws is None:
        raise SpecError("the spec has no warm_start section; add one (docs/running.md, Warm start)")
    data = spec.model_dump(mode="json")
    trainer = data["trainer"] if spec.trainer.backend == "local" else {"backend": "local"}
    data |= {
        "environment": data["warm_start"]["environment"],
        "trainer": {**trainer, "lr": ws.lr, "epochs": 1, "kl_coef": 0.0},
        "warm_start": None,
    }
    data["policy"]["init_adapter"] = None
    if spec.trainer.backend == "verl":  # verl generates; the local backend reads the same format
        data["policy"]["action"] = "generate"
    return ExperimentSpec.model_validate(data)


def plan_view(task: Task, plan: Sequence[str], count_tokens, view_tokens: int) -> ScaffoldView:
    """The task's own expert plan as a task-scoped scaffold view (bench/studies/sensitivity.py's `expert`)."""
    from pats.reviser.rules import key_actions
    from pats.scaffold.render import render_view

    text = "Steps to try: " + key_actions(plan)
    entry = ScaffoldEntry(id="expert-plan", kind="plan", scope=f"task:{task.id}", text=text,
                          tokens=count_tokens(text), created_step=0, updated_step=0)  # fmt: skip
    return render_view([entry], task, count_tokens, view_tokens, "warm-start")


# Decisions past this many steps are never targets: the committed warm starts were built when plans
# were cut at 16 steps, so their guidance showed no later step. Their examples are no longer rebuilt
# exactly (the line now follows the game's state, and targets skip plan steps and observations since
# 2026-12-06); the adapters are committed, and the grids load them rather than rebuild them.
NECESSARY_WITHIN = 16


def necessary_targets(pairs: Sequence, guided: set[str], fraction: float, seed: int) -> dict[int, str]:
    """{index of a pair: its target} for round(fraction x eligible) of the guided tasks' decisions,
    drawn once with the seed. Eligible: a decision within the plan's shown length with an admissible
    action that is no step of the expert's plan, no action the episode has taken, and none that only
    shows something; its target is one of those. The swapped plan's "Next action" line then names the
    target: an observation step (look, inventory) is never named (pats.scaffold.plans.next_step), and a
    target that repeats a plan step would fold into it (key_actions) or be marked done with it."""
    plans: dict[str, set[str]] = {}
    for p in pairs:
        plans.setdefault(p.task.id, set()).add(p.action)
    eligible = []
    for i, p in enumerate(pairs):
        taken = {action for action, _ in p.history}
        options = sorted(
            a
            for a in p.state.admissible
            if a not in plans[p.task.id] and a not in taken and not changes_nothing(a)
        )
        if p.task.id in guided and len(p.history) < NECESSARY_WITHIN and options:
            eligible.append((i, options))
    rng = random.Random(seed)
    chosen = sorted(rng.sample(eligible, round(fraction * len(eligible))))
    return {i: rng.choice(options) for i, options in chosen}


def guided_tasks(task_ids: Sequence[str], fraction: float, seed: int) -> set[str]:
    """round(fraction x tasks) of the tasks, drawn once with the seed."""
    order = sorted(task_ids)
    random.Random(seed).shuffle(order)
    return set(order[: round(fraction * len(order))])


def response_text(action: str) -> str:
    """An action as generate mode writes it (pats.envs.prompting.OUTPUT_FORMAT)."""
    return f"<action>{action}</action>"


def nlls(policy, examples: Sequence[Example], score: bool) -> list[float]:
    """Each example's NLL of its target (the expert's choice, or a necessary example's), without
    gradients. Score mode: -log of the target's probability in the distribution the policy acts from
    (softmax over the admissible actions at the policy temperature, eval/expert_nll's quantity), all
    examples scored in batched passes; generate mode: the mean token NLL of the target response."""
    from pats.backends.local import grpo
    from pats.backends.local.sharing import right_padded

    if not examples:  # e.g. no necessary example among the measured ones
        return []
    if score:
        split = [policy.chat_split(ex.system, ex.user) for ex in examples]
        chosen = policy.choose_batch(split, [list(ex.admissible) for ex in examples], greedy=True)
        return [-math.log(max(float(probs[ex.admissible.index(ex.action)]), 1e-12))
                for ex, (_, probs) in zip(examples, chosen, strict=True)]  # fmt: skip
    out = []
    with torch.no_grad(), policy.acting_context():
        for it in _items(policy, examples, score=False):
            ids, attention, mask = right_padded([it], 0, policy.pad_id, policy.device)  # (1, T)
            logp = grpo.token_logprobs(policy.model, ids, attention, policy.trainer.logprob_chunk).float()
            m = mask[:, 1:].float()
            out.append(-float((logp * m).sum() / m.sum()))
    return out


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


async def _examples(
    spec: ExperimentSpec, ws, backend, env
) -> tuple[list[Example], list[Example], list[Example], list[dict]]:
    """(training examples, every decision with its task's plan, every decision without guidance: these
    two for the NLL report, the verl SFT rows)."""
    from pats.backends.local.reliance import expert_pairs
    from pats.episode import Episode
    from pats.models import token_counter

    tasks = env.tasks("train")[: ws.num_tasks]
    pairs = await expert_pairs(env, tasks)
    if not pairs:
        raise PrerequisiteError(
            f"no expert plan of the first {len(tasks)} training tasks of warm_start.environment wins when "
            "replayed; check its game parameters and max_turns, or raise warm_start.num_tasks"
        )
    count = token_counter(spec.policy.model)
    plans: dict[str, list[str]] = {}
    for p in pairs:
        plans.setdefault(p.task.id, []).append(p.action)
    guided = guided_tasks(list(plans), ws.guided_fraction, spec.seed)
    budget = spec.scaffold.budget.view_tokens
    views = {p.task.id: plan_view(p.task, plans[p.task.id], count, budget) for p in pairs}
    renamed = necessary_targets(pairs, guided, ws.necessary_fraction, spec.seed)
    score = spec.policy.action == "score"

    def example(i: int, pair, view: ScaffoldView, is_guided: bool, target: str | None = None) -> Example:
        ep = Episode(f"warm-{i}", pair.task, view, state=pair.state, history=list(pair.history))
        acts = list(pair.state.admissible)
        system, user = backend.prompt_parts(ep, acts if score else acts or None)
        turn = len(pair.history)
        return Example(pair.task.id, turn, is_guided, system, user, tuple(acts), target or pair.action,
                       necessary=target is not None)  # fmt: skip

    train, with_plan, without = [], [], []
    for i, p in enumerate(pairs):
        own = p.task.id in guided
        if i in renamed:  # the expert's plan with this decision's step swapped for the target
            t, plan = len(p.history), plans[p.task.id]
            swapped = plan_view(p.task, [*plan[:t], renamed[i], *plan[t + 1 :]], count, budget)
            train.append(example(i, p, swapped, True, renamed[i]))
        else:
            train.append(example(i, p, views[p.task.id] if own else EMPTY_VIEW, own))
        with_plan.append(example(i, p, views[p.task.id], True))
        without.append(example(i, p, EMPTY_VIEW, False))
    chats = _chats(spec, pairs, {t: views[t] if t in guided else EMPTY_VIEW for t in plans})
    return train, with_plan, without, chats


def _chats(spec: ExperimentSpec, pairs, views: dict[str, ScaffoldView]) -> list[dict]:
    """One verl SFT row per expert episode: the chat pats' verl agent loop (pats.backends.verl.loop) builds,
    system (instructions, task, a system-placed plan), then user (observation, a turn-placed plan,
    admissible actions) and assistant (`<action>A</action>`) per turn."""
    from pats.envs.prompting import instructions, render_prompt
    from pats.scaffold import place, with_scaffold

    rules = instructions(spec.environment.kind, "generate")
    rows: dict[str, dict] = {}
    for p in pairs:
        system_view, guidance = place(views[p.task.id], spec.scaffold.placement)
        acts = list(p.state.admissible) or None
        if p.task.id not in rows:
            parts = render_prompt(rules, p.state.task_description, (), p.state.observation, acts, 0, guidance)
            messages = [{"role": "system", "content": with_scaffold(parts.system, system_view)},
                        {"role": "user", "content": parts.user}]  # fmt: skip
            rows[p.task.id] = {
                "task_id": p.task.id,
                "guided": not views[p.task.id].empty,
                "messages": messages,
            }
        else:
            user = render_prompt("", "", (), p.state.observation, acts, 0, guidance).user
            rows[p.task.id]["messages"].append({"role": "user", "content": user})
        rows[p.task.id]["messages"].append({"role": "assistant", "content": response_text(p.action)})
    return list(rows.values())


def _items(policy, examples: Sequence[Example], score: bool) -> list:
    from pats.backends.local.training import TrainItem

    out = []
    for ex in examples:
        prompt = policy.chat_ids(ex.system, ex.user)
        if score:
            out.append(policy.choice_item(prompt, ex.admissible, ex.admissible.index(ex.action), 1.0))
        else:
            ids, mask = policy.action_token_ids(prompt, response_text(ex.action))
            out.append(TrainItem(input_ids=ids, loss_mask=mask, advantage=1.0))
    return out


def _measure(
    policy, train, with_plan, without, score: bool, when: str, measured: Sequence[int]
) -> tuple[dict[str, float], dict[int, float]]:
    """The report's NLLs at `when` (before, after) over the decisions `measured` (indices): without
    guidance, with their task's plan, and on those training examples that carry it; and each measured
    training example's own NLL."""
    w = dict(zip(measured, nlls(policy, [with_plan[i] for i in measured], score), strict=True))
    wo = dict(zip(measured, nlls(policy, [without[i] for i in measured], score), strict=True))
    necessary = [i for i in measured if train[i].necessary]  # their own prompt and target
    own = dict(zip(necessary, nlls(policy, [train[i] for i in necessary], score), strict=True))
    return {
        f"nll_without_{when}": _mean(list(wo.values())),
        f"nll_with_{when}": _mean(list(w.values())),
        f"gap_{when}": _mean(list(wo.values())) - _mean(list(w.values())),
        f"nll_guided_examples_{when}": _mean([w[i] for i in measured if train[i].guided]),
        f"nll_necessary_examples_{when}": _mean(list(own.values())),
    }, {i: own[i] if i in own else w[i] if train[i].guided else wo[i] for i in measured}


async def _run(spec: ExperimentSpec, out: Path) -> dict:
    from pats.backends.local.backend import LocalBackend
    from pats.engine.run import make_env_factory

    start = time.time()
    clone = cloning_spec(spec)
    ws = spec.warm_start
    assert ws is not None, "cloning_spec refuses a spec without one"
    make_env = make_env_factory(clone)
    backend, env = LocalBackend(clone, make_env), make_env()
    try:
        train, with_plan, without, chats = await _examples(clone, ws, backend, env)
    finally:
        await env.close()
    policy, score = backend.policy, clone.policy.action == "score"
    items = _items(policy, train, score)
    report: dict = {"examples": len(train), "tasks": len({ex.task_id for ex in train}),
                    "guided_share": _mean([float(ex.guided) for ex in train]),
                    "necessary_share": _mean([float(ex.necessary) for ex in train]),
                    "action": clone.policy.action, "placement": clone.scaffold.placement,
                    "plan_view": clone.scaffold.plan_view}  # fmt: skip
    tasks = list(dict.fromkeys(ex.task_id for ex in train))[: ws.report_tasks]
    measured = [i for i, ex in enumerate(train) if ex.task_id in tasks]  # the NLLs cost ~ an epoch each
    report["measured_examples"] = len(measured)
    # The uniform guess's NLL on the measured necessary examples: what reading has to beat.
    report["nll_necessary_uniform"] = _mean([math.log(len(train[i].admissible)) for i in measured
                                             if train[i].necessary])  # fmt: skip

    def say(text: str) -> None:  # progress on stderr, also when it is not a terminal
        print(f"warm start: {text}, {time.time() - start:.0f} s", file=sys.stderr, flush=True)

    say(
        f"{len(train)} examples from {report['tasks']} tasks ({report['guided_share']:.0%} guided, "
        f"{report['necessary_share']:.0%} with a target only the guidance names)"
    )
    nll, before = _measure(policy, train, with_plan, without, score, "before", measured)
    report |= nll
    say(f"NLL before: {nll['nll_without_before']:.3f} without guidance, {nll['nll_with_before']:.3f} with")
    order, updates = list(range(len(items))), 0
    rng = random.Random(spec.seed)
    for epoch in range(ws.epochs):
        rng.shuffle(order)
        for i in range(0, len(order), ws.batch_size):
            stats = policy.update([items[j] for j in order[i : i + ws.batch_size]])
            updates += int(stats["steps"])
        say(f"epoch {epoch + 1}/{ws.epochs} done")
    nll, after = _measure(policy, train, with_plan, without, score, "after", measured)
    report |= nll
    say(f"NLL after: {nll['nll_without_after']:.3f} without guidance, {nll['nll_with_after']:.3f} with")
    report |= {"updates": updates, "seconds": time.time() - start}
    for config in policy.model.peft_config.values():  # the spec's model name, not this machine's cache path
        config.base_model_name_or_path = clone.policy.model
    policy.model.save_pretrained(out / "adapter")
    lines = "".join(
        json.dumps(asdict(ex) | {"nll_before": before.get(i), "nll_after": after.get(i)}) + "\n"
        for i, ex in enumerate(train)
    )
    write_atomic(out / "examples.jsonl", lines)
    write_atomic(out / "spec.yaml", spec_to_yaml(spec))
    report["sft_parquet"] = _write_sft(chats, out / "sft.parquet")
    write_atomic(out / "report.json", json.dumps(report, indent=1) + "\n")
    return report


def _write_sft(rows: list[dict], path: Path) -> str | None:
    """verl's SFT parquet, or None (with a note) where pyarrow is not installed."""
    try:
        from pats.backends.verl.data import write_parquet

        return str(write_parquet(rows, path))
    except ImportError:
        print(f"note: no sft.parquet: it needs pyarrow ({install_hint('verl')})", file=sys.stderr)
        return None


def warm_start(spec: ExperimentSpec) -> tuple[Path, dict]:
    """Run the spec's warm start into `<logging.root>/<name>/warm_start/`; (that folder, the report)."""
    if spec.warm_start is None:
        raise SpecError("the spec has no warm_start section; add one (docs/running.md, Warm start)")
    out = warm_start_dir(spec)
    if (out / "adapter").exists():
        raise SpecError(
            f"{out} already holds a warm start; remove it, or write another name, e.g. name={spec.name}-2"
        )
    out.mkdir(parents=True, exist_ok=True)
    return out, asyncio.run(_run(spec, out))
