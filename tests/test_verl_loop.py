"""The pats agent loop inside verl's real AgentLoopWorker (no Ray): a real TextWorldExpress game, the
real SmolLM2 policy behind a fake `server_manager`, the scaffold service in-process.

Checks what verl trains on: prompt/response ids, response_mask (policy tokens 1, environment tokens
0), trimming to rollout.response_length, the reward in rm_scores, the scaffold version column (one
probe per group of two, validation rows never scaffolded), and the service's review after the step.
"""

from __future__ import annotations

import asyncio
import math
import threading
from pathlib import Path

import pytest

from pats.testing.verl import composed_config, expert_task, loop_worker, require_verl_or_skip, rows_batch

require_verl_or_skip()
import torch
from verl.protocol import DataProto
from verl.workers.rollout.replica import TokenOutput

from pats.backends.verl.data import task_rows
from pats.envs.twx import TwxEnv
from pats.logging.events import StepEndEvent, read_events
from pats.models import resolve_model_dir
from pats.scaffold.plans import changes_nothing
from pats.scaffold.render import HEADER, show_plans
from pats.spec import load_spec
from pats.spec.environments import TwxEnvSpec
from pats.spec.models import EMBEDDED_POLICY
from pats.types import AddEdit

pytestmark = pytest.mark.slow  # a real model and real JVMs (still CPU, still in CI)

PROMPT, RESPONSE, MAX_NEW = 512, 300, 16


def make_spec(
    tmp_path: Path,
    max_turns: int = 4,
    response: int = RESPONSE,
    placement: str = "system",
    plan_view: str = "static",
):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "\n".join(
            [
                "name: verl-loop",
                "environment: {kind: twx, game: twc, params: {numLocations: 1, numItemsToPutAway: 1},",
                f"  num_train_tasks: 2, num_eval_tasks: 1, max_turns: {max_turns}}}",
                f"policy: {{max_new_tokens: {MAX_NEW}}}",
                f"scaffold: {{probe_fraction: 0.5, placement: {placement}, plan_view: {plan_view}}}",
                f"trainer: {{backend: verl, max_prompt_tokens: {PROMPT}, max_response_tokens: {response},",
                "  tasks_per_step: 1, group_size: 2, gpus_per_node: 1, rollout_engine: sglang,",
                "  micro_batch_per_gpu: 1}",
                f"logging: {{root: {tmp_path / 'runs'}, wandb: disabled}}",
            ]
        )
        + "\n"
    )
    spec = load_spec(path)
    return spec, composed_config(spec, tmp_path)


class SmolServer:
    """verl's server_manager.generate, answered by the real SmolLM2 (greedy) with its log-probs."""

    def __init__(self):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(resolve_model_dir(EMBEDDED_POLICY)).eval()
        self.lock = threading.Lock()
        self.calls: dict[str, list[tuple[list[int], list[int], int]]] = {}
        self.logprobs: dict[str, list[float]] = {}  # per request, every turn's log-probs in order

    def _generate(self, prompt_ids: list[int], max_tokens: int) -> tuple[list[int], list[float]]:
        with self.lock, torch.no_grad():
            # One torch thread (set per thread: this runs on a worker thread): on a small shared CI
            # machine two threads were measured 10x slower than one for this 135M model.
            torch.set_num_threads(1)
            out = self.model.generate(
                torch.tensor([prompt_ids]),
                max_new_tokens=max_tokens,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=2,
            )
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        logps = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, ids, strict=True)]
        return ids, logps

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        ids, logps = await asyncio.to_thread(self._generate, list(prompt_ids), sampling_params["max_tokens"])
        self.calls.setdefault(request_id, []).append((list(prompt_ids), ids, sampling_params["max_tokens"]))
        self.logprobs.setdefault(request_id, []).extend(logps)
        return TokenOutput(token_ids=ids, log_probs=logps, stop_reason="completed")


class ExpertServer:
    """Answers each turn with the game's next gold action, so the episode is won for real."""

    def __init__(self, tokenizer, plan: list[str]):
        self.tokenizer, self.plan, self.turns = tokenizer, plan, {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        k = self.turns[request_id] = self.turns.get(request_id, -1) + 1
        text = f"<action>{self.plan[k]}</action>"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def batch(spec, train_ids: list[int], val: bool, n: int, step: int = 1) -> DataProto:
    """The columns verl's dataset and trainer hand to the loops (n copies per task share a uid)."""
    env = TwxEnv(spec.environment)
    tasks = [t for i, t in enumerate(env.tasks("train")) if i in train_ids]
    rows = [r for r in task_rows(tasks, "twx", validation=False) for _ in range(n)]
    if val:
        rows += task_rows(env.tasks("eval"), "twx", validation=True)
    return proto(rows, step)


def proto(rows: list[dict], step: int = 1) -> DataProto:
    return rows_batch(rows, step)


@pytest.fixture(scope="module")
def smol():
    return SmolServer()


async def test_episodes_with_the_real_policy(tmp_path, monkeypatch, smol):
    # The loader refuses a budget that cannot hold max_turns of twx's typical turns (~180 tokens);
    # this test wants an episode cut by the budget at run time, so it lowers that estimate.
    monkeypatch.setattr(TwxEnvSpec, "TURN_TOKENS", 50)
    spec, cfg = make_spec(tmp_path)
    service, worker = loop_worker(cfg, monkeypatch, server_manager=smol)
    advice = "Read the task, then take the item it names."
    version = service.scaffold.store.apply([AddEdit(kind="skill", scope="general", text=advice)], step=0)
    tok = worker.tokenizer

    out = await worker.generate_sequences(batch(spec, [1], val=True, n=2))

    assert tuple(out.batch["prompts"].shape) == (3, PROMPT)
    assert tuple(out.batch["responses"].shape) == (3, RESPONSE)
    versions = list(out.non_tensor_batch["scaffold_version"])
    agents = list(out.non_tensor_batch["agent_name"])
    uids = list(out.non_tensor_batch["uid"])
    # One group of two: one probe (no scaffold), one with the pinned version; validation: never.
    assert uids[0] == uids[1] and sorted(versions[:2]) == ["", version.hash]
    assert agents[2] == "pats_validation" and versions[2] == ""

    for i in range(3):
        prompt_len = int(out.batch["attention_mask"][i, :PROMPT].sum())
        prompt = out.batch["prompts"][i, PROMPT - prompt_len :].tolist()
        prompt_text = tok.decode(prompt)
        assert (HEADER in prompt_text) == (versions[i] != "")  # the scaffold only where it was pinned
        assert ("- " + advice in prompt_text) == (versions[i] != "")

        valid = int(out.batch["attention_mask"][i, PROMPT:].sum())
        assert 0 < valid <= RESPONSE  # trimmed to rollout.response_length
        response = out.batch["responses"][i, :valid].tolist()
        mask = out.batch["response_mask"][i, :valid].tolist()
        assert out.batch["response_mask"][i, valid:].sum() == 0
        # The policy's own tokens (mask 1) are exactly what the server generated, turn after turn.
        request_id, request = next((r, c) for r, c in smol.calls.items() if c[0][0] == prompt)
        generated = [t for _, ids, _ in request for t in ids]
        assert [t for t, m in zip(response, mask, strict=True) if m] == generated[: sum(mask)]
        assert all(max_tokens <= MAX_NEW for _, _, max_tokens in request)  # per-turn max_tokens
        # Environment tokens (mask 0): the next observations, never trained on.
        env_text = tok.decode([t for t, m in zip(response, mask, strict=True) if not m])
        turns = out.non_tensor_batch["turns"][i]
        if len(request) > 1:
            assert env_text.count("Observation:") == len(request) - 1
        assert turns == len(request)
        # 16-token turns and ~150-token observations: the 300-token budget ends the episode before
        # the 4-turn limit (truncated), and nothing past it was kept.
        assert turns < 4 and out.non_tensor_batch["truncated"][i] == 1.0
        # Each later turn's prompt is the previous one plus its tokens: nothing was re-tokenized.
        for (p0, ids0, _), (p1, _, _) in zip(request, request[1:], strict=False):
            assert p1[: len(p0) + len(ids0)] == p0 + ids0
        # Log-probs ride along: on policy tokens exactly the server's, in order (finite, negative, and
        # not all zero: a greedy token's log-prob can round to 0.0, so they are matched, not filtered),
        # on environment tokens 0.
        logps = out.batch["rollout_log_probs"][i, :valid].tolist()
        policy_logps = [lp for lp, m in zip(logps, mask, strict=True) if m]
        assert policy_logps == pytest.approx(smol.logprobs[request_id][: sum(mask)], abs=1e-6)
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in policy_logps) and sum(policy_logps) < -1.0
        assert all(lp == 0.0 for lp, m in zip(logps, mask, strict=True) if not m)
        # The reward sits on the last response token (0: SmolLM2 does not win these games greedily).
        assert float(out.batch["rm_scores"][i].sum()) == float(out.batch["rm_scores"][i, valid - 1])
    # The service got every training trajectory; the step is complete, so its review ran.
    await service.wait_reviews()
    state = await service.state()
    assert state.reviewed_steps == (0,) and state.late_reports == 0
    step_end = read_events(Path(cfg.pats.run_dir) / "events.jsonl", StepEndEvent)[0]
    assert step_end.metrics["train/groups"] == 1.0


async def expert_worker(
    tmp_path, monkeypatch, split: str, placement: str = "system", plan_view: str = "static"
):
    """(spec, service, worker, task, plan): a loop worker whose server plays the task's expert plan."""
    # In the turn, the view (up to view_tokens, 256) comes with every observation: the loader asks room for it.
    response = 1600 if placement == "system" else 3200
    spec, cfg = make_spec(tmp_path, max_turns=8, response=response, placement=placement, plan_view=plan_view)
    task, plan = await expert_task(TwxEnv(spec.environment), split)
    service, worker = loop_worker(cfg, monkeypatch)
    worker.llm_client = ExpertServer(worker.tokenizer, plan)
    return spec, service, worker, task, plan


async def test_a_won_episode_scores_one(tmp_path, monkeypatch):
    spec, _, worker, _, plan = await expert_worker(tmp_path, monkeypatch, "train")

    out = await worker.generate_sequences(batch(spec, [0], val=False, n=2))

    assert list(out.non_tensor_batch["success"]) == [1.0, 1.0]
    assert list(out.non_tensor_batch["turns"]) == [float(len(plan))] * 2
    for i in range(2):
        valid = int(out.batch["attention_mask"][i, PROMPT:].sum())
        assert float(out.batch["rm_scores"][i, valid - 1]) == 1.0
        assert float(out.batch["rm_scores"][i].sum()) == 1.0
        mask = out.batch["response_mask"][i, :valid].tolist()
        # len(plan) policy turns, len(plan) - 1 observations between them: 2 * len(plan) - 1 runs.
        runs = 1 + sum(a != b for a, b in zip(mask, mask[1:], strict=False))
        assert runs == 2 * len(plan) - 1 and mask[0] == 1 and mask[-1] == 1
    assert len(plan) >= 2


async def test_the_second_validation_pass_plays_under_the_current_scaffold_and_reports_nothing(
    tmp_path, monkeypatch
):
    _, service, worker, task, _ = await expert_worker(tmp_path, monkeypatch, "eval")
    version = service.scaffold.store.apply(
        [AddEdit(kind="skill", scope="general", text="Look first.")], step=0
    )

    out = await worker.generate_sequences(
        proto(task_rows([task], "twx", validation=True, with_scaffold=True))
    )

    assert list(out.non_tensor_batch["scaffold_version"]) == [version.hash]
    assert list(out.non_tensor_batch["scaffolded"]) == [True] and list(out.non_tensor_batch["success"]) == [
        1.0
    ]
    prompt_len = int(out.batch["attention_mask"][0, :PROMPT].sum())
    assert "- Look first." in worker.tokenizer.decode(out.batch["prompts"][0, PROMPT - prompt_len :].tolist())
    state = await service.state()
    assert state.open_groups == 0 and state.reviewed_steps == (), "validation never feeds a review"


async def test_a_scaffold_placed_in_the_turn_stands_before_every_turns_actions(tmp_path, monkeypatch):
    _, service, worker, task, plan = await expert_worker(tmp_path, monkeypatch, "eval", placement="turn")
    service.scaffold.store.apply([AddEdit(kind="skill", scope="general", text="Look first.")], step=0)

    out = await worker.generate_sequences(
        proto(task_rows([task], "twx", validation=True, with_scaffold=True))
    )

    prompt_len = int(out.batch["attention_mask"][0, :PROMPT].sum())
    valid = int(out.batch["attention_mask"][0, PROMPT:].sum())
    ids = out.batch["prompts"][0, PROMPT - prompt_len :].tolist() + out.batch["responses"][0, :valid].tolist()
    text = worker.tokenizer.decode(ids)
    system, chat = text.split("<|im_start|>user", 1)
    assert HEADER not in system, "the system part stays bare: the guidance is in the turns"
    users = [part.split("<|im_end|>")[0] for part in chat.split("<|im_start|>user")]
    assert len(users) == len(plan) and list(out.non_tensor_batch["success"]) == [1.0]
    for user in users:  # every turn: observation, guidance, then the admissible actions
        assert "- Look first." in user and user.index(HEADER) < user.index("Admissible actions:"), user


@pytest.mark.parametrize("plan_view", ["progress", "next"])
async def test_each_turn_shows_the_plans_progress_as_the_local_backend_does(tmp_path, monkeypatch, plan_view):
    _, service, worker, task, plan = await expert_worker(
        tmp_path, monkeypatch, "eval", placement="turn", plan_view=plan_view
    )
    text = "Steps to try: " + " -> ".join(plan)
    version = service.scaffold.store.apply([AddEdit(kind="plan", scope=f"task:{task.id}", text=text)], step=0)

    out = await worker.generate_sequences(
        proto(task_rows([task], "twx", validation=True, with_scaffold=True))
    )

    prompt_len = int(out.batch["attention_mask"][0, :PROMPT].sum())
    valid = int(out.batch["attention_mask"][0, PROMPT:].sum())
    ids = out.batch["prompts"][0, PROMPT - prompt_len :].tolist() + out.batch["responses"][0, :valid].tolist()
    chat = worker.tokenizer.decode(ids).split("<|im_start|>user", 1)[1]
    users = [part.split("<|im_end|>")[0] for part in chat.split("<|im_start|>user")]
    assert len(users) == len(plan) and list(out.non_tensor_batch["success"]) == [1.0]
    assert list(out.non_tensor_batch["scaffold_version"]) == [version.hash]
    view = f"{HEADER}\nThis task:\n- Plan: {text}"
    for k, user in enumerate(users):  # turn k: the first k steps taken, the same guidance as show_plans
        # Along the gold path every step that moves the game is admissible when reached, so the line
        # shown without the admissible list is the one shown with it.
        assert show_plans(view, plan[:k], plan_view) in user.split("\n\n"), user
        upcoming = next(s for s in plan[k:] if not changes_nothing(s))  # never 'look around'
        assert (f"Next action: {upcoming}" in user) == (plan_view == "next")
        assert (f"{upcoming} [next]" in user) == (plan_view == "progress")


class LongWindedServer:
    """A policy that writes its whole allowance every turn: `look` for the first `looks` turns, then
    the game's walkthrough. Odd turns name the action, then ramble on until they are cut at max_tokens
    (no end-of-turn token: the loop closes the turn); even turns ramble first and close with the action
    and the end-of-turn token, exactly max_tokens tokens in all."""

    def __init__(self, tokenizer, plan: list[str], looks: int):
        self.tokenizer, self.plan, self.turns = tokenizer, ["look"] * looks + plan, {}
        self.max_tokens: list[int] = []

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        k = self.turns[request_id] = self.turns.get(request_id, -1) + 1
        limit = sampling_params["max_tokens"]
        self.max_tokens.append(limit)
        action = self._ids(f"<action>{self.plan[k]}</action>")
        ramble = self._ids(" I should check what is around me before I move on to the next thing." * 40)
        if k % 2:
            ids = (action + ramble)[:limit]
        else:
            ids = ramble[: limit - len(action) - 1] + action + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


async def test_a_full_length_alfworld_episode_fits_the_shipped_budget_and_wins(
    tmp_path, tmp_path_factory, monkeypatch, shared_data, repo
):
    """The shipped ALFWorld spec's budget (max_turns, max_new_tokens, max_prompt/response_tokens) on
    a real game, with a policy that writes all max_new_tokens every turn: max_turns - len(plan)
    harmless `look`s, then the walkthrough, won on the last turn with nothing cut."""
    tarball = shared_data / "alfworld" / "json_2.1.1_valid_seen.tar.xz"
    # The same cache folder as the ALFWorld tests, so the tarball is unpacked once per session.
    monkeypatch.setenv("PATS_CACHE", str(tmp_path_factory.getbasetemp() / "pats-cache"))
    shipped = load_spec(repo / "experiments/alfworld/pats.yaml", [f"environment.data_dir={tarball}"])
    overrides = [
        f"environment.data_dir={tarball}",
        "environment.train_split=valid_seen",
        "environment.task_types=[pick_and_place_simple]",
        "environment.num_train_tasks=1",
        "environment.num_eval_tasks=1",
        f"policy.model={EMBEDDED_POLICY}",  # its tokenizer stands in for Qwen's (no download)
        "trainer.gpus_per_node=1",
        "trainer.rollout_engine=sglang",  # verl's config checks pass on a CPU machine with sglang only
        "trainer.micro_batch_per_gpu=1",
        "trainer.tasks_per_step=1",
        "trainer.group_size=2",
        "scaffold.probe_fraction=0.5",
        f"logging.root={tmp_path / 'runs'}",
        "logging.wandb=disabled",
    ]
    spec = load_spec(repo / "experiments/alfworld/pats.yaml", overrides)
    tr, turns, max_new = spec.trainer, spec.environment.max_turns, spec.policy.max_new_tokens
    assert (turns, max_new, tr.max_prompt_tokens, tr.max_response_tokens) == (
        shipped.environment.max_turns,
        shipped.policy.max_new_tokens,
        shipped.trainer.max_prompt_tokens,
        shipped.trainer.max_response_tokens,
    )
    cfg = composed_config(spec, tmp_path)
    from pats.envs.alfworld.env import AlfworldEnv

    task, plan = await expert_task(AlfworldEnv(spec.environment))
    _, worker = loop_worker(cfg, monkeypatch)
    looks = turns - len(plan)
    worker.llm_client = server = LongWindedServer(worker.tokenizer, plan, looks)

    out = await worker.generate_sequences(proto(task_rows([task], "alfworld", validation=True)))

    assert list(out.non_tensor_batch["turns"]) == [float(turns)]
    assert list(out.non_tensor_batch["success"]) == [1.0] and list(out.non_tensor_batch["truncated"]) == [0.0]
    assert list(out.non_tensor_batch["invalid_actions"]) == [0.0]  # every long output was read
    assert server.max_tokens == [max_new] * turns, "the budget never shortened a turn"
    prompt, response = tr.max_prompt_tokens, tr.max_response_tokens
    prompt_len = int(out.batch["attention_mask"][0, :prompt].sum())
    valid = int(out.batch["attention_mask"][0, prompt:].sum())
    assert prompt_len < prompt and valid < response, "nothing was cut"
    # The observations alone (~50 x 248, what the old check counted) fit 16384; the episode does not.
    assert valid > 16384
    mask = out.batch["response_mask"][0, :valid].tolist()
    logps = out.batch["rollout_log_probs"][0, :valid].tolist()
    # Every output's max_new tokens are the policy's (mask 1), plus a closing token (mask 0) when cut.
    assert sum(mask) == turns * max_new
    assert all((lp == -0.5) == (m == 1) for lp, m in zip(logps, mask, strict=True))
    assert float(out.batch["rm_scores"][0, valid - 1]) == 1.0 == float(out.batch["rm_scores"][0].sum())
