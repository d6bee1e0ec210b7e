"""The benchmarks' pure parts: statistics, the cost model, and tables rebuilt from run directories
(synthetic events.jsonl files; no model). bench/ is not a package: its scripts import each other by
their folder, as `python bench/learning.py` does."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import common  # noqa: E402
import learning  # noqa: E402
import overhead  # noqa: E402
import tokens  # noqa: E402


def test_wilson_matches_hand_computed_intervals():
    # 0/10: center = half = (1.96^2 / 20) / (1 + 1.96^2 / 10) = 0.13877 -> [0, 0.2775]
    lo, hi = common.wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = common.wilson(5, 10)  # symmetric around 0.5
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    lo, hi = common.wilson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)
    assert common.wilson(0, 0) == (0.0, 1.0)


def test_auc_is_the_trapezoid_mean_over_steps():
    # area 10 * 0.1 + 10 * 0.2 = 3 over 20 steps
    assert common.auc([0, 10, 20], [0.0, 0.2, 0.2]) == pytest.approx(0.15)
    assert common.auc([0, 5, 20], [0.5, 0.5, 0.5]) == pytest.approx(0.5)
    assert common.auc([3], [0.25]) == 0.25


def test_paired_bootstrap_keeps_tasks_paired():
    same = {"t1": [1.0], "t2": [0.0]}
    assert common.paired_bootstrap(same, same) == (0.0, 0.0, 0.0)
    ones = {f"t{i}": [1.0, 1.0] for i in range(20)}
    zeros = {f"t{i}": [0.0, 0.0] for i in range(20)}
    assert common.paired_bootstrap(ones, zeros) == (1.0, 1.0, 1.0)
    a = {f"t{i}": [float(i < 8)] for i in range(40)}  # 8/40 against 2/40 on the same tasks
    b = {f"t{i}": [float(i < 2)] for i in range(40)}
    diff, lo, hi = common.paired_bootstrap(a, b)
    assert diff == pytest.approx(0.15) and 0.0 < lo < 0.15 < hi < 0.35
    assert math.isnan(common.paired_bootstrap({"x": [1.0]}, {"y": [0.0]})[0])  # nothing paired


def test_detectable_difference_shrinks_with_episodes():
    # (1.96 + 0.84) * sqrt(2 * 0.12 * 0.88 / 128) = 0.1137
    assert common.detectable_difference(0.12, 128) == pytest.approx(0.1137, abs=1e-3)
    assert common.detectable_difference(0.12, 768) < common.detectable_difference(0.12, 128) / 2


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
    import demonstration

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
