"""The reviser benchmark's sense columns: does an accepted edit set change what the policy does?

    python bench/studies/reviser_sense.py                         # the committed LLM results, paired with rules
    python bench/studies/reviser_sense.py vllm-embedded-uncompiled-structured_on --tasks 1 --episodes 2
    python bench/studies/reviser_sense.py --only twx              # bundles whose name contains "twx"

For every row of a reviser result (bench/results/reviser/<label>.json, written by bench/reviser.py)
whose edit set the review's check accepted (`set_valid`), the bundle's scaffold is built twice in a
`ScaffoldStore`: before (the bundle's entries, as the review saw them) and after (the store's own
`apply` of the answered edits, as the review applies an accepted set). On up to `--tasks` of the
bundle's own tasks (those its cards of the reviewed type name), the policy of the bundle's run (the
spec its source names, with the bundle's scaffold settings; the embedded SmolLM2-135M by default)
plays `--episodes` sampled episodes per task with each scaffold pinned and rendered into the prompt
as training renders it (`LocalBackend.play`). Episode k of a task has its own seed (`episode_seed`):
the sampler is reseeded to it before that episode, before and after alike, so every pair shares
its random stream until the scaffold makes the policy act differently (common random numbers).
Per set: success before and after, the paired change, prompt tokens per turn before and after, the
view tokens, and whether the set changed any played task's view at all. Per result file: the change
over its sets with the hierarchical paired bootstrap of pats.stats (sets, then tasks within a set).

Pairwise: the rules reviser's result (`--rules`, default rules.json) is replayed first; an LLM set
is then compared with the rules set of the same bundle on the same tasks and seeds (both share the
"before" episodes), as the LLM's success after minus the rules' success after.

Episodes are cached by (run settings, task, rendered view, seed) in runs/reviser-sense/ (identical
views are played once: a bundle's "before" serves every result file, an empty set replays nothing
new); each file's rows go to bench/results/reviser/sense-<label>.json as they finish. A valid set
that could not be replayed is still a row, with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import REPO, RESULTS, write_result  # noqa: E402
from pats.protocols import TokenCounter  # noqa: E402
from pats.reviser.bundles import SHIPPED, ReviserBundle, load  # noqa: E402
from pats.reviser.score import BundleScore  # noqa: E402
from pats.scaffold import ScaffoldStore, content_hash  # noqa: E402
from pats.stats import hierarchical_difference  # noqa: E402
from pats.types import Edit, Record, ScaffoldVersion, ScaffoldView, Task  # noqa: E402

OUT = RESULTS / "reviser"
CACHE = REPO / "runs" / "reviser-sense"
LLM_RESULTS = (
    "vllm-embedded-uncompiled-structured_on",
    "vllm-embedded-structured_on-compiled",
    "vllm-embedded-compiled-delete-demo-structured_on",
    "vllm-embedded-citations-uncompiled-structured_on",
)
# A bundle recorded as "pats run: <run name>" names no spec file: its environment's shipped spec.
SPECS = {
    "twx": "experiments/quickstart.yaml",
    "alfworld": "experiments/alfworld/local.yaml",
    "search_qa": "experiments/search_qa/pats.yaml",
}


class Episode(Record):
    """One played episode, as the sense columns count it."""

    task: str
    seed: int
    success: float
    reward: float
    turns: int
    prompt_tokens: int  # summed over its turns


class Pair(Record):
    """Episode k of a task, played with the scaffold before and after the set, on one seed."""

    task: str
    k: int
    seed: int
    before: Episode
    after: Episode


# (task, rendered view, seed) -> the episode: the real one plays the policy, a test's is scripted.
Play = Callable[[Task, ScaffoldView, int], Awaitable[Episode]]


def episode_seed(seed: int, task_id: str, k: int) -> int:
    """Episode k of a task: one seed, whichever scaffold it is played with."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{task_id}:{k}".encode()).digest()[:4], "big")


def bundle_tasks(bundle: ReviserBundle, all_tasks: Sequence[Task], n: int) -> list[Task]:
    """The first `n` tasks (by id) that the bundle's cards of the reviewed type name."""
    ids = sorted({c.task_id for c in bundle.cards if c.task_type == bundle.task_type})
    by_id = {t.id: t for t in all_tasks}
    missing = [i for i in ids[:n] if i not in by_id]
    if missing:
        raise LookupError(f"tasks not in the environment's train split: {', '.join(missing)}")
    return [by_id[i] for i in ids[:n]]


def scaffold_store(
    bundle: ReviserBundle, edits: Sequence[Edit], count: TokenCounter
) -> tuple[ScaffoldStore, int]:
    """A store whose version 1 holds the bundle's entries (ids as the run gave them), with `edits`
    applied by the store's own `apply` (EditError if it refuses them); and the number of the version
    before the set."""
    with tempfile.TemporaryDirectory() as tmp:
        if bundle.entries:
            before = ScaffoldVersion(
                number=1, hash=content_hash(bundle.entries), step=bundle.step, parent=content_hash(()),
                entries=bundle.entries,
            )  # fmt: skip
            (Path(tmp) / "versions").mkdir()
            (Path(tmp) / "versions" / "000001.json").write_text(before.model_dump_json(), encoding="utf-8")
        store = ScaffoldStore.open(Path(tmp), count, bundle.scaffold.budget.view_tokens)
        number = store.current.number
        store.apply(edits, bundle.step)
    return store, number


async def replay(
    store: ScaffoldStore, before: int, tasks: Sequence[Task], episodes: int, seed: int, play: Play
) -> list[Pair]:
    """Each task's episodes 0..episodes-1 with the view of version `before` and the current one."""
    pairs = []
    for task in tasks:
        views = store.pin(task, before), store.pin(task)
        for k in range(episodes):
            s = episode_seed(seed, task.id, k)
            pairs.append(Pair(task=task.id, k=k, seed=s, before=await play(task, views[0], s),
                              after=await play(task, views[1], s)))  # fmt: skip
    return pairs


def by_task(pairs: Sequence[Pair], side: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for p in pairs:
        out.setdefault(p.task, []).append(getattr(p, side).success)
    return out


def per_turn(episodes: Sequence[Episode]) -> float:
    return sum(e.prompt_tokens for e in episodes) / max(sum(e.turns for e in episodes), 1)


def set_columns(pairs: Sequence[Pair]) -> dict:
    """A set's sense columns from its paired episodes."""
    n = len(pairs)
    before, after = [p.before for p in pairs], [p.after for p in pairs]
    return {
        "episodes": n,
        "success_before": sum(e.success for e in before) / n,
        "success_after": sum(e.success for e in after) / n,
        "change": sum(p.after.success - p.before.success for p in pairs) / n,
        "pairs_better": sum(p.after.success > p.before.success for p in pairs),
        "pairs_worse": sum(p.after.success < p.before.success for p in pairs),
        "prompt_tokens_per_turn_before": round(per_turn(before), 1),
        "prompt_tokens_per_turn_after": round(per_turn(after), 1),
    }


def versus(pairs: Sequence[Pair], rules: Sequence[Pair] | None) -> dict:
    """This set's success after minus the rules set's after, episode by episode (same task, seed
    and "before" episode); `rules_after` lists the rules' outcomes in the order of `pairs`."""
    if rules is None:
        return {"compared": False, "reason": "the rules result has no replayed set for this bundle"}
    theirs = {(p.task, p.seed): p for p in rules}
    if any((p.task, p.seed) not in theirs or theirs[(p.task, p.seed)].before != p.before for p in pairs):
        return {"compared": False, "reason": "the rules set was not replayed on the same tasks and seeds"}
    n = len(pairs)
    rules_after = [theirs[(p.task, p.seed)].after.success for p in pairs]
    return {
        "compared": True,
        "episodes": n,
        "rules_change": sum(r - p.before.success for r, p in zip(rules_after, pairs, strict=True)) / n,
        "difference": sum(p.after.success - r for r, p in zip(rules_after, pairs, strict=True)) / n,
        "pairs_better": sum(p.after.success > r for r, p in zip(rules_after, pairs, strict=True)),
        "pairs_worse": sum(p.after.success < r for r, p in zip(rules_after, pairs, strict=True)),
        "rules_after": rules_after,
    }


def summary(rows: Sequence[dict]) -> dict:
    """Over a file's valid sets: how many were replayed, the mean change with its interval (sets, then
    tasks within a set, resampled; each pair kept whole), and the same against the rules."""
    done = [r for r in rows if r["replayed"]]
    out: dict = {"valid_sets": len(rows), "replayed": len(done), "not_replayed": len(rows) - len(done)}
    if not done:
        return out
    pairs = {i: [Pair.model_validate(p) for p in r["pairs"]] for i, r in enumerate(done)}
    after = {i: by_task(p, "after") for i, p in pairs.items()}
    before = {i: by_task(p, "before") for i, p in pairs.items()}
    change = hierarchical_difference(after, before).interval
    flat = [p for ps in pairs.values() for p in ps]
    out.update(
        episodes=len(flat),
        views_changed=sum(r["views_changed"] > 0 for r in done),
        success_before=sum(p.before.success for p in flat) / len(flat),
        success_after=sum(p.after.success for p in flat) / len(flat),
        change=change.estimate,
        change_interval=[change.lo, change.hi],
        prompt_tokens_per_turn_before=round(per_turn([p.before for p in flat]), 1),
        prompt_tokens_per_turn_after=round(per_turn([p.after for p in flat]), 1),
    )
    compared = [(i, r) for i, r in enumerate(done) if r.get("vs_rules", {}).get("compared")]
    if compared:
        rules_after: dict[int, dict[str, list[float]]] = {}
        for i, r in compared:
            rules_after[i] = {}
            for p, success in zip(pairs[i], r["vs_rules"]["rules_after"], strict=True):
                rules_after[i].setdefault(p.task, []).append(success)
        diff = hierarchical_difference({i: after[i] for i, _ in compared}, rules_after).interval
        out["vs_rules"] = {"sets": len(compared), "difference": diff.estimate, "interval": [diff.lo, diff.hi]}
    return out


# -- the real player --------------------------------------------------------------------------------


def bundle_spec(bundle: ReviserBundle, threads: int | None = None):
    """The spec of the bundle's run as its source names it (file and overrides; a source that names
    only the run gets its environment's shipped spec), with the bundle's scaffold settings."""
    from pats.spec import load_spec

    words = shlex.split(
        bundle.source.split(":", 1)[1] if bundle.source.startswith("walkthrough") else bundle.source
    )
    files = [w for w in words if w.endswith(".yaml")]
    spec = load_spec(
        REPO / (files[0] if files else SPECS[bundle.environment]), [w for w in words if "=" in w]
    )
    if spec.policy.model != bundle.policy_model:
        raise ValueError(f"the spec's policy is {spec.policy.model}, the bundle's {bundle.policy_model}")
    trainer = spec.trainer.model_copy(update={"threads": threads}) if threads else spec.trainer
    return spec.model_copy(update={"scaffold": bundle.scaffold, "trainer": trainer})


class Player:
    """The spec's policy on its environment (`LocalBackend.play`, sampled), one episode at a time with
    the sampler reseeded to the episode's seed; episodes cached on disk by everything that shapes them."""

    def __init__(self, spec, cache: Path, cached_only: str = ""):
        from pats.backends.local.backend import LocalBackend
        from pats.engine.run import check_policy_inputs, make_env_factory

        check_policy_inputs(spec)
        self.spec, self.cached_only = spec, cached_only
        make_env = make_env_factory(spec)
        self.env = make_env()
        self.tasks = self.env.tasks("train")  # a bundle's cards come from its run's training tasks
        self.backend: LocalBackend | None = None
        self.make = lambda: LocalBackend(spec, make_env)
        settings = json.dumps(
            [spec.environment.model_dump(mode="json"), spec.policy.model_dump(mode="json"),
             spec.scaffold.placement, spec.scaffold.plan_view], sort_keys=True,
        )  # fmt: skip
        self.key = hashlib.sha256(settings.encode()).hexdigest()[:12]
        self.file = cache / f"{self.key}.jsonl"
        self.done: dict[str, Episode] = {}
        if self.file.is_file():
            for line in self.file.read_text(encoding="utf-8").splitlines():
                item = json.loads(line)
                self.done[item["key"]] = Episode.model_validate(item["episode"])

    async def __call__(self, task: Task, view: ScaffoldView, seed: int) -> Episode:
        key = hashlib.sha256(json.dumps([task.id, view.text, seed]).encode()).hexdigest()
        if key in self.done:
            return self.done[key]
        if self.cached_only:  # --cached-only: a set with an episode not played yet says why
            raise Skipped(self.cached_only)
        if self.backend is None:  # the model loads at the first episode not in the cache
            self.backend = self.make()
            self.backend.envs.append(self.env)
        self.backend.policy.generator.manual_seed(seed)
        seats = await self.backend.play([(f"sense-{task.id}-{seed}", task, view)], greedy=False)
        r = seats[0].episode.record(scaffolded=not view.empty)
        if r.error:
            raise RuntimeError(f"{task.id}: the episode failed: {r.error}")
        episode = Episode(task=task.id, seed=seed, success=float(r.success), reward=r.reward,
                          turns=len(r.turns), prompt_tokens=r.prompt_tokens)  # fmt: skip
        self.done[key] = episode
        self.file.parent.mkdir(parents=True, exist_ok=True)
        with self.file.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "episode": episode.model_dump(mode="json")}) + "\n")
        return episode

    async def close(self) -> None:
        if self.backend is not None:
            await self.backend.close()  # its environments, self.env among them
        else:
            await self.env.close()


async def sense_row(
    bundle: ReviserBundle, score: BundleScore, tasks: Sequence[Task], episodes: int, args, play: Play,
    count: TokenCounter, compare: bool, rules: Sequence[Pair] | None,
) -> dict:  # fmt: skip
    """One valid set's row: replayed (its columns and pairs) or not (and why)."""
    head = {"bundle": bundle.name, "environment": bundle.environment, "mode": score.mode,
            "ops": list(score.ops), "edits": len(score.edits)}  # fmt: skip
    store, before = scaffold_store(bundle, score.edits, count)
    started = time.monotonic()
    pairs = await replay(store, before, tasks, episodes, args.seed, play)
    views = [(store.pin(t, before), store.pin(t)) for t in tasks]
    row = {
        **head,
        "replayed": True,
        "tasks": [t.id for t in tasks],
        "views_changed": sum(b.text != a.text for b, a in views),
        "view_tokens_before": [b.tokens for b, _ in views],
        "view_tokens_after": [a.tokens for _, a in views],
        **set_columns(pairs),
        "seconds": round(time.monotonic() - started, 1),
        "pairs": [p.model_dump(mode="json") for p in pairs],
    }
    if compare:
        row["vs_rules"] = versus(pairs, rules)
    return row


def table(label: str, rows: Sequence[dict]) -> str:
    lines = [f"== sense-{label}", f"{'bundle':36} {'mode':8} {'ops':14} {'views':>5} {'before':>6} {'after':>6} "
             f"{'change':>7} {'tok/turn':>13} {'vs rules':>8}"]  # fmt: skip
    for r in rows:
        ops = ",".join(r["ops"]) or "(empty)"
        if not r["replayed"]:
            lines.append(f"{r['bundle'][:36]:36} {r['mode']:8} {ops[:14]:14} not replayed: {r['reason']}")
            continue
        vs = r.get("vs_rules", {})
        lines.append(
            f"{r['bundle'][:36]:36} {r['mode']:8} {ops[:14]:14} {r['views_changed']:>5} {r['success_before']:6.3f} "
            f"{r['success_after']:6.3f} {r['change']:+7.3f} "
            f"{r['prompt_tokens_per_turn_before']:6.0f}>{r['prompt_tokens_per_turn_after']:<6.0f} "
            f"{format(vs['difference'], '+8.3f') if vs.get('compared') else '-':>8}"
        )
    s = summary(rows)
    line = f"valid sets {s['valid_sets']}, replayed {s['replayed']}"
    if s["replayed"]:
        lo, hi = s["change_interval"]
        line += (f", success {s['success_before']:.3f} -> {s['success_after']:.3f}, change {s['change']:+.3f} "
                 f"[{lo:+.3f}, {hi:+.3f}] over {s['episodes']} paired episodes, prompt tokens per turn "
                 f"{s['prompt_tokens_per_turn_before']:.0f} -> {s['prompt_tokens_per_turn_after']:.0f}")  # fmt: skip
        if "vs_rules" in s:
            v = s["vs_rules"]
            line += f"; against rules {v['difference']:+.3f} [{v['interval'][0]:+.3f}, {v['interval'][1]:+.3f}] ({v['sets']} sets)"
    return "\n".join([*lines, line])


async def run_file(
    label: str, bundles: dict[str, ReviserBundle], args, players: dict, rules: dict[str, list[Pair]] | None
) -> dict[str, list[Pair]]:
    """Every valid set of one result file, written to sense-<label>.json after each row; returns the
    pairs of each replayed bundle (the rules' are what the LLM rows are compared with)."""
    from pats.models import token_counter

    result = json.loads((OUT / f"{label}.json").read_text(encoding="utf-8"))
    scores = [BundleScore.model_validate(r) for r in result["rows"]]
    valid = [s for s in scores if s.set_valid and (not args.only or any(o in s.bundle for o in args.only))]
    meta = {
        "label": f"sense-{label}", "result": label, "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "tasks_per_set": args.tasks,
        "episodes_per_task": args.episodes,
        "scale": {env: f"{t}x{e}" for env, (t, e) in args.scale.items()}, "seed": args.seed, "paired_with": args.rules if rules is not None else None,
        "sets_refused": sum(not s.set_valid for s in scores),
    }  # fmt: skip
    rows: list[dict] = []
    played: dict[str, list[Pair]] = {}
    for n, score in enumerate(valid, 1):
        bundle = bundles[score.bundle]
        print(f"[{label} {n}/{len(valid)}] {bundle.name}: {','.join(score.ops) or 'empty set'}", flush=True)
        try:
            skip = [r for k, r in args.skip.items() if k in (bundle.environment, bundle.name)]
            if skip:
                raise Skipped(skip[0])
            spec = bundle_spec(bundle, args.threads)
            player = players.get(id_of(spec))
            if player is None:
                player = players[id_of(spec)] = Player(spec, CACHE, args.cached_only)
            n_tasks, episodes = args.scale.get(bundle.environment, (args.tasks, args.episodes))
            tasks = bundle_tasks(bundle, player.tasks, n_tasks)
            row = await sense_row(bundle, score, tasks, episodes, args, player, token_counter(bundle.policy_model),
                                  rules is not None, (rules or {}).get(bundle.name))  # fmt: skip
            played[bundle.name] = [Pair.model_validate(p) for p in row["pairs"]]
        except Exception as err:  # a row says why, the others still run
            row = {"bundle": bundle.name, "environment": bundle.environment, "mode": score.mode,
                   "ops": list(score.ops), "edits": len(score.edits), "replayed": False,
                   "reason": str(err) if isinstance(err, Skipped) else f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}  # fmt: skip
        rows.append(row)
        print(table(label, rows).splitlines()[-2], flush=True)
        write_result(
            f"sense-{label}",
            {**meta, "complete": n == len(valid), "summary": summary(rows), "rows": rows},
            OUT,
        )
    if not valid:
        write_result(
            f"sense-{label}", {**meta, "complete": True, "summary": summary(rows), "rows": rows}, OUT
        )
    print(table(label, rows), flush=True)
    return played


class Skipped(Exception):
    """An environment or bundle left out by `--skip`, with the reason given there."""


def skip_reasons(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        env, sep, reason = item.partition("=")
        if not sep or not reason.strip():
            raise SystemExit(f"--skip {item!r}: write ENVIRONMENT=REASON (the reason goes into each row)")
        out[env] = reason.strip()
    return out


def scales(items: Sequence[str]) -> dict[str, tuple[int, int]]:
    out = {}
    for item in items:
        env, _, scale = item.partition("=")
        tasks, x, episodes = scale.partition("x")
        if not (
            env and x and tasks.isdigit() and episodes.isdigit() and int(tasks) > 0 and int(episodes) > 0
        ):
            raise SystemExit(f"--scale {item!r}: write ENVIRONMENT=TASKSxEPISODES, e.g. alfworld=1x2")
        out[env] = (int(tasks), int(episodes))
    return out


def id_of(spec) -> str:
    return json.dumps([spec.environment.model_dump(mode="json"), spec.policy.model_dump(mode="json"),
                       spec.scaffold.placement, spec.scaffold.plan_view], sort_keys=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="*", default=list(LLM_RESULTS),
                   help="result labels under bench/results/reviser/ (default: the committed LLM rows)")  # fmt: skip
    p.add_argument("--rules", default="rules", help="the result the others are compared with ('' for none)")
    p.add_argument("--tasks", type=int, default=2, help="tasks per set, from those the bundle's cards name")
    p.add_argument("--episodes", type=int, default=4, help="paired episodes per task")
    p.add_argument("--seed", type=int, default=0, help="the episodes' seeds derive from it")
    p.add_argument("--only", nargs="*", default=[], help="keep bundles whose name contains one of these")
    p.add_argument("--bundles", type=Path, default=SHIPPED, help="folder of bundle JSON files")
    p.add_argument("--cached-only", default="", metavar="REASON",
                   help="play nothing new: a set whose episodes are not all in the cache is reported not replayed, with REASON")  # fmt: skip
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (trainer.threads; 1 keeps a shared machine's other jobs going)")  # fmt: skip
    p.add_argument("--skip", nargs="*", default=[], metavar="ENV=REASON",
                   help="report an environment's (or a bundle's) sets as not replayed, with REASON (e.g. measured too slow)")  # fmt: skip
    p.add_argument("--scale", nargs="*", default=[], metavar="ENV=TxE",
                   help="tasks and episodes for one environment's sets instead of --tasks and --episodes (e.g. alfworld=1x2: its episodes take minutes)")  # fmt: skip
    args = p.parse_args(argv)
    args.skip = skip_reasons(args.skip)
    args.scale = scales(args.scale)

    bundles = {b.name: b for b in load(args.bundles)}
    asyncio.run(run(args, bundles))
    return 0


async def run(args, bundles: dict[str, ReviserBundle]) -> None:
    players: dict = {}  # one per run settings: its model loads once
    try:
        rules = await run_file(args.rules, bundles, args, players, None) if args.rules else None
        for label in args.results:
            if label != args.rules:
                await run_file(label, bundles, args, players, rules)
    finally:
        for player in players.values():
            await player.close()


if __name__ == "__main__":
    raise SystemExit(main())
