"""The pats agent loops verl runs, one object per sample: a multi-turn episode on a pats environment.

`PatsAgentLoop` (training rows) pins its group's scaffold view from the scaffold service, plays the
episode, reports the trajectory back, and returns an `AgentLoopOutput`; `PatsValidationLoop`
(validation rows) plays the bare prompt and never contacts the service.

An episode is the local backend's (`pats.episode.Episode`: action parsing, environment faults, turns,
reward = sum of step rewards, success = the environment's `won`), with the same instructions, prompt
rendering, scaffold placement (`with_scaffold` on the system part) and per-turn
`policy.max_new_tokens`. Departure: the local backend builds a
fresh prompt per turn with a history window; here the episode is one growing chat (system: rules,
task and scaffold; then user = observation and admissible actions, assistant = the policy's output,
per turn) because verl trains on one token sequence per episode. Tokens are built incrementally
with verl's continuous-token helpers, never by re-tokenizing the history; `response_mask` is 1 on
the policy's tokens only; environment tokens count toward `rollout.response_length`, and the episode
stops (truncated) when the next observation would not fit. A turn ends at any stop token of the
model's generation config (where vLLM stops: Qwen2.5's `<|im_end|>` and `<|endoftext|>`), and only a
turn cut at `max_tokens` is closed with the end-of-turn token. Departure from verl: a first prompt
longer than `rollout.prompt_length` (or vLLM's `max_model_len`) is refused with the numbers, not cut
from the left, and the scaffold service stops the run with that reason.

Environment calls run on a thread with its own event loop per environment instance (`_OffLoopEnv`):
verl runs every sample of a worker on one event loop, and an environment that blocks inside
`async def` would stall them all. Environment instances are pooled per worker process (a TextWorld-
Express instance holds a JVM).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from pats.backends.verl.data import task_of
from pats.backends.verl.service import connect
from pats.envs.prompting import instructions, render_prompt
from pats.episode import Episode, read_output
from pats.errors import PrerequisiteError
from pats.protocols import Env
from pats.scaffold import place, with_scaffold
from pats.spec.models import ExperimentSpec
from pats.types import EMPTY_VIEW, ScaffoldView, Task

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class _OffLoopEnv:
    """An Env whose coroutines run on its own thread and event loop (see the module docstring)."""

    def __init__(self, env: Env):
        self.env = env
        self.parses_output = env.parses_output
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="pats-env", daemon=True).start()

    async def call(self, method: str, *args: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(getattr(self.env, method)(*args), self._loop)
        return await asyncio.wrap_future(future)


@dataclass
class _Settings:
    """What every episode of one spec needs, built once per worker process."""

    spec: ExperimentSpec
    make_env: Callable[[], Env]
    instructions: str
    idle: list[_OffLoopEnv] = field(default_factory=list)  # pooled environment instances

    async def acquire(self) -> _OffLoopEnv:
        if self.idle:
            return self.idle.pop()
        return _OffLoopEnv(await asyncio.to_thread(self.make_env))  # a constructor may block too

    def release(self, env: _OffLoopEnv) -> None:
        self.idle.append(env)


@lru_cache(maxsize=8)
def _settings(spec_path: str) -> _Settings:
    import pats.envs  # noqa: F401  (registers the built-in environments)
    from pats.registry import ENVIRONMENTS
    from pats.spec import load_spec

    spec = load_spec(spec_path)
    make = ENVIRONMENTS.get(spec.environment.kind)
    return _Settings(spec, lambda: make(spec.environment), instructions(spec.environment.kind, "generate"))


class PatsAgentLoop(AgentLoopBase):
    """Training rows: the group's pinned scaffold view, the environment's reward."""

    reports = True  # the trajectory goes back to the scaffold service (training rows only)

    async def _view(self, task: Task, uid: str, kwargs: dict[str, Any]) -> tuple[ScaffoldView, bool]:
        """(view, scaffolded) of this rollout: the group's pin for the step (the first probes: none)."""
        if "global_steps" not in kwargs:
            raise PrerequisiteError(
                "the pats agent loop needs verl's V1 trainer (trainer.use_v1=True), which passes "
                "global_steps to each loop; pats pins one scaffold version per step"
            )
        pinned = await connect(self.spec_path, self.run_dir).pin(
            uid, task.model_dump_json(), int(kwargs["global_steps"])
        )
        return pinned.view, pinned.scaffolded

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        pats_config = self.config.get("pats")
        if pats_config is None or not pats_config.get("spec") or not pats_config.get("run_dir"):
            raise PrerequisiteError(
                "the pats agent loops read pats.spec and pats.run_dir from the verl config: launch with "
                "`pats run SPEC`, or with the overrides `pats export verl SPEC OUT/` writes to OUT/launch.sh"
            )
        self.spec_path, self.run_dir = str(pats_config.spec), str(pats_config.run_dir)
        self.settings = _settings(self.spec_path)
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        task = task_of(kwargs["extra_info"])
        uid = str(kwargs["uid"])
        view, scaffolded = await self._view(task, uid, kwargs)
        episode = Episode(f"{uid}-{uuid4().hex[:8]}", task, view)
        env = await self.settings.acquire()
        try:
            prompt_ids, ids, mask, logprobs, messages, versions = await self._play(
                env, task, episode, sampling_params
            )
        except PrerequisiteError as err:  # the rows cannot be played: stop the run, with why
            await connect(self.spec_path, self.run_dir).stop(str(err))
            raise
        finally:
            self.settings.release(env)
        rollout = episode.record(scaffolded)
        if self.reports:
            await connect(self.spec_path, self.run_dir).report(uid, rollout.model_dump_json())
        n = self.response_length
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=ids[len(prompt_ids) :][:n],
            response_mask=mask[:n],
            response_logprobs=logprobs[:n] if logprobs else None,
            reward_score=episode.reward,
            num_turns=len(messages),
            metrics=AgentLoopMetrics(),
            extra_fields={
                "scaffold_version": view.version,
                "scaffolded": scaffolded,
                "task_id": task.id,
                "task_type": task.type,
                # Same keys on every row (verl stacks them by the first row's keys).
                "reward_extra_info": {
                    "success": float(episode.won),
                    "turns": float(len(episode.turns)),
                    "invalid_actions": float(sum(not t.valid for t in episode.turns)),
                    "truncated": float(rollout.truncated),
                    "env_error": float(bool(episode.error)),
                },
                "turn_scores": [t.reward for t in episode.turns],
                "tool_rewards": [],
                **versions,
            },
        )

    async def _play(self, env: _OffLoopEnv, task: Task, ep: Episode, sampling_params: dict[str, Any]):
        """(prompt ids, all ids, response mask, response logprobs, messages, weights versions) of one
        episode. The versions are verl's `min_global_steps` (of the first turn) and `max_global_steps`
        (of the last), which its server client stamps on every output: the V1 trainer tags each
        trajectory with them and reads them as integers for its staleness metrics (None fails the
        step), as verl's own tool agent loop carries them."""
        spec = self.settings.spec
        await ep.reset(lambda t: env.call("reset", t))
        state = ep.current
        admissible = None if env.parses_output else (list(state.admissible) or None)
        scaffold = spec.scaffold
        # The system part is fixed for the episode; guidance in the turn follows the episode's progress
        # under scaffold.plan_view (static: the same text every turn).
        system_view, guidance = place(
            ep.view, scaffold.placement, scaffold.plan_view, ep.actions_taken(), admissible or ()
        )
        parts = render_prompt(
            self.settings.instructions, state.task_description, (), state.observation, admissible, 0, guidance
        )
        messages = [
            {
                "role": "system",
                "content": with_scaffold(parts.system, system_view),
            },
            {"role": "user", "content": parts.user},
        ]
        # verl's ct_build_initial_tokens would cut a long prompt from the left with only a warning: the
        # same builder, uncut, and a refusal instead (_check_first_prompt).
        builder = self.continuous_token_builder
        prompt_ids = await self.loop.run_in_executor(None, lambda: builder.build_initial_tokens(messages))
        self._check_first_prompt(task, len(prompt_ids))
        # vLLM refuses a request longer than its max_model_len (unset: the model's context, which verl
        # checks covers prompt + response); a smaller one set by the user bounds every turn.
        context = self.rollout_config.get("max_model_len") or len(prompt_ids) + self.response_length
        ids = list(prompt_ids)
        mask: list[int] = []
        logprobs: list[float] = []
        versions: dict[str, int] = {}
        request_id = uuid4().hex  # one per trajectory: the server's prefix cache keeps the history
        # verl annotates its tokenizer `AutoTokenizer`, the factory class, not the tokenizer it holds.
        tokenizer = cast("PreTrainedTokenizerBase", self.tokenizer)
        eos = tokenizer.eos_token_id
        stops = stop_token_ids(str(self.config.actor_rollout_ref.model.path), eos)
        for _ in range(spec.environment.max_turns):
            room = min(self.response_length - len(mask), context - len(ids))
            if ep.done or room <= 0:
                break
            params = {**sampling_params, "max_tokens": min(spec.policy.max_new_tokens, room)}
            out = await self.server_manager.generate(
                request_id=request_id, prompt_ids=ids, sampling_params=params
            )
            merged, mask, new_logprobs = await self.ct_merge_assistant_token(
                ids,
                out.token_ids,
                mask,
                logprobs if out.log_probs else None,
                assistant_logprobs=out.log_probs or None,
            )
            ids, logprobs = merged.token_ids, new_logprobs or []
            for key in ("min_global_steps", "max_global_steps"):
                version = (out.extra_fields or {}).get(key)
                if version is not None and (key == "max_global_steps" or key not in versions):
                    versions[key] = version
            if out.token_ids and out.token_ids[-1] not in stops and eos is not None:
                # Cut at max_tokens: close the turn as the chat template would (a context token, mask 0).
                # A turn that ended at any stop token (Qwen2.5: <|im_end|> or <|endoftext|>) is closed.
                ids, mask = ids + [eos], mask + [0]
                logprobs = logprobs + [0.0] if logprobs else logprobs
            text = tokenizer.decode(out.token_ids, skip_special_tokens=True)
            assert isinstance(text, str), "one sequence decodes to one text"
            admissible = None if env.parses_output else (list(ep.current.admissible) or None)
            tokens = {"prompt_tokens": len(ids) - len(out.token_ids), "response_tokens": len(out.token_ids)}
            await ep.step(
                read_output(text, admissible, env.parses_output, **tokens), lambda a: env.call("step", a)
            )
            state = ep.current
            messages.append({"role": "assistant", "content": text})
            if ep.done or len(ep.turns) >= spec.environment.max_turns:
                break
            admissible = None if env.parses_output else (list(state.admissible) or None)
            _, guidance = place(
                ep.view, scaffold.placement, scaffold.plan_view, ep.actions_taken(), admissible or ()
            )
            user = render_prompt("", "", (), state.observation, admissible, 0, guidance).user
            previous = list(messages)
            messages.append({"role": "user", "content": user})
            merged, new_mask, new_logprobs = await self.ct_merge_context_msg(
                previous, messages, ids, mask, logprobs or None
            )
            if len(new_mask) >= self.response_length:
                messages.pop()  # the observation does not fit: the episode ends truncated
                break
            ids, mask, logprobs = merged.token_ids, new_mask, new_logprobs or []
        return prompt_ids, ids, mask, logprobs, messages, versions

    def _check_first_prompt(self, task: Task, tokens: int) -> None:
        """Refuse a first prompt longer than rollout.prompt_length: verl would cut it from the left (the
        system part, with the instructions and the scaffold, first) and train on what is left."""
        limit = int(self.rollout_config.prompt_length)
        context = self.rollout_config.get("max_model_len")
        if context is not None and tokens >= int(context):
            limit = min(limit, int(context) - 1)  # vLLM needs room for one token
        if tokens <= limit:
            return
        raise PrerequisiteError(
            f"the first prompt of task {task.id} has {tokens} tokens, more than the {limit} the rollout "
            f"allows (rollout.prompt_length = trainer.max_prompt_tokens {self.rollout_config.prompt_length}"
            + (f", vLLM's max_model_len {context}" if context is not None else "")
            + "): verl would cut it from the left, the instructions, the task and the scaffold first. "
            f"Raise trainer.max_prompt_tokens to at least {tokens}, or lower scaffold.budget.view_tokens"
        )


@lru_cache(maxsize=8)
def stop_token_ids(model_path: str, eos: int | None) -> frozenset[int]:
    """The tokens that end a turn: the tokenizer's eos and every eos_token_id of the model's generation
    config, where vLLM stops too (Qwen2.5's lists <|im_end|> and <|endoftext|>)."""
    from verl.utils.model import get_generation_config

    ids = set() if eos is None else {int(eos)}
    generation = get_generation_config(model_path)  # a local folder or the HF cache, as verl reads it
    found = None if generation is None else generation.eos_token_id
    if found is not None:
        ids |= {int(i) for i in (found if isinstance(found, list | tuple) else [found])}
    return frozenset(ids)


class PatsValidationLoop(PatsAgentLoop):
    """Validation rows: the bare prompt (the deployment prompt), never a scaffold."""

    reports = False

    async def _view(self, task: Task, uid: str, kwargs: dict[str, Any]) -> tuple[ScaffoldView, bool]:
        return EMPTY_VIEW, False


class PatsScaffoldValidationLoop(PatsAgentLoop):
    """Validation rows of the second pass (eval.with_scaffold): the current scaffold's view of the task,
    for the reliance gap; never reported, so it neither feeds nor waits for a review."""

    reports = False

    async def _view(self, task: Task, uid: str, kwargs: dict[str, Any]) -> tuple[ScaffoldView, bool]:
        return await connect(self.spec_path, self.run_dir).view(task.model_dump_json()), True
