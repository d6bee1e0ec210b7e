"""bench/studies/reading_gap.py on the tiny random model: the line's likelihood gap per game on twc and on
cookingworld games the warm start did not clone, a file per (adapter, game set) that a rerun keeps, an
adapter's numbers (a fresh LoRA adapter changes nothing), the differences' table, and the refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for bench.*

from bench.studies import reading_gap  # noqa: E402


@pytest.fixture(scope="module")
def warm(tiny_model_dir, tmp_path_factory):
    """A warm-start folder for the tiny model: the reading spec's spec.yaml, and a fresh adapter (its B
    matrices zero, so it equals the base model)."""
    from pats.backends.local import LocalPolicy
    from pats.spec import load_spec, spec_to_yaml

    folder = tmp_path_factory.mktemp("warm")
    lora = ["policy.lora.rank=2", "policy.lora.alpha=4", "policy.lora.top_layers=1"]
    spec = load_spec(reading_gap.READING, [f"policy.model={tiny_model_dir}", *lora, "name=tiny_reading"])
    (folder / "spec.yaml").write_text(spec_to_yaml(spec))
    LocalPolicy(spec.policy, spec.trainer, spec.seed).model.save_pretrained(folder / "adapter")
    return folder


@pytest.mark.slow  # real twc and cookingworld games in their JVMs (20 s alone, 60-85 s beside other work)
def test_gap_per_game_on_both_sets_a_file_each_kept_on_rerun(tiny_model_dir, warm, tmp_path, capsys):
    extra = [f"policy.model={tiny_model_dir}"]
    flags = ["--count", "2", "--threads", "1", "--out", str(tmp_path), "--set", *extra]
    reading_gap.main(flags)
    reading_gap.main([*flags, "--warm-start", str(warm)])
    paths = {(name, games): reading_gap.result_path(tmp_path, name, games, first, 2, extra)
             for name in ("untrained", "tiny_reading") for games, first in (("twc", 600), ("cookingworld", 64))}  # fmt: skip
    assert sorted(tmp_path.glob("*.json")) == sorted(paths.values())
    got = {k: json.loads(p.read_text()) for k, p in paths.items()}
    for (name, games), r in got.items():
        assert r["adapter"] == name and r["game_set"] == games and r["temperature"] == 1.0
        assert r["set"] == [*reading_gap.PICK_A, *extra] and r["placement"] == "turn"
        first = 600 if games == "twc" else 64
        assert [t.rsplit(":", 1)[1] for t in r["probe_tasks"]] == [str(first), str(first + 1)]
        assert (
            r["game"] == games
            and r["games"] == 2
            and r["pairs"] == sum(len(d["with"]) for d in r["per_task"].values())
        )
        gaps = [g for v in reading_gap.decision_gaps(r).values() for g in v]
        assert (
            r["gap"]
            == pytest.approx(sum(gaps) / len(gaps))
            == pytest.approx(r["nll_without"] - r["nll_with"])
        )
        named = [g for v in reading_gap.decision_gaps(r, named=True).values() for g in v]
        assert 0 < r["named_pairs"] == len(named) <= r["pairs"] and r["named_gap"] == pytest.approx(
            sum(named) / len(named)
        )
        for d in r["per_task"].values():  # the named target: none, or an action other than the expert's
            assert all(len(d[k]) == len(d["with"]) for k in reading_gap.DECISION_KEYS)
            assert all(
                (t is None) == (a is None) == (b is None)
                for t, a, b in zip(d["target"], d["target_without"], d["target_with"], strict=True)
            )
    assert got["untrained", "cookingworld"]["params"]["numIngredients"] == 2  # the cloning environment's
    for games in ("twc", "cookingworld"):  # a fresh adapter is the base model: the same NLLs
        a, b = got["tiny_reading", games]["per_task"], got["untrained", games]["per_task"]
        assert a.keys() == b.keys()
        for t in a:
            assert a[t]["with"] == pytest.approx(b[t]["with"], abs=1e-5)
            assert a[t]["target_with"] == pytest.approx(b[t]["target_with"], abs=1e-5)
    out = capsys.readouterr().out
    assert (
        "| cookingworld | untrained - tiny_reading | +0.000 [" in out and (tmp_path / "summary.md").is_file()
    )
    before = {p: p.stat().st_mtime_ns for p in paths.values()}
    reading_gap.main(flags)  # each file there: nothing measured again
    assert (
        "skipped" in capsys.readouterr().out and {p: p.stat().st_mtime_ns for p in paths.values()} == before
    )


def test_cookingworld_games_the_warm_start_cloned_or_another_environment_are_refused(
    tiny_model_dir, warm, tmp_path
):
    with pytest.raises(SystemExit, match="cloned training games 0-63; start at 64"):
        reading_gap.gap_spec("cookingworld", 63, 1, None)
    assert reading_gap.gap_spec("cookingworld", 64, 1, None).environment.game == "cookingworld"
    other = tmp_path / "other"
    other.mkdir()
    (other / "spec.yaml").write_text(
        (warm / "spec.yaml").read_text().replace("numIngredients: 2", "numIngredients: 3")
    )
    with pytest.raises(SystemExit, match="the warm start cloned"):
        reading_gap.gap_spec("cookingworld", 64, 1, other, (f"policy.model={tiny_model_dir}",))


def test_a_named_target_is_another_admissible_untaken_action_that_only_the_line_names(tiny_model_dir):
    """The swapped plan's line names the target at its decision; the expert plan's names the expert's."""
    import asyncio
    from types import SimpleNamespace

    from bench.studies.sensitivity import Probe
    from pats.backends.local.reliance import expert_pairs
    from pats.episode import Episode
    from pats.scaffold.plans import changes_nothing
    from pats.warm_start import necessary_targets

    spec = reading_gap.gap_spec("twc", 600, 1, None, (f"policy.model={tiny_model_dir}",))

    async def go():
        probe = Probe("twc", SimpleNamespace(probe_offset=600, tasks=1, sources=0), spec=spec)
        try:
            views = probe.views(await probe.entries("expert"))
            pairs = await expert_pairs(probe.env, probe.probe_tasks)
            targets = necessary_targets(pairs, {pairs[0].task.id}, 1.0, spec.seed)
            assert targets
            for i, target in targets.items():
                p, plan = pairs[i], probe.plans[pairs[i].task.id]
                assert target in p.state.admissible and target != p.action and target not in dict(p.history)
                view = reading_gap.swapped_view(probe, p.task, plan, len(p.history), target)
                # The line names no step that changes nothing (look around, inventory, examine): at such
                # a decision the expert's line names the next step that moves the game, and a swapped
                # line naming such a target is one measure() drops.
                expert_next = next(s for s in plan[len(p.history) :] if not changes_nothing(s))
                lines = [(view, target)] if not changes_nothing(target) else []
                for v, named in (*lines, (views[0], expert_next)):
                    ep = Episode("t", p.task, v, state=p.state, history=list(p.history))
                    assert (
                        f"Next action: {named}\n"
                        in probe.backend.prompt_parts(ep, list(p.state.admissible))[1] + "\n"
                    )
        finally:
            await probe.close()

    asyncio.run(go())
