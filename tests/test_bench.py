"""The benchmarks' pure parts: the cost model and tables rebuilt from run directories (synthetic
events.jsonl files; no model); their statistics (pats.stats) are tested in tests/test_stats.py. bench/
is a package of the checkout: `bench.common`, `bench.perf.*`, `bench.studies.*`."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for bench.*

from bench import common  # noqa: E402
from bench.perf import overhead, tokens  # noqa: E402
from bench.studies import learning  # noqa: E402


def test_cost_estimate_by_hand():
    u = common.UnitCosts(turn_s=1.0, decision_s=10.0, turns=5.0, startup_s=0.0)
    b = learning.Budget(2, 3, 4, (0, 1), 1, 2, 6, max_turns=10)
    # a step: 3 tasks x 4 rollouts x 5 turns x (1 + 0.3 * 10) = 240 s; 2 steps, 2 engine evals of
    # 2 games x 10 turns, the final 6 games x 10 turns: 480 + 40 + 60 = 580 s per seed, 2 seeds
    total, per = learning.estimate(b, ["none"], u)
    assert per["none"] == pytest.approx(1160.0)
    assert total == pytest.approx(1160.0 + 60.0)  # + the shared untrained evaluation
    small, _ = learning.estimate(
        learning.BUDGETS["small"], ("pats", "none", "static", "grow"), common.UnitCosts()
    )
    assert small < 2.2 * 3600, "the small budget must stay near two hours on this machine"


def _write_run(root: Path, name: str, informative: list[float], evals: dict[int, float], final: list[float]):
    run = root / name
    (run / "report").mkdir(parents=True)
    lines = []
    for step, frac in enumerate(informative):
        if step in evals:
            lines.append({"v": 1, "step": step, "event": "eval", "metrics": {"eval/success": evals[step]}})
        metrics = {
            "train/informative_fraction": frac,
            "train/success": 0.1,
            "train_with_scaffold/success": 0.4,
            "train_without_scaffold/success": 0.2,
            "train/prompt_tokens": 3000.0 if "grow" in name else 1500.0,
            "train_with_scaffold/prompt_tokens": 2000.0,
            "train/turns": 10.0,
            "scaffold/tokens": 50.0,
        }
        lines.append({"v": 1, "step": step, "event": "step_end", "metrics": metrics})
    (run / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    tasks = [f"twx:twc:dev:{i}" for i in range(len(final))]
    (run / "report" / "heldout_4.json").write_text(
        json.dumps({"checkpoint_step": 1, "tasks": tasks, "success": final})
    )


def test_report_rebuilt_from_run_directories(tmp_path):
    b = learning.Budget(2, 1, 4, (0,), 1, 2, 4)
    (tmp_path / "untrained").mkdir()
    (tmp_path / "untrained" / "heldout_4.json").write_text(
        json.dumps({"checkpoint_step": -1, "tasks": ["a", "b", "c", "d"], "success": [1.0, 0.0, 0.0, 0.0]})
    )
    _write_run(tmp_path, "pats-s0", [1.0, 0.5], {0: 0.5, 1: 1.0}, [1.0, 1.0, 0.0, 1.0])
    _write_run(tmp_path, "none-s0", [0.5, 0.0], {0: 0.5, 1: 0.5}, [1.0, 0.0, 0.0, 0.0])
    s = learning.summarize(tmp_path, b, ["pats", "none", "grow"])
    pats, none = s["conditions"]["pats"], s["conditions"]["none"]
    assert "grow" in s["conditions"] and s["conditions"]["grow"]["seeds"] == []  # not run yet
    assert pats["informative_early"] == 0.75 and none["informative_early"] == 0.25
    assert pats["train_success_with_scaffold"] == 0.4 and none["train_success_with_scaffold"] is None
    assert none["train_success_without_scaffold"] == 0.1  # plain GRPO: every rollout is without
    # curve: x=0 from the untrained first 2 games (0.5), then evals after 1 and 2 steps
    assert pats["curve"] == {"steps": [0, 1, 2], "success": [0.5, 0.5, 1.0]}
    assert pats["auc"] == pytest.approx((0.5 + 0.75) / 2)
    assert pats["heldout"]["successes"] == 3 and pats["heldout"]["episodes"] == 4
    c = s["comparisons"]["pats-none"]
    assert c["heldout_diff"] == pytest.approx(0.5) and c["paired_episodes"] == 4
    assert c["informative_early_ratio"] == pytest.approx(3.0)
    assert c["auc_diff"] == pytest.approx(0.625 - 0.5)
    text = learning.tables(s, b)
    assert "| pats | 1 | 0.750 |" in text and "| pats-none | 0.500" in text
    assert any("none, first 20 steps: 3.00 " in t for t in learning.targets(s))
    assert common.finished(tmp_path / "pats-s0", steps=2) and not common.finished(
        tmp_path / "pats-s0", steps=3
    )


def test_budget_without_a_heldout_test(tmp_path):
    """`early` trains and reads back without the untrained and final held-out evaluations."""
    u = common.UnitCosts(turn_s=1.0, decision_s=10.0, turns=5.0, startup_s=7.0)
    b = learning.Budget(2, 3, 4, (0,), 2, 2, 0, max_turns=10)
    # 2 steps of 240 s, one engine eval of 2 games x 10 turns, one startup; no untrained evaluation
    total, per = learning.estimate(b, ["none"], u)
    assert per["none"] == pytest.approx(480.0 + 20.0 + 7.0) and total == pytest.approx(per["none"])
    assert "environment.num_eval_tasks=2" in learning.overrides(b, 0, "easy", "win")
    assert learning.BUDGETS["early"].steps == learning.EARLY_STEPS
    _write_run(tmp_path, "pats-s0", [0.5, 0.5], {1: 0.5}, [])
    _write_run(tmp_path, "none-s0", [0.0, 0.5, 1.0], {1: 0.0}, [])  # one step more than pats
    s = learning.summarize(tmp_path, b, ["pats", "none"])
    assert s["conditions"]["none"]["paired_steps"] == {0: 2}  # none's third step has no pair
    assert s["untrained_heldout"] is None and s["conditions"]["pats"]["heldout"] is None
    assert s["conditions"]["pats"]["curve"] == {"steps": [2], "success": [0.5]}
    assert s["comparisons"]["pats-none"]["informative_early_ratio"] == pytest.approx(2.0)
    assert "pats/none, first 20 steps: 2.00" in learning.targets(s)[0]


def test_set_overrides_reach_every_condition_and_name_the_run():
    parser = argparse.ArgumentParser()
    learning.add_common_args(parser)
    args = parser.parse_args(
        ["--budget", "early", "--reward", "score", "--set", "environment.num_train_tasks=8"]
    )
    assert learning.budget_key(args) == "early-score-num_train_tasks8"
    assert learning.budget_key(parser.parse_args(["--budget", "small"])) == "small"
    o = learning.overrides(learning.BUDGETS["early"], 0, "hard", "score", tuple(args.set))
    assert o[-1] == "environment.num_train_tasks=8" and "environment.params.numLocations=2" in o
    from pats.spec import load_spec

    spec = load_spec(common.REPO / common.CONDITIONS["pats"][0], o)
    assert spec.environment.num_train_tasks == 8 and spec.environment.reward == "score"


def test_token_ratios_from_run_directories(tmp_path):
    _write_run(tmp_path, "pats-s0", [1.0], {}, [1.0])
    _write_run(tmp_path, "grow-s0", [1.0], {}, [1.0])
    s = tokens.token_summary(tmp_path, seeds=(0,))
    assert set(s["modes"]) == {"pats", "grow"}
    assert s["ratios"]["pats/grow"]["per_rollout"] == pytest.approx(0.5)
    assert s["modes"]["pats"]["per_turn"] == pytest.approx(150.0)
    assert "pats/grow: 0.50x per rollout (target <= 0.6x)" in tokens.table(s)


def test_overhead_ratios():
    def steps(step, review):
        return [
            {
                "time/step_s": step,
                "time/update_s": step,
                "time/review_s": review,
                "time/review_overlap_s": review,
            }
        ]

    raw = {
        "rollout_s": 10.0,
        "steps": {"none": steps(10.0, 0.0), "pats_rules": steps(10.5, 0.2), "pats_llm": steps(12.0, 1.0)},
    }
    r = overhead.summarize(raw)["ratios"]
    assert r["pats_rules"]["after_rollout"] == pytest.approx(1.05)
    assert r["pats_llm"]["whole_step"] == pytest.approx(22.0 / 20.0)
    assert r["pats_llm"]["target"] == 1.10


def test_a_demonstration_campaign_refuses_cells_of_another_protocol(tmp_path):
    from bench.studies import demonstration

    args = argparse.Namespace(
        setting="twc1", campaign="twc1", steps=8, pool=8, heldout_offset=0, conditions=["none"], seeds=[0], report_only=False,
        refresh=False,
    )  # fmt: skip
    old = {"setting": "twc1", "steps": 8, "pool": 8, "conditions": ["pats"], "seeds": [1, 2], "refresh": True}
    (tmp_path / "none-s1.json").write_text(json.dumps({"protocol": old}))
    demonstration.check_protocol(args, tmp_path)  # cells written before campaigns existed still fit
    args.steps = 24
    with pytest.raises(SystemExit, match="steps: 8 here, 24 now.*--campaign"):
        demonstration.check_protocol(args, tmp_path)


def _cell(condition: str, seed: int, train: list[dict], wins: list[float]) -> dict:
    per_task = {f"g{i}": [w] for i, w in enumerate(wins)}
    return {"condition": condition, "seed": seed, "setting": "twc1", "train": train, "protocol": {"campaign": "c"},
            "heldout": {"per_task": per_task, "successes": sum(wins), "episodes": len(wins)}}  # fmt: skip


def test_a_demonstration_table_names_cells_that_trained_identically():
    from bench.studies import demonstration

    steps = [{"step": 0, "scaffold/tokens": 50.0, "train/success": 0.5}]
    other = [{"step": 0, "scaffold/tokens": 60.0, "train/success": 0.5}]
    pats = [_cell("pats", 0, steps, [1.0, 0.0, 1.0]), _cell("pats", 1, steps, [1.0, 1.0, 1.0])]
    # seed 0 played the same steps as pats (so held-out too); seed 1 did not
    no_removal = [
        _cell("no_removal", 0, steps, [1.0, 0.0, 1.0]),
        _cell("no_removal", 1, other, [0.0, 0.0, 0.0]),
    ]
    none = [_cell("none", 0, [], [0.0, 0.0, 0.0]), _cell("none", 1, [], [0.0, 0.0, 0.0])]
    same = demonstration.identical_cells(pats + no_removal + none, [_cell("pats_noexpert", 1, other, [])])
    assert same == {
        ("no_removal", 0): "pats",
        ("no_removal", 1): "c's pats_noexpert",
    }  # the later one is marked
    assert demonstration.identical_note(no_removal, same) == "s0 = pats; s1 = c's pats_noexpert"
    # pats - no_removal counts seed 1 only and says why; an empty training record matches nothing
    assert demonstration.paired(pats, no_removal, ("heldout",)) == (
        "+1.000 [+1.000, +1.000]; per seed s1 +1.000 (s0 trained identically: left out)"
    )
    assert "left out" not in demonstration.paired(pats, none, ("heldout",))
    assert demonstration.identical_cells(none) == {}


def _pilot_cell(lr, seed, final, top=8):
    curve = [{"steps_done": 0, "pool/success": 0.3, "eval/expert_nll": 2.0},
             {"steps_done": 32, "pool/success": final, "eval/expert_nll": 1.5}]  # fmt: skip
    held = {"per_task": {"g1": [1.0, 0.0], "g2": [0.0, 0.0]}, "successes": 1.0, "episodes": 4}
    return {"cell": f"lr{lr:.0e}-top{top}-s{seed}", "lr": lr, "top_layers": top, "seed": seed,
            "curve": curve, "heldout": held}  # fmt: skip


def test_the_pilot_chooses_the_lr_by_final_pool_success_ties_to_the_lower():
    from bench.studies import pilot

    cells = [_pilot_cell(lr, s, f) for lr, f in ((1e-3, 0.70), (3e-4, 0.69), (1e-4, 0.40)) for s in (0, 1)]
    assert pilot.chosen_lr(cells, 8, [0, 1]) == 3e-4, "within 0.02 of the best: the lower lr"
    cells[2:4] = [_pilot_cell(3e-4, s, 0.60) for s in (0, 1)]
    assert pilot.chosen_lr(cells, 8, [0, 1]) == 1e-3
    assert pilot.chosen_lr(cells[:4], 8, [0, 1]) is None, "1e-4 without cells could still win: no choice yet"
    # Cells of another LoRA setting are not this setting's evidence: top-4 cells where 1e-4 wins
    # leave the choice at 8 layers as it was, and the top-4 choice is made from them alone.
    others = [
        _pilot_cell(lr, s, f, top=4) for lr, f in ((1e-3, 0.1), (3e-4, 0.1), (1e-4, 0.9)) for s in (0, 1)
    ]
    assert pilot.chosen_lr(cells + others, 8, [0, 1]) == 1e-3
    assert pilot.chosen_lr(cells + others, 4, [0, 1]) == 1e-4
    untrained = {"cell": "untrained-s0", "seed": 0,
                 "heldout": {"per_task": {"g1": [0.0, 0.0], "g2": [0.0, 0.0]}, "successes": 0.0, "episodes": 4}}  # fmt: skip
    row = pilot.summarize([untrained, _pilot_cell(1e-3, 0, 0.7)]).splitlines()[2]
    assert "+0.40" in row and "+0.250 [" in row, row  # pool 0.3 -> 0.7; held-out 1/4 vs 0/4


def test_the_pilot_choice_is_made_once_the_missing_cells_cannot_change_it():
    from bench.studies import pilot

    # 1e-3 at 0.875 on both seeds, 3e-4 at 0.78 on seed 0: 3e-4 at seed 1 decides it (>= 0.93 wins),
    # while 1e-4 at 0.59 on seed 0 cannot reach 0.855 whatever its seed 1 gives.
    cells = [_pilot_cell(1e-3, 0, 0.875), _pilot_cell(1e-3, 1, 0.875), _pilot_cell(3e-4, 0, 0.78),
             _pilot_cell(1e-4, 0, 0.59)]  # fmt: skip
    assert pilot.chosen_lr(cells, 8, [0, 1]) is None, "3e-4 at seed 1 can still tie"
    assert pilot.chosen_lr(cells + [_pilot_cell(3e-4, 1, 0.84)], 8, [0, 1]) == 1e-3
    assert pilot.chosen_lr(cells + [_pilot_cell(3e-4, 1, 0.94)], 8, [0, 1]) == 3e-4
    # every completion of 1e-4 gives the same choice as the full rule
    for f in (0.0, 0.5, 1.0):
        full = cells + [_pilot_cell(3e-4, 1, 0.84), _pilot_cell(1e-4, 1, f)]
        assert pilot.chosen_lr(full, 8, [0, 1]) == 1e-3
    assert pilot.chosen_lr(cells, 30, [0, 1]) is None, "no cell at these layers: no choice"


def test_the_pilot_choice_counts_exactly_0_02_apart_as_a_tie():
    from bench.studies import pilot

    # 0.52 - 0.02 == 0.5 exactly in floating point: the bounds of the rule, "within 0.02", inclusive.
    cells = [_pilot_cell(lr, s, f) for lr, f in ((1e-3, 0.52), (3e-4, 0.5), (1e-4, 0.1)) for s in (0, 1)]
    assert pilot.chosen_lr(cells, 8, [0, 1]) == 3e-4, "0.02 below the best: a tie, to the lower lr"
    # 1e-4 with seed 0 at 0.0 and seed 1 missing could still reach 0.5, a tie with 3e-4: no choice yet.
    partial = cells[:4] + [_pilot_cell(1e-4, 0, 0.0)]
    assert pilot.chosen_lr(partial, 8, [0, 1]) is None


def test_the_pilot_figure_plots_each_cells_own_curves():
    from bench.studies import pilot

    a, b = _pilot_cell(1e-3, 0, 0.7), _pilot_cell(3e-4, 1, 0.5)
    for c in (a, b):
        c["train"] = [{"step": s, "success": 0.5, "informative_groups": float(s % 3)} for s in range(32)]
        c["protocol"] = {"pool": 8, "samples": 4, "tasks_per_step": 4}
    fig = pilot.figure([{"cell": "untrained-s0", "seed": 0}, a, b])
    pool, nll, groups = fig.axes
    for ax, key in ((pool, "pool/success"), (nll, "eval/expert_nll")):
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        assert set(lines) == {"lr 1e-03, LoRA 8 layers, seed 0", "lr 3e-04, LoRA 8 layers, seed 1"}
        for c, label in ((a, "lr 1e-03, LoRA 8 layers, seed 0"), (b, "lr 3e-04, LoRA 8 layers, seed 1")):
            assert list(lines[label].get_xdata()) == [p["steps_done"] for p in c["curve"]]
            assert list(lines[label].get_ydata()) == [p[key] for p in c["curve"]]
    assert [list(ln.get_ydata()) for ln in groups.get_lines()] == [[float(s % 3) for s in range(32)]] * 2
    assert all(t == int(t) for t in pool.get_xticks()), "steps are whole numbers"
    assert pool.get_ylabel() and nll.get_ylabel() and groups.get_ylabel()


def test_stage0_report_of_some_settings_keeps_the_rows_of_the_others(tmp_path):
    from bench.studies import stage0

    other = stage0.cell_id("twc1-t5", 1.0, None, "none")
    (tmp_path / f"{other}.json").write_text(json.dumps({"success": 0.25, "successes": 32, "episodes": 128,
                                                        "per_task": {"g0": [1.0, 0.0]}}))  # fmt: skip
    rows = stage0.report(tmp_path, ("twc",)).splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == ["| twc"] * 4 + ["| twc1-t5"] * 4
    assert (tmp_path / "summary.md").read_text().count("| twc1-t5 |") == 4
    assert [r.split(" | ")[0] for r in stage0.report(tmp_path / "empty", ("twc",)).splitlines()[2:]] == [
        "| twc"
    ] * 4


def test_stage0_verdict_applies_every_criterion(tmp_path):
    from bench.studies import stage0

    def cell(wins, gap=None):
        per_task = {f"g{i}": [1.0 if i < wins else 0.0] * 2 for i in range(8)}
        n = sum(len(v) for v in per_task.values())
        s = sum(sum(v) for v in per_task.values())
        return {"success": s / n, "successes": s, "episodes": n, "per_task": per_task,
                "likelihood_gap": {"gap": gap} if gap is not None else {}}  # fmt: skip

    def cells(none, expert, control, gap):
        ids = {
            k: stage0.cell_id("twc", 1.0, None if k == "none" else "turn", k)
            for k in ("none", *stage0.GUIDED)
        }
        return {ids["none"]: cell(none), ids["expert"]: cell(expert, gap), ids["control"]: cell(control),
                ids["family"]: cell(control)}  # fmt: skip

    assert stage0.verdict(cells(0, 4, 0, 0.5), "twc", 1.0, "turn")[1] is True
    assert stage0.verdict(cells(1, 4, 0, 0.5), "twc", 1.0, "turn")[1] is False  # none 0.125 > 0.10
    assert stage0.verdict(cells(0, 4, 0, 0.1), "twc", 1.0, "turn")[1] is False  # gap below 0.2
    assert stage0.verdict(cells(0, 4, 4, 0.5), "twc", 1.0, "turn")[1] is False  # expert = control
    assert stage0.verdict(cells(0, 1, 0, 0.5), "twc", 1.0, "turn")[1] is False  # expert 0.125 < 0.25
    assert stage0.verdict({}, "twc", 1.0, "turn")[1] is None
    # Cells that cannot change the verdict are skipped: a failing none or expert settles it alone.
    full = cells(0, 4, 0, 0.5)
    only = {k: v for k, v in full.items() if not k.endswith(("control", "family"))}
    assert stage0.verdict(only, "twc", 1.0, "turn")[1] is None  # expert passes: control still decides
    low = cells(0, 1, 0, 0.5)
    row, ok = stage0.verdict({k: v for k, v in low.items() if not k.endswith(("control", "family"))}, "twc", 1.0, "turn")  # fmt: skip
    assert ok is False and "expert 0.125 < 0.25" in row and "not run" in row
    row, ok = stage0.verdict({k: v for k, v in low.items() if not k.endswith("family")}, "twc", 1.0, "turn")
    assert ok is False and "0.125 (2.0/16) **no**" in row and "| not run |" in row  # family is not judged
    flat = {k: v for k, v in cells(0, 4, 0, 0.1).items() if k.endswith(("none", "expert"))}
    assert stage0.verdict(flat, "twc", 1.0, "turn")[1] is False  # the gap alone fails it
    none_only = {k: v for k, v in cells(2, 4, 0, 0.5).items() if k.endswith("none")}
    assert "none 0.250 > 0.1" in stage0.verdict(none_only, "twc", 1.0, "turn")[0]


def test_stage0_on_other_probe_games_has_its_own_folder_and_refuses_mixed_games(tmp_path, capsys):
    """Cells on other games than 500-515 go to a folder named after them, and a folder never mixes games."""
    from bench.studies import stage0

    warm, sets = (
        "twc_reading_from_cookingworld",
        ["scaffold.plan_view=next", "policy.score_normalization=sum"],
    )
    folder = stage0.cells_folder(warm, sets, (600, 32))
    assert folder.name == f"stage0-{warm}-plan_viewnext-score_normalizationsum-games600-631"
    assert stage0.cells_folder(warm, sets, (500, 16)) == stage0.cells_folder(warm, sets)  # the committed one
    assert stage0.cells_folder(None, [], (600, 32)).name == "stage0-games600-631"

    ids = [f"twx:twc:train:{i}" for i in range(500, 516)]
    (tmp_path / "twc-T0.5-none.json").write_text(json.dumps({"set": sets, "probe_tasks": ids}))
    stage0.check_overrides(tmp_path, sets, (500, 16))
    stage0.check_overrides(tmp_path, sets)  # games unchecked
    with pytest.raises(SystemExit, match="played probe games 500-515, these cells would play 600-631"):
        stage0.check_overrides(tmp_path, sets, (600, 32))

    stage0.main(["--settings", "twc", "--temperatures", "1.0", "--placements", "turn", "--probe-offset", "600",
                 "--tasks", "32", "--guidance", "control", "expert", "--check"])  # fmt: skip
    assert (
        capsys.readouterr().out
        == f"ok: 1 probe specs; cells go to {common.RESULTS / 'stage0-games600-631'}\n"
    )


def test_stage0_guidance_plays_the_chosen_cells_in_order_and_judges_without_family(tmp_path, monkeypatch):
    from bench.studies import stage0

    played = []

    async def play(args, name, temperature, placement, kinds, ids):
        played.append(tuple(kinds))

    monkeypatch.setattr(stage0, "play", play)
    monkeypatch.setattr(stage0, "cells_folder", lambda warm, overrides, games: tmp_path)
    stage0.main(["--settings", "twc", "--temperatures", "1.0", "--placements", "turn", "--probe-offset", "600",
                 "--tasks", "32", "--guidance", "control", "expert"])  # fmt: skip
    assert played == [("none", "expert", "control")]  # the grid's order, whatever the order given

    def cell(wins, gap=None):
        per_task = {f"g{i}": [1.0 if i < wins else 0.0] * 2 for i in range(8)}
        return {"success": wins / 8, "successes": 2 * wins, "episodes": 16, "per_task": per_task,
                "likelihood_gap": {"gap": gap} if gap is not None else {}}  # fmt: skip

    cells = {stage0.cell_id("twc", 1.0, None, "none"): cell(0),
             stage0.cell_id("twc", 1.0, "turn", "expert"): cell(4, 0.5),
             stage0.cell_id("twc", 1.0, "turn", "control"): cell(0)}  # fmt: skip
    row, ok = stage0.verdict(cells, "twc", 1.0, "turn")
    assert ok is True and "| not run |" in row and "**PASS**" in row
    cells[stage0.cell_id("twc", 1.0, "turn", "control")] = cell(4)
    row, ok = stage0.verdict(cells, "twc", 1.0, "turn")
    assert ok is False and "+0.000 [+0.000, +0.000] **no**" in row


def test_stage0_from_a_warm_start_plays_its_adapter_with_its_lora(tmp_path):
    import yaml

    from bench.studies import stage0

    lora = {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj"], "top_layers": 4}
    (tmp_path / "adapter").mkdir()
    (tmp_path / "spec.yaml").write_text(
        yaml.safe_dump({"name": "ws", "policy": {"model": "smollm2-135m-instruct", "lora": lora}})
    )
    spec = stage0.variant_spec("twc", 0.5, "turn", threads=1, warm=tmp_path)
    assert spec.policy.init_adapter == str(tmp_path / "adapter")
    assert spec.policy.lora.rank == 8 and spec.policy.lora.top_layers == 4
    assert (spec.policy.temperature, spec.scaffold.placement, spec.environment.max_turns) == (0.5, "turn", 10)
    assert stage0.variant_spec("twc", 0.5, "turn").policy.init_adapter is None


def test_learning_report_only_refuses_without_run_dirs_and_keeps_the_committed_table(tmp_path, capsys):
    from bench.studies import learning

    results = tmp_path / "results"
    results.mkdir()
    (results / "learning_small.json").write_text('{"kept": true}')
    with pytest.raises(SystemExit) as stop:
        learning.main(["--budget", "small", "--report-only", "--out", str(tmp_path / "nothing"),
                       "--results", str(results)])  # fmt: skip
    assert stop.value.code == 2
    assert "there are none" in capsys.readouterr().err
    assert (results / "learning_small.json").read_text() == '{"kept": true}'
    assert not (results / "learning_small.png").exists()


def test_a_bench_run_start_refuses_a_bad_spec_as_pats_run_does(tmp_path):
    """run_condition starts a run through `pats run`'s entry point: a spec naming a missing file
    stops with run_spec's own SpecError before anything is written or a model loads."""
    from pats.engine.run import run_spec
    from pats.errors import SpecError
    from pats.spec import load_spec

    bad = [f"scaffold.initial_bank={tmp_path / 'no_bank.json'}"]
    run_dir = tmp_path / "runs" / "cell"
    with pytest.raises(SpecError) as bench_error:
        common.run_condition("experiments/quickstart.yaml", bad, run_dir)
    spec = load_spec(common.REPO / "experiments" / "quickstart.yaml",
                     [*bad, "name=cell", f"logging.root={run_dir.parent}"])  # fmt: skip
    with pytest.raises(SpecError) as pats_error:
        run_spec(spec)
    assert str(bench_error.value) == str(pats_error.value)
    assert "no_bank.json does not exist" in str(bench_error.value)
    assert not run_dir.exists()


def test_bench_probes_check_the_spec_files_before_playing(tmp_path):
    """The probes that play without training (stage0/sensitivity's Probe, the untrained held-out
    cells) make `pats run`'s file and device checks: a warm start without its adapter stops there."""
    from bench.studies import stage0
    from bench.studies.sensitivity import Probe
    from pats.errors import SpecError

    lora = {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj"], "top_layers": 4}
    (tmp_path / "spec.yaml").write_text(
        json.dumps({"policy": {"model": "smollm2-135m-instruct", "lora": lora}})
    )
    spec = stage0.variant_spec("twc", 0.5, "turn", threads=1, warm=tmp_path)  # no adapter/ beside it
    probe_args = argparse.Namespace(probe_offset=0, tasks=1, sources=1, group=2, samples=1)
    with pytest.raises(SpecError, match="adapter does not exist"):
        Probe("twc", probe_args, spec=spec)
    with pytest.raises(SpecError, match="adapter does not exist"):
        common.heldout(tmp_path / "heldout.json", 1, base_spec=spec)
    assert not (tmp_path / "heldout.json").exists()


def test_the_untrained_cells_play_the_base_spec_at_the_cell_seed(monkeypatch):
    """pilot's and demonstration's untrained cells: the base spec's untrained policy with the cell's
    seed, on the campaign's held-out games, kept as a heldout_record in the cell's own cache."""
    from bench.studies import demonstration, pilot

    played = []

    def heldout(cache, num_tasks, run_dir=None, base_spec=None, chunk=32, offset=0):
        played.append((cache, num_tasks, run_dir, base_spec.seed, offset))
        return {
            "checkpoint_step": -1,
            "tasks": ["a", "a", "b"],
            "success": [1.0, 0.0, 0.0],
            "reward": [0] * 3,
        }

    monkeypatch.setattr(common, "heldout", heldout)
    args = argparse.Namespace(campaign="c", heldout=3, heldout_offset=5, setting="twc1")
    spec_file = common.REPO / "experiments" / "quickstart.yaml"
    record = {"episodes": 3, "successes": 1.0, "per_task": {"a": [1.0, 0.0], "b": [0.0]}}
    assert pilot.untrained_cell(args, 7, spec_file)["heldout"] == record
    assert demonstration.untrained_cell(args, 7, spec_file)["heldout"] == record
    runs = common.REPO / "bench" / "runs"
    assert played == [
        (runs / "pilot" / "c" / "untrained-s7" / "heldout.json", 3, None, 7, 5),
        (runs / "demonstration" / "c" / "untrained-s7" / "heldout_3_from5.json", 3, None, 7, 5),
    ]


def test_the_action_flags_map_to_spec_overrides():
    """bench/perf/rollout.py and bench/perf/update.py share --action/--new-tokens and what they override."""
    parser = argparse.ArgumentParser()
    common.add_action_flags(parser)
    assert common.action_overrides(parser.parse_args([])) == []
    generate = parser.parse_args(["--action", "generate", "--new-tokens", "8"])
    assert common.action_overrides(generate) == ["policy.action=generate", "policy.max_new_tokens=8"]


QWEN = "policy.model=Qwen/Qwen2.5-1.5B-Instruct"


def test_set_flag_takes_several_overrides_per_flag_and_names_them_by_key_and_value():
    parser = argparse.ArgumentParser()
    common.add_set_flag(parser, "overrides")
    assert parser.parse_args(["--set", "a.b=1", "c=2", "--set", "d=3"]).set == ["a.b=1", "c=2", "d=3"]
    assert parser.parse_args([]).set == []
    assert (
        common.overrides_key(["trainer.lr=1e-5", "environment.num_train_tasks=8"]) == "lr1e5-num_train_tasks8"
    )
    # a dot in the value stays with the value: two models differ (learning once kept only '5BInstruct')
    assert common.overrides_key([QWEN]) == "modelQwenQwen2515BInstruct"
    assert common.overrides_key(["policy.model=Qwen/Qwen2.5-0.5B-Instruct"]) != common.overrides_key([QWEN])


def test_stage0_set_overrides_reach_every_probe_spec_and_keep_the_grid(tmp_path):
    import yaml

    from bench.studies import stage0

    sets = (QWEN, "trainer.lr=1e-5", "trainer.device=cuda", "policy.dtype=bfloat16")
    spec = stage0.variant_spec("twc1-t5", 0.5, "system", threads=1, overrides=sets)
    assert (spec.policy.model, spec.trainer.lr, spec.trainer.device) == (
        "Qwen/Qwen2.5-1.5B-Instruct",
        1e-5,
        "cuda",
    )
    assert spec.policy.dtype == "bfloat16"
    assert (spec.policy.temperature, spec.scaffold.placement, spec.environment.max_turns) == (
        0.5,
        "system",
        5,
    )
    assert spec.trainer.threads == 1
    assert stage0.variant_spec("twc1-t5", 0.5, "system") == stage0.variant_spec(
        "twc1-t5", 0.5, "system", overrides=()
    )
    # a warm start must have trained the model the overrides name
    lora = {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj"], "top_layers": 4}
    (tmp_path / "adapter").mkdir()
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"name": "ws", "policy": {"model": "smollm2-135m-instruct", "lora": lora}}))  # fmt: skip
    with pytest.raises(SystemExit, match="trained smollm2-135m-instruct, the probe plays Qwen"):
        stage0.variant_spec("twc", 1.0, "turn", warm=tmp_path, overrides=(QWEN,))
    warm = stage0.variant_spec("twc", 1.0, "turn", warm=tmp_path, overrides=("trainer.lr=1e-5",))
    assert warm.policy.init_adapter == str(tmp_path / "adapter") and warm.trainer.lr == 1e-5


def test_pilot_set_overrides_reach_the_base_spec_and_keep_the_flags():
    from bench.studies import pilot

    args = argparse.Namespace(pool=8, eval_tasks=4, steps=32, tasks_per_step=4, group=8, eval_every=8,
                              samples=4, pool_eval=True, gap_tasks=None,
                              set=[QWEN, "trainer.kl_coef=0.01", "trainer.device=cuda"])  # fmt: skip
    spec = pilot.pilot_spec(args)
    assert (spec.policy.model, spec.trainer.kl_coef, spec.trainer.device) == (
        "Qwen/Qwen2.5-1.5B-Instruct",
        0.01,
        "cuda",
    )
    assert (spec.trainer.steps, spec.trainer.group_size, spec.environment.num_train_tasks) == (32, 8, 8)
    assert spec.scaffold.mode == "none" and spec.eval.pool
    assert (
        pilot.pilot_spec(argparse.Namespace(**{**vars(args), "set": []})).policy.model
        == "smollm2-135m-instruct"
    )


def test_the_transfer_pilot_draws_from_a_large_pool_without_playing_it():
    """--pool 1000 --no-pool-eval --gap-tasks 8: the engine never plays the whole pool, the expert NLL
    comes from 8 games, and the table and figure fall back to training and dev success."""
    from bench.studies import pilot

    args = argparse.Namespace(pool=1000, eval_tasks=4, steps=32, tasks_per_step=4, group=8, eval_every=8,
                              samples=4, pool_eval=False, gap_tasks=8, set=[])  # fmt: skip
    spec = pilot.pilot_spec(args)
    assert (spec.environment.num_train_tasks, spec.eval.pool, spec.eval.gap_tasks) == (1000, False, 8)
    assert pilot.gap_tasks(argparse.Namespace(pool=8, gap_tasks=None)) == 8
    cell = _pilot_cell(1e-3, 0, None)
    for p in cell["curve"]:
        p.update({"pool/success": None, "eval/success": 0.25})
    cell["train"] = [
        {"step": s, "success": 0.25 if s < 8 else 0.5, "informative_groups": 1.0} for s in range(32)
    ]
    cell["protocol"] = {"pool": 1000, "samples": 4, "tasks_per_step": 4, "eval_tasks": 4}
    assert pilot.pool_change(cell) == "n/a"
    row = pilot.summarize([cell]).splitlines()[2]
    assert "0.25 / 0.50" in row and "| n/a |" in row, row
    pool = pilot.figure([cell]).axes[0]
    assert list(pool.get_lines()[0].get_ydata()) == [0.25, 0.25] and "Dev success" in pool.get_title()


@pytest.mark.parametrize("script", ["stage0", "pilot"])
def test_a_bad_set_override_is_refused_with_pats_message_before_anything_loads(script, capsys):
    module = importlib.import_module(f"bench.studies.{script}")
    with pytest.raises(SystemExit) as stop:
        module.main(["--set", "policy.modle=Qwen/Qwen2.5-1.5B-Instruct", "--check"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"bench/studies/{script}.py --set" in err
    assert "policy.modle: unknown key 'modle'; did you mean 'model'?" in err
    # a key the script sets from its grid or a flag is refused with the flag to use
    owned = {
        "stage0": ("policy.temperature=0.7", "the grid's temperatures"),
        "pilot": ("trainer.lr=1e-5", "the grid"),
    }
    text, flag = owned[script]
    with pytest.raises(SystemExit) as stop:
        module.main(["--set", text, "--check"])
    assert stop.value.code == 2
    assert f"{text.split('=')[0]}: set by {flag}" in capsys.readouterr().err


def test_without_set_the_cells_go_where_the_committed_ones_are_and_still_fit(capsys):
    """Default paths are today's, and the committed 135M cells (written before --set) pass the checks."""
    from bench.studies import pilot, stage0

    assert stage0.cells_folder(None, []) == common.RESULTS / "stage0" == stage0.CELLS
    assert stage0.cells_folder("twc_from_cookingworld", []) == common.RESULTS / "stage0-twc_from_cookingworld"
    assert stage0.cells_folder(None, [QWEN]) == common.RESULTS / "stage0-modelQwenQwen2515BInstruct"
    assert pilot.campaign_name([]) == "twc1-pilot"
    assert pilot.campaign_name([QWEN]) == "twc1-pilot-modelQwenQwen2515BInstruct"
    assert any((common.RESULTS / "stage0").glob("*.json")) and any(
        (common.RESULTS / "pilot" / "twc1-pilot").glob("*.json")
    )
    stage0.main(["--check"])
    assert f"cells go to {common.RESULTS / 'stage0'}\n" in capsys.readouterr().out
    pilot.main(["--check"])
    assert f"cells go to {common.RESULTS / 'pilot' / 'twc1-pilot'}\n" in capsys.readouterr().out
    pilot.main(["--set", QWEN, "--check"])
    assert (
        f"cells go to {common.RESULTS / 'pilot' / 'twc1-pilot-modelQwenQwen2515BInstruct'}\n"
        in capsys.readouterr().out
    )


def test_cells_of_other_overrides_are_refused(tmp_path):
    from bench.studies import pilot, stage0

    (tmp_path / "twc-T1.0-none.json").write_text(json.dumps({"success": 0.0}))  # made before --set
    stage0.check_overrides(tmp_path, [])
    with pytest.raises(SystemExit, match=r"played with --set nothing, these cells would be \['policy.model"):
        stage0.check_overrides(tmp_path, [QWEN])
    (tmp_path / "twc-T1.0-none.json").write_text(json.dumps({"success": 0.0, "set": [QWEN]}))
    stage0.check_overrides(tmp_path, [QWEN])
    with pytest.raises(SystemExit, match="played with --set"):
        stage0.check_overrides(tmp_path, [])

    tmp_path = tmp_path / "pilot"
    tmp_path.mkdir()
    protocol = {"stage": "lr", "seeds": [0, 1], "pool": 8, "campaign": "c", "set": [QWEN]}
    (tmp_path / "untrained-s0.json").write_text(json.dumps({"protocol": protocol}))
    args = argparse.Namespace(**{**protocol, "report_only": False, "threads": 1, "check": False})
    pilot.check_protocol(args, tmp_path)
    args.set = [QWEN, "trainer.device=cuda"]
    with pytest.raises(
        SystemExit, match=r"set: \['policy.model=Qwen/Qwen2.5-1.5B-Instruct'\] there, .*--campaign"
    ):
        pilot.check_protocol(args, tmp_path)
    del protocol["set"]  # a cell written before --set existed ran without overrides
    (tmp_path / "untrained-s0.json").write_text(json.dumps({"protocol": protocol}))
    args.set = []
    pilot.check_protocol(args, tmp_path)
    args.set = [QWEN]
    with pytest.raises(SystemExit, match=r"set: \[\] there"):
        pilot.check_protocol(args, tmp_path)


def test_the_ceiling_probe_picks_by_its_stated_rule_and_its_committed_picks_follow_from_its_pairs():
    from bench.studies import ceiling

    def rec(view, rule, t, gap, lo, over):
        return {
            "view": view,
            "rule": rule,
            "temperature": t,
            "gap": (gap, lo, gap + 1),
            "over_control": (over, 0, 1),
        }

    records = [
        rec("next", "mean", 1.0, 0.5, 0.1, 0.6),
        rec("next", "mean", 0.5, 1.0, 0.2, 0.6),  # the same view and rule: only the larger gap counts
        rec("static", "pmi", 1.0, 0.9, 0.3, 0.2),
        rec("progress", "sum", 1.0, 0.3, 0.01, 0.1),
        rec("progress", "pmi", 1.0, 5.0, -0.1, 3.0),  # interval reaches 0: not eligible
        rec("static", "sum", 1.0, 4.0, 1.0, 0.05),  # the control does as well: not eligible
        rec("next", "sum", 1.0, 0.19, 0.1, 1.0),  # under 0.2 nats
    ]
    assert [(c["view"], c["rule"], c["temperature"]) for c in ceiling.pick(records)] == [
        ("next", "mean", 0.5), ("static", "pmi", 1.0), ("progress", "sum", 1.0),
    ]  # fmt: skip
    folder = common.RESULTS / "ceiling"
    data = json.loads((folder / "pairs.json").read_text())
    committed = json.loads((folder / "picks.json").read_text())["picks"]
    again = ceiling.pick(ceiling.cells(data["pairs"]))
    assert [(c["view"], c["rule"], c["temperature"]) for c in again] == [
        (c["view"], c["rule"], c["temperature"]) for c in committed
    ]
    assert (
        ceiling.report(data).split("\n", 2)[2]
        == (folder / "summary.md").read_text().strip().split("\n", 2)[2]
    )


def test_stage0_plays_only_the_temperatures_and_placements_asked_for(tmp_path, monkeypatch):
    from bench.studies import stage0

    played = []

    async def play(args, name, temperature, placement, kinds, ids):
        played.append((name, temperature, placement, tuple(kinds)))

    monkeypatch.setattr(stage0, "play", play)
    monkeypatch.setattr(stage0, "cells_folder", lambda warm, overrides, games: tmp_path)
    stage0.main(["--settings", "twc", "--temperatures", "0.5", "--placements", "turn"])
    assert played == [("twc", 0.5, "turn", ("none", "expert", "control", "family"))]
    rows = (tmp_path / "summary.md").read_text().splitlines()[2:]
    assert [r.split(" | ")[:3] for r in rows] == [["| twc", "0.5", "turn"]]
    played.clear()
    stage0.main(["--settings", "twc", "--temperatures", "1.0", "--placements", "system", "turn"])
    # none (no guidance) is played once a temperature, with the first placement given
    assert played == [("twc", 1.0, "system", ("none", "expert", "control", "family")),
                      ("twc", 1.0, "turn", ("expert", "control", "family"))]  # fmt: skip


def test_the_pilot_keeps_a_cells_final_adapter_once(tmp_path, monkeypatch, capsys, repo):
    from bench.studies import pilot
    from pats.engine.run import Checkpoint
    from pats.spec import load_spec, spec_to_yaml

    monkeypatch.setattr(pilot, "REPO", tmp_path)
    args = argparse.Namespace(campaign="c")
    run_dir = tmp_path / "bench" / "runs" / "pilot" / "c" / "lr1e-03-top8-s2"
    step = run_dir / "checkpoints" / "step_000031"
    (step / "policy" / "adapter").mkdir(parents=True)
    (run_dir / "spec.yaml").write_text(spec_to_yaml(load_spec(repo / "experiments/quickstart.yaml")))
    (step / "policy" / "adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    config = {"base_model_name_or_path": "/root/.cache/pats/smollm2-135m-instruct", "r": 16}
    (step / "policy" / "adapter" / "adapter_config.json").write_text(json.dumps(config))
    (step / "policy" / "adapter" / "README.md").write_text("PEFT's model card")
    (step / "policy" / "optimizer.pt").write_bytes(b"not kept")
    (run_dir / "checkpoints" / "latest.json").write_text(
        Checkpoint(step=31, path=str(step)).model_dump_json()
    )
    folder = tmp_path / "results"
    kept = pilot.keep_adapter(args, "lr1e-03-top8-s2", folder)
    assert kept == folder / "lr1e-03-top8-s2-adapter"
    assert sorted(p.name for p in folder.iterdir()) == ["lr1e-03-top8-s2-adapter"]
    assert sorted(p.name for p in kept.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    written = json.loads((kept / "adapter_config.json").read_text())
    assert written == {"base_model_name_or_path": "smollm2-135m-instruct", "r": 16}  # no machine's path
    (step / "policy" / "adapter" / "adapter_model.safetensors").write_bytes(b"changed")
    assert pilot.keep_adapter(args, "lr1e-03-top8-s2", folder) == kept  # kept once, not overwritten
    assert (kept / "adapter_model.safetensors").read_bytes() == b"weights"
    assert pilot.keep_adapter(args, "lr1e-03-top8-s3", folder) is None  # no run: said, nothing copied
    assert "lr1e-03-top8-s3: no adapter to keep" in capsys.readouterr().err
