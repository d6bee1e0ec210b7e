"""The reviser benchmark's sense columns (bench/studies/reviser_sense.py): an accepted edit set applied by the
store to a committed bundle's entries, its tasks replayed with a scripted player before and after on
paired seeds, the comparison with the rules set, and docs/llm.md's sense table against the committed
results. No model is loaded: tokens are counted by words."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for bench.*

from bench.studies.reviser_sense import (  # noqa: E402
    Episode,
    Pair,
    bundle_spec,
    bundle_tasks,
    episode_seed,
    replay,
    scaffold_store,
    scales,
    sense_row,
    set_columns,
    summary,
    versus,
)
from pats.reviser.bundles import SHIPPED, load  # noqa: E402
from pats.reviser.score import BundleScore  # noqa: E402
from pats.types import AddEdit, DeleteEdit, Task, UpdateEdit  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture(scope="module")
def bundle():
    return load(SHIPPED, ["twx-s1-twc"])[0]  # EXPAND on twc; entries e1 (skill), e2 (a plan), e3 (mistake)


def tasks_of(bundle) -> list[Task]:
    ids = sorted({c.task_id for c in bundle.cards if c.task_type == bundle.task_type})
    return [Task(id=i, type=bundle.task_type, split="train", env="twx") for i in ids]


class Scripted:
    """Wins when the view says WIN; otherwise the seed decides (odd seeds win). Logs every call."""

    def __init__(self):
        self.calls: list[tuple[str, str, int]] = []

    async def __call__(self, task, view, seed) -> Episode:
        self.calls.append((task.id, view.text, seed))
        won = "WIN" in view.text or seed % 2 == 1
        return Episode(task=task.id, seed=seed, success=float(won), reward=float(won), turns=2,
                       prompt_tokens=2 * (100 + view.tokens))  # fmt: skip


def cites(bundle) -> tuple[str, ...]:
    return tuple(c.id for c in bundle.cards if c.task_type == bundle.task_type)[:2]


def test_the_store_applies_the_set_to_the_bundles_entries_by_their_ids(bundle):
    edits = [
        UpdateEdit(entry_id="e1", text="Take the object, then put it in its place.", cites=cites(bundle)),
        DeleteEdit(entry_id="e3", reason="not seen", cites=cites(bundle)),
        AddEdit(kind="mistake", scope="type:twc", text="Do not only look around.", cites=cites(bundle)),
    ]
    store, before = scaffold_store(bundle, edits, words)
    assert [e.text for e in store.version(before).entries] == [e.text for e in bundle.entries]
    after = {e.id: e.text for e in store.current.entries}
    assert after["e1"] == "Take the object, then put it in its place." and "e3" not in after
    assert after["e4"] == "Do not only look around.", "a new entry gets the next id after the bundle's"
    task = tasks_of(bundle)[0]
    assert "How twc games were won" in store.pin(task, before).text
    assert "Take the object" in store.pin(task).text and "How twc games were won" not in store.pin(task).text
    empty, number = scaffold_store(bundle, [], words)
    assert empty.current.number == number, "an empty set leaves the scaffold as it was"


def test_paired_episodes_share_seeds_and_the_change_has_its_sign(bundle):
    add = AddEdit(kind="skill", scope="type:twc", text="WIN by putting things away", cites=cites(bundle))
    store, before = scaffold_store(bundle, [add], words)
    tasks = tasks_of(bundle)[:2]
    play = Scripted()
    pairs = asyncio.run(replay(store, before, tasks, 4, 7, play))
    assert len(pairs) == 8 and [p.k for p in pairs] == [0, 1, 2, 3] * 2
    for p in pairs:  # each pair: the two scaffolds, one seed, the task's k-th
        assert p.seed == episode_seed(7, p.task, p.k) == p.before.seed == p.after.seed
        assert p.before.success <= p.after.success
    seeds = [s for _, _, s in play.calls]
    assert seeds[0::2] == seeds[1::2], "before and after are played on the same seed"
    assert len(set(seeds)) == 8, "every episode has a seed of its own"
    assert ["WIN" in text for _, text, _ in play.calls] == [False, True] * 8, "before, then after"
    cols = set_columns(pairs)
    lost = sum(p.before.success == 0 for p in pairs)  # the even seeds: WIN turns them into wins
    assert cols["success_after"] == 1.0 and cols["change"] == lost / 8 > 0
    assert cols["pairs_better"] == lost and cols["pairs_worse"] == 0
    assert cols["prompt_tokens_per_turn_after"] > cols["prompt_tokens_per_turn_before"]


def test_a_set_that_changes_nothing_the_policy_reads_changes_nothing(bundle):
    # a plan for a task the replay does not play: views equal, pairs equal on every seed
    other = AddEdit(kind="plan", scope="task:twx:twc:train:999", text="WIN here", cites=cites(bundle))
    score = BundleScore(bundle=bundle.name, environment="twx", task_type="twc", mode="EXPAND", parsed=True,
                        set_valid=True, ops=("ADD",), edits=(other,))  # fmt: skip
    args = SimpleNamespace(seed=0)
    row = asyncio.run(sense_row(bundle, score, tasks_of(bundle)[:2], 3, args, Scripted(), words, False, None))
    assert row["replayed"] and row["views_changed"] == 0 and row["episodes"] == 6
    assert row["change"] == 0 and row["pairs_better"] == row["pairs_worse"] == 0
    assert 0 < row["success_before"] == row["success_after"] < 1, "the seeds alone decide, both sides alike"
    assert "vs_rules" not in row


def test_an_environment_can_be_replayed_at_its_own_scale():
    assert scales(["alfworld=1x2", "twx=3x4"]) == {"alfworld": (1, 2), "twx": (3, 4)}
    for bad in ("alfworld", "alfworld=2", "alfworld=0x2", "=1x2", "alfworld=1xtwo"):
        with pytest.raises(SystemExit, match="ENVIRONMENT=TASKSxEPISODES"):
            scales([bad])


def test_against_the_rules_on_the_same_episodes():
    def pair(task, k, before, after):
        ep = lambda won: Episode(task=task, seed=k, success=won, reward=won, turns=1, prompt_tokens=1)  # noqa: E731
        return Pair(task=task, k=k, seed=k, before=ep(before), after=ep(after))

    llm = [pair("a", 0, 0.0, 1.0), pair("a", 1, 0.0, 0.0), pair("b", 2, 1.0, 1.0)]
    rules = [pair("a", 0, 0.0, 0.0), pair("a", 1, 0.0, 1.0), pair("b", 2, 1.0, 0.0)]
    v = versus(llm, rules)
    assert v["compared"] and v["rules_after"] == [0.0, 1.0, 0.0]
    assert v["difference"] == pytest.approx(1 / 3) and v["rules_change"] == pytest.approx(0.0)
    assert (v["pairs_better"], v["pairs_worse"]) == (2, 1)
    shifted = [p.model_copy(update={"seed": p.seed + 1}) for p in rules]
    assert not versus(llm, shifted)["compared"], "other seeds are not the same episodes"
    assert not versus(llm, None)["compared"]
    row = {"replayed": True, "views_changed": 1, "pairs": [p.model_dump() for p in llm], "vs_rules": v}
    s = summary([row, {"replayed": False, "reason": "x"}])
    assert (s["valid_sets"], s["replayed"], s["not_replayed"]) == (2, 1, 1)
    assert s["change"] == pytest.approx(1 / 3) and s["vs_rules"]["difference"] == pytest.approx(1 / 3)
    assert s["change_interval"][0] <= s["change"] <= s["change_interval"][1]


def test_a_bundles_run_spec_and_tasks_come_from_its_source():
    twx, qa = load(SHIPPED, ["twx-s1-twc", "search_qa-s0-popqa"])
    spec = bundle_spec(twx)
    assert spec.environment.game == "twc" and spec.scaffold == twx.scaffold
    with pytest.warns(Warning):  # the source's trainer.backend=local resets that section (a notice)
        qa_spec = bundle_spec(qa)
    assert qa_spec.environment.max_turns == 2 and qa_spec.policy.max_new_tokens == 48
    all_tasks = [Task(id=f"twx:twc:train:{i}", type="twc", split="train", env="twx") for i in range(1000)]
    assert [t.id for t in bundle_tasks(twx, all_tasks, 2)] == ["twx:twc:train:193", "twx:twc:train:218"]
    with pytest.raises(LookupError):
        bundle_tasks(twx, all_tasks[:10], 2)


def test_the_docs_sense_table_matches_the_committed_results():
    """Each row of docs/llm.md's sense table says what its sense-<label>.json holds."""
    doc = (REPO / "docs" / "llm.md").read_text()
    rows = [
        m for line in doc.splitlines() if (m := re.match(r"\| [^|]*\(`(sense-[\w.-]+)`\) \|(.*)\|$", line))
    ]
    assert len(rows) >= 3, "the sense table names its result files"
    for m in rows:
        s = json.loads((REPO / "bench" / "results" / "reviser" / f"{m.group(1)}.json").read_text())["summary"]
        cells = [c.strip() for c in m.group(2).split("|")]
        want = [f"{s['valid_sets']}", f"{s['replayed']}"]
        if s["replayed"]:
            lo, hi = s["change_interval"]
            want += [
                f"{s['views_changed']}",
                f"{s['episodes']}",
                f"{s['success_before']:.3f}",
                f"{s['success_after']:.3f}",
                f"{s['change']:+.3f} [{lo:+.3f}, {hi:+.3f}]",
                f"{s['prompt_tokens_per_turn_before']:.0f} -> {s['prompt_tokens_per_turn_after']:.0f}",
            ]
            v = s.get("vs_rules")
            want.append(
                f"{v['difference']:+.3f} [{v['interval'][0]:+.3f}, {v['interval'][1]:+.3f}] ({v['sets']})"
                if v
                else "-"
            )
        assert cells[: len(want)] == want, f"{m.group(1)}: the table says {cells}, the result {want}"
