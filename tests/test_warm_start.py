"""The warm start (pats.warm_start): a tiny behaviour cloning on 2 coin tasks (5 decisions) through the
real CLI lowers the expert choice's NLL on its own guided examples; its files load (verl's own SFT
dataset reads the parquet); a spec with `policy.init_adapter` starts from exactly those weights; the spec
refuses cloning the run's own game."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pats.cli.main import main
from pats.errors import BackendError, SpecError
from pats.spec import load_spec

COIN = "{numLocations: 2, numDistractorItems: 0, includeDoors: 0, limitInventorySize: 0}"
SPEC = f"""\
# Run: pats warm-start spec.yaml
name: ws
environment:
  kind: twx
  game: twc
  params: {{numLocations: 1, numItemsToPutAway: 1, includeDoors: 0, limitInventorySize: 0}}
policy:
  action: score
  lora: {{rank: 8, alpha: 16, top_layers: 4}}
scaffold:
  placement: turn
# 2 threads on a busy 2-core machine run several times slower. fp32: under bf16 autocast (machines with
# avx512_bf16/AMX) an example's NLL depends on the batch it is scored in, by up to ~0.05 nats, and the
# adapter test compares NLLs scored in other batches than the warm start's.
trainer: {{threads: 1, autocast_bf16: false}}
warm_start:
  environment: {{kind: twx, game: coin, params: {COIN}, max_turns: 10}}
  num_tasks: 2
  guided_fraction: 0.5
  epochs: 2
  batch_size: 5
  lr: 1.0e-3
logging: {{root: runs, wandb: disabled}}
"""


def write_spec(folder: Path, text: str = SPEC) -> Path:
    path = folder / "spec.yaml"
    path.write_text(text.replace("root: runs", f"root: {folder / 'runs'}"))
    return path


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warm")
    path = write_spec(folder)
    assert main(["warm-start", str(path)]) == 0
    out = folder / "runs" / "ws" / "warm_start"
    report = json.loads((out / "report.json").read_text())
    return path, out, report


@pytest.mark.slow
def test_warm_start_lowers_the_nll_of_its_guided_examples_and_writes_its_files(warm):
    path, out, report = warm
    print(report)
    assert report["nll_guided_examples_after"] < report["nll_guided_examples_before"], report
    assert report["nll_with_after"] < report["nll_with_before"], report
    examples = [json.loads(line) for line in (out / "examples.jsonl").read_text().splitlines()]
    assert len(examples) == report["examples"] == report["measured_examples"] > 0 and report["tasks"] == 2
    guided = [e for e in examples if e["guided"]]
    assert 0 < len(guided) < len(examples) and report["guided_share"] == len(guided) / len(examples)
    # Turn placement: the plan sits in the turn, next to the actions; unguided prompts carry none.
    assert all("Steps to try:" in e["user"] and "Steps to try:" not in e["system"] for e in guided)
    assert not any("Steps to try:" in e["user"] + e["system"] for e in examples if not e["guided"])
    assert all(e["action"] in e["admissible"] for e in examples)
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == load_spec(path).policy.model  # no path of this machine
    assert load_spec(out / "spec.yaml").warm_start.num_tasks == 2
    assert main(["warm-start", str(path)]) == SpecError.exit_code, "a second warm start never overwrites"


@pytest.mark.slow
def test_sft_parquet_holds_one_chat_per_expert_episode(warm):
    import pyarrow.parquet as pq

    _, out, report = warm
    rows = pq.read_table(out / "sft.parquet").to_pylist()
    assert len(rows) == report["tasks"] and "messages" in rows[0]
    decisions = 0
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles[:2] == ["system", "user"] and roles[2::2] == ["assistant"] * len(roles[2::2])
        answers = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        assert all(a.startswith("<action>") and a.endswith("</action>") for a in answers)
        users = " ".join(m["content"] for m in row["messages"] if m["role"] == "user")
        assert ("Steps to try:" in users) == row["guided"]
        decisions += len(answers)
    assert decisions == report["examples"]


@pytest.mark.slow
def test_verl_multiturn_sft_dataset_reads_the_parquet_and_trains_only_the_actions(warm):
    from pats.testing.verl import require_verl_or_skip

    require_verl_or_skip()
    from transformers import AutoTokenizer
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    from pats.models.files import resolve_model_dir

    _, out, report = warm
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir("smollm2-135m-instruct"))
    dataset = MultiTurnSFTDataset(str(out / "sft.parquet"), tokenizer, {"max_length": 1024})
    assert len(dataset) == report["tasks"]
    trained = "".join(tokenizer.decode(r["input_ids"][r["loss_mask"].bool()]) for r in dataset)
    examples = [json.loads(line) for line in (out / "examples.jsonl").read_text().splitlines()]
    assert trained == "".join(f"<action>{e['action']}</action>{tokenizer.eos_token}\n" for e in examples)


@pytest.mark.slow
def test_init_adapter_starts_from_exactly_the_warm_started_weights(warm):
    from pats.backends.local.policy import LocalPolicy
    from pats.warm_start import Example, nlls

    path, out, _ = warm
    rows = [json.loads(line) for line in (out / "examples.jsonl").read_text().splitlines()]
    examples = [Example(**{k: v for k, v in r.items() if not k.startswith("nll_")}
                        | {"admissible": tuple(r["admissible"])}) for r in rows]  # fmt: skip
    spec = load_spec(path, [f"policy.init_adapter={out / 'adapter'}"])
    policy = LocalPolicy(spec.policy, spec.trainer, spec.seed)
    # fp32 (the spec): the NLLs do not depend on which examples are scored together.
    assert nlls(policy, examples, score=True) == pytest.approx([r["nll_after"] for r in rows], abs=1e-4)
    moved = max(abs(r["nll_after"] - r["nll_before"]) for r in rows)
    assert moved > 0.05, "training moved nothing: the comparison would not tell the weights apart"

    smaller = load_spec(path, [f"policy.init_adapter={out / 'adapter'}", "policy.lora.rank=4"])
    with pytest.raises(BackendError, match="policy.lora"):
        LocalPolicy(smaller.policy, smaller.trainer, smaller.seed)


def test_spec_refuses_cloning_the_run_s_own_game(tmp_path):
    path = write_spec(tmp_path, SPEC.replace("game: coin", "game: twc"))
    with pytest.raises(SpecError, match=r"warm_start.environment: .*twx:twc.*clone another family"):
        load_spec(path)


def test_init_adapter_needs_lora_and_an_existing_folder(tmp_path):
    path = write_spec(tmp_path)
    with pytest.raises(SpecError, match="policy.init_adapter: an adapter needs LoRA"):
        load_spec(path, [f"policy.init_adapter={tmp_path}", "policy.lora=null"])
    assert main(["validate", str(path), f"policy.init_adapter={tmp_path / 'nowhere'}"]) == SpecError.exit_code


def test_warm_start_without_a_section_says_what_to_add(tmp_path, capsys):
    path = write_spec(tmp_path, SPEC.split("warm_start:")[0] + "logging: {root: runs, wandb: disabled}\n")
    assert main(["warm-start", str(path)]) == SpecError.exit_code
    assert "no warm_start section; add one" in capsys.readouterr().err


def test_verl_gets_the_adapter_as_its_lora_adapter_path(tmp_path):
    from pats.backends.verl.config import verl_overrides
    from pats.testing.verl import twx_verl_spec

    spec = load_spec(twx_verl_spec(tmp_path / "spec.yaml", root=tmp_path / "runs"),
                     [f"policy.init_adapter={tmp_path}"])  # fmt: skip
    overrides = verl_overrides(
        spec, train_files="t", val_files="v", agent_loops="a", spec_path="s", run_dir="r", model_path="m"
    )
    assert f"actor_rollout_ref.model.lora_adapter_path={tmp_path}" in overrides


def test_necessary_fraction_needs_guided_examples(tmp_path):
    path = write_spec(tmp_path)
    with pytest.raises(SpecError, match="necessary_fraction is a share of the guided examples"):
        load_spec(path, ["warm_start.guided_fraction=0", "warm_start.necessary_fraction=0.5"])


def test_the_control_warm_start_differs_from_the_reading_one_only_in_name_and_necessary_fraction(repo):
    """Issue 42 item 2: the control clones as the reading warm start does, with no necessary example."""

    def leaves(data, path=()):
        if isinstance(data, dict):
            for key, value in data.items():
                yield from leaves(value, (*path, key))
        else:
            yield ".".join(path), data

    folder = repo / "experiments" / "warm_start"
    reading = dict(leaves(load_spec(folder / "twc_reading_from_cookingworld.yaml").model_dump(mode="json")))
    control = dict(leaves(load_spec(folder / "twc_reading_control.yaml").model_dump(mode="json")))
    assert reading.keys() == control.keys()
    assert {k: (reading[k], control[k]) for k in reading if reading[k] != control[k]} == {
        "name": ("twc_reading_from_cookingworld", "twc_reading_control"),
        "warm_start.necessary_fraction": (0.5, 0.0),
    }


def test_necessary_targets_are_drawn_from_the_guided_tasks_untaken_other_actions():
    from types import SimpleNamespace as NS

    from pats.warm_start import NECESSARY_WITHIN, necessary_targets

    def pair(task, history, admissible, action):
        return NS(task=NS(id=task), history=tuple((a, "obs") for a in history),
                  state=NS(admissible=admissible), action=action)  # fmt: skip

    long = [f"go {k}" for k in range(NECESSARY_WITHIN)]
    pairs = [
        # "put x" is a later step of a's plan and "inventory" only shows something: neither is a target
        pair("a", [], ["inventory", "take x", "put x", "open y"], "take x"),
        pair("a", ["take x"], ["take x", "put x"], "put x"),  # only the taken action is left: ineligible
        pair("a", ["take x", "put x"], ["look around", "take x", "put x", "eat x"], "close y"),
        pair("b", [], ["open y", "take z"], "take z"),  # task b is not guided
        pair("a", long, ["look", "wait"], "look"),  # beyond the plan's shown steps
    ]
    every = necessary_targets(pairs, {"a"}, 1.0, seed=0)
    assert every == {0: "open y", 2: "eat x"}  # neither a plan step, nor taken, nor an observation
    assert necessary_targets(pairs, {"a"}, 1.0, seed=0) == every  # drawn once with the seed
    assert len(necessary_targets(pairs, {"a"}, 0.5, seed=3)) == 1
    assert necessary_targets(pairs, {"a"}, 0.0, seed=0) == {}


@pytest.mark.slow
def test_a_necessary_example_names_its_target_only_in_the_guidance(tmp_path):
    import asyncio

    from pats.backends.local.backend import LocalBackend
    from pats.engine.run import make_env_factory
    from pats.scaffold.plans import changes_nothing
    from pats.warm_start import _examples, cloning_spec

    spec = load_spec(write_spec(tmp_path), ["scaffold.plan_view=next", "warm_start.guided_fraction=1.0",
                                            "warm_start.necessary_fraction=1.0"])  # fmt: skip
    clone = cloning_spec(spec)
    make_env = make_env_factory(clone)
    backend, env = LocalBackend(clone, make_env), make_env()
    try:
        train, with_plan, _, chats = asyncio.run(_examples(clone, clone_ws(spec), backend, env))
    finally:
        asyncio.run(env.close())
    necessary = [(ex, true) for ex, true in zip(train, with_plan, strict=True) if ex.necessary]
    assert necessary, "every guided decision with another untaken action is eligible at fraction 1"
    for ex, true in necessary:
        assert ex.action != true.action and ex.action in ex.admissible and not changes_nothing(ex.action)
        assert f"Next action: {ex.action}" in ex.user
    # the plan's line names the expert's step, but never one that only shows something (look around)
    shown = [true for true in with_plan if not changes_nothing(true.action)]
    assert shown and all(f"Next action: {true.action}" in true.user for true in shown)
    assert not any(f"Next action: {t.action}" in t.user for t in with_plan if changes_nothing(t.action))
    # verl's SFT rows are the expert episodes: every assistant turn is the expert's action
    answers = [m["content"] for c in chats for m in c["messages"] if m["role"] == "assistant"]
    assert answers == [f"<action>{ex.action}</action>" for ex in with_plan]


def clone_ws(spec):
    assert spec.warm_start is not None
    return spec.warm_start
