"""The spec as verl's Hydra config: one function builds the overrides, two helpers compose and check.

`verl_overrides` is the one place that maps spec fields onto verl keys (GRPO, group size, batch and
length settings, memory (dynamic batch sizing, fused kernels, checkpointing, offload, checkpoints kept:
pats.backends.verl.plan estimates what they cost), LoRA, KL, rollout engine, the pats agent loops,
logging). `trainer.overrides` from
the spec come last, so a user can change any verl key without a pats release. pats' own settings
travel in the config under `pats.*` (`pats.spec`, `pats.run_dir`): the agent loops read them from
the trainer config they are given, so the agent loop YAML holds nothing but class names.

verl's sync replay buffer is replaced by pats' (`SAMPLER`, pats.backends.verl.sampler), which ends the
job when the scaffold service stopped the run (verl's own only logs the failed groups).

Ray workers on other nodes do not inherit the launching shell: W&B's mode and the variables pats'
environments read (`WORKER_ENV`: where the ALFWorld games, the shared data and the pats cache are)
travel in the job's runtime env (`ray_kwargs.ray_init.runtime_env.env_vars`).

Departures from the local backend: verl optimizes the token-mean PPO loss over whole multi-turn
episodes (the local backend weights each turn 1/turns); `policy.dtype` is not mapped (verl trains
FSDP with fp32 master weights and rolls out in bf16, its defaults).
"""

from __future__ import annotations

import copy
import importlib
import os
from collections.abc import Mapping, Sequence

from pats.errors import PrerequisiteError, SpecError, SpecIssue, install_hint
from pats.spec.models import ExperimentSpec

TRAIN_LOOP = "pats_agent"  # agent_name of training rows
VALIDATION_LOOP = "pats_validation"  # agent_name of validation rows: never adds a scaffold
# agent_name of the second validation pass (eval.with_scaffold): the current scaffold, for the reliance gap
SCAFFOLD_VALIDATION_LOOP = "pats_validation_scaffold"
INSTALL_HINT = (
    f"the verl backend needs verl 0.9.1 and its agent-loop extras: {install_hint('verl')} "
    '(GPU nodes also need a rollout engine: `pip install "verl[vllm]==0.9.1"` or `verl[sglang]`)'
)
# Variables pats' environments read inside Ray workers: ALFWorld's games (data_dir: null), the shared
# data folder (banks, QA sets, corpora) and the cache where ALFWorld tarballs and converted models go.
WORKER_ENV = ("ALFWORLD_DATA", "PATS_DATA", "PATS_CACHE")
RUNTIME_ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"
# The replay buffer that stops the job when the scaffold service stopped the run (pats.backends.verl.
# sampler), and the sampler_kwargs it reads: the service's address, and what verl gives its own sync
# buffer, from the keys verl reads them from.
SAMPLER = "trainer.v1.sampler"
SAMPLER_KWARGS = {
    "sync_refill_failed_groups": f"${{{SAMPLER}.sync_refill_failed_groups}}",
    "train_batch_size": "${data.train_batch_size}",
    "gen_batch_size": "${oc.select:data.gen_batch_size,null}",
}


def require_verl():
    """Import verl, or raise a PrerequisiteError naming the install command."""
    try:
        import verl  # noqa: F401
        from verl.experimental.agent_loop import agent_loop  # noqa: F401  (needs the agent-loop extras)
    except ImportError as err:
        raise PrerequisiteError(f"{INSTALL_HINT} ({err})") from None
    return verl


def import_error(module: str) -> str | None:
    """None if `module` imports here, else why not (a missing package, or one built for another torch)."""
    try:
        importlib.import_module(module)
    except Exception as err:  # ImportError, OSError from a compiled extension, vLLM's own checks
        return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
    return None


def _list(values: Sequence[str]) -> str:
    return "[" + ",".join(values) + "]"


def verl_overrides(
    spec: ExperimentSpec,
    *,
    train_files: str,
    val_files: str,
    agent_loops: str,
    spec_path: str,
    run_dir: str,
    model_path: str,
    worker_env: Mapping[str, str] | None = None,
) -> list[str]:
    """verl Hydra overrides (`key=value`) for `spec`. Paths are passed in as strings so a launch
    script can use shell variables ($HERE/train.parquet) where `pats run` uses absolute paths.
    `worker_env` (see `worker_env`) goes into the Ray runtime env, before `trainer.overrides`."""
    tr, pol, ev = spec.trainer, spec.policy, spec.eval
    if tr.backend != "verl":
        raise ValueError(f"spec {spec.name} has trainer.backend {tr.backend}; set trainer.backend: verl")
    micro = tr.micro_batch_per_gpu
    loggers = ["console"] if spec.logging.wandb == "disabled" else ["console", "wandb"]
    out = [
        # GRPO: group-normalized advantages over rollout.n samples of each prompt, no critic.
        "algorithm.adv_estimator=grpo",
        f"algorithm.norm_adv_by_std_in_grpo={tr.normalize_advantage_std}",
        "algorithm.use_kl_in_reward=False",
        # Data: one row per task; a step draws tasks_per_step rows.
        f"data.train_files={train_files}",
        f"data.val_files={val_files}",
        f"data.train_batch_size={tr.tasks_per_step}",
        # The prompt budget covers instructions + task + scaffold: verl cuts longer prompts from the
        # left (dropping the scaffold first) with only a warning.
        f"data.max_prompt_length={tr.max_prompt_tokens}",
        # Every policy and environment token after the first prompt counts toward the response.
        f"data.max_response_length={tr.max_response_tokens}",
        f"data.seed={spec.seed}",
        "data.return_raw_chat=True",
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.actor.optim.lr={tr.lr}",
        f"actor_rollout_ref.actor.optim.weight_decay={tr.weight_decay}",
        f"actor_rollout_ref.actor.optim.clip_grad={tr.max_grad_norm}",
        f"actor_rollout_ref.actor.ppo_epochs={tr.epochs}",
        # One optimizer step per epoch over the step's groups, as the local backend does.
        f"actor_rollout_ref.actor.ppo_mini_batch_size={tr.tasks_per_step}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.actor.clip_ratio_low={tr.clip_low}",
        f"actor_rollout_ref.actor.clip_ratio_high={tr.clip_high}",
        # KL to the reference as a loss term (GRPO's choice), not folded into the reward.
        f"actor_rollout_ref.actor.use_kl_loss={tr.kl_coef > 0}",
        f"actor_rollout_ref.actor.kl_loss_coef={tr.kl_coef}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        # Memory (pats.backends.verl.plan estimates it from these same fields).
        f"actor_rollout_ref.model.enable_gradient_checkpointing={tr.gradient_checkpointing}",
        f"actor_rollout_ref.model.use_fused_kernels={tr.fused_kernels}",
        f"actor_rollout_ref.actor.fsdp_config.param_offload={tr.param_offload}",
        f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={tr.optimizer_offload}",
        # The old-log-prob pass also computes the entropy (a metric): in chunks of 2048 tokens, so the
        # full-vocabulary softmax of a whole pass never exists at once.
        "actor_rollout_ref.actor.entropy_from_logits_with_chunking=True",
        f"actor_rollout_ref.rollout.name={tr.rollout_engine}",
        "actor_rollout_ref.rollout.mode=async",
        f"actor_rollout_ref.rollout.n={tr.group_size}",
        f"actor_rollout_ref.rollout.temperature={pol.temperature}",
        f"actor_rollout_ref.rollout.top_p={pol.top_p}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tr.tensor_parallel}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={tr.gpu_memory_utilization}",
        f"actor_rollout_ref.rollout.val_kwargs.n={ev.samples_per_task}",
        f"actor_rollout_ref.rollout.val_kwargs.do_sample={not ev.greedy}",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={0 if ev.greedy else pol.temperature}",
        f"actor_rollout_ref.rollout.val_kwargs.top_p={1.0 if ev.greedy else pol.top_p}",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={spec.environment.max_turns}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_loops}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={TRAIN_LOOP}",
        # The scaffold service revises when a step's groups are all in; the sync trainer finishes a
        # step's rollouts before it starts the next (async modes would mix steps).
        "trainer.use_v1=True",
        "trainer.v1.trainer_mode=sync",
        f"trainer.nnodes={tr.nnodes}",
        f"trainer.n_gpus_per_node={tr.gpus_per_node}",
        f"trainer.total_training_steps={tr.steps}",
        f"trainer.total_epochs={tr.steps}",  # an upper bound: the step count ends the run
        f"trainer.save_freq={tr.checkpoint_every}",
        f"trainer.test_freq={ev.every}",
        f"trainer.val_before_train={ev.at_start}",
        f"trainer.project_name={spec.logging.project}",
        f"trainer.experiment_name={spec.name}",
        f"trainer.logger={_list(loggers)}",
        f"trainer.default_local_dir={run_dir}/checkpoints",
        f"trainer.max_actor_ckpt_to_keep={'null' if tr.checkpoints_kept is None else tr.checkpoints_kept}",
        # Read by the pats agent loops and the scaffold service (see the module docstring).
        f"+pats.spec={spec_path}",
        f"+pats.run_dir={run_dir}",
        # verl's sync replay buffer, which also ends the job when the scaffold service stopped the run.
        f"{SAMPLER}.custom_sampler.path=pkg://pats.backends.verl.sampler",
        f"{SAMPLER}.custom_sampler.name=PatsReplayBuffer",
        f"+{SAMPLER}.sampler_kwargs.pats_spec={spec_path}",
        f"+{SAMPLER}.sampler_kwargs.pats_run_dir={run_dir}",
        *(f"+{SAMPLER}.sampler_kwargs.{key}='{value}'" for key, value in SAMPLER_KWARGS.items()),
    ]
    if tr.token_budget_per_gpu is not None:
        # Dynamic batch sizing: passes packed up to the budget (the update, the old and the reference
        # log-probs alike) instead of micro_batch_per_gpu sequences of any length.
        budget = tr.token_budget_per_gpu
        out += [
            "actor_rollout_ref.actor.use_dynamic_bsz=True",
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={budget}",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
            f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={budget}",
            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True",
            f"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={budget}",
        ]
    if pol.lora is not None:
        out += [
            f"actor_rollout_ref.model.lora_rank={pol.lora.rank}",
            f"actor_rollout_ref.model.lora_alpha={pol.lora.alpha}",
            f"actor_rollout_ref.model.target_modules={_list(pol.lora.target_modules)}",
            # The rollout engine loads the base weights from disk, then receives the adapter (verl's
            # LoRA recipes); layered_summon gathers the FSDP shards one layer at a time for that sync.
            "actor_rollout_ref.rollout.load_format=safetensors",
            "actor_rollout_ref.rollout.layered_summon=True",
        ]
        if pol.init_adapter is not None:  # verl loads it with PeftModel.from_pretrained (its config wins)
            out.append(f"actor_rollout_ref.model.lora_adapter_path={pol.init_adapter}")
    if spec.logging.wandb != "disabled":
        # W&B runs inside Ray actors: its mode travels in the runtime env, not the shell.
        out += [
            f"+{RUNTIME_ENV_VARS}.WANDB_MODE={spec.logging.wandb}",
            f"+{RUNTIME_ENV_VARS}.WANDB_DIR={run_dir}",
        ]
    out += [f"+{RUNTIME_ENV_VARS}.{name}='{value}'" for name, value in (worker_env or {}).items()]
    return out + list(tr.overrides)


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The `WORKER_ENV` variables set (non-empty) in `environ`, for the Ray runtime env."""
    return {name: environ[name] for name in WORKER_ENV if environ.get(name)}


def config_dir() -> str:
    verl = require_verl()
    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def compose(overrides: Sequence[str]):
    """verl's `ppo_trainer` config with `overrides`, composed by Hydra as `main_ppo` would."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        return hydra_compose("ppo_trainer", overrides=list(overrides))


def check_overrides(overrides: Sequence[str]):
    """Compose `overrides` and run `check`; what verl refuses becomes a SpecError that says so.
    Returns the composed config and the checks that could not run here (see `check`)."""
    try:
        config = compose(overrides)
        return config, check(config)
    except Exception as err:  # Hydra's, OmegaConf's and verl's own errors (asserts included)
        message = " ".join(str(err).split()) or type(err).__name__
        raise SpecError(
            SpecIssue(
                "trainer",
                f"verl refuses the composed config ({type(err).__name__}: {message}); change the "
                "spec's trainer settings (or the verl keys in trainer.overrides) so that verl's "
                "validate_config accepts them",
            )
        ) from None


def check(config) -> tuple[str, ...]:
    """verl's own `validate_config`, with the reference/critic flags `main_ppo` derives. Returns the
    checks it could not run here. One needs vllm: the last step of verl 0.9.1's validate_config checks a
    LoRA rank against vLLM's allowed ranks by importing verl's vLLM rollout package, which raises where
    vllm does not import (a CPU machine exporting a LoRA spec); there the rest is checked without that
    step, which `pats run` and launch.sh's preflight (they require vllm) and verl run on the GPU node."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    skipped: tuple[str, ...] = ()
    model = config.actor_rollout_ref.model
    lora = max(model.get("lora_rank", 0) or 0, (model.get("lora") or {}).get("rank", 0) or 0)
    why = import_error("vllm") if lora > 0 and config.actor_rollout_ref.rollout.name == "vllm" else None
    if why is not None:
        skipped = (
            f"verl's check of lora_rank {lora} against vLLM's LoRA ranks imports vllm, which does not "
            f"import here ({why}); the GPU node runs it (launch.sh's preflight requires vllm)",
        )
        config = copy.deepcopy(config)
        model = config.actor_rollout_ref.model
        model.lora_rank = 0
        if model.get("lora") is not None and "rank" in model.lora:
            model.lora.rank = 0
    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    return skipped
