"""The experiment spec: the one source of defaults for every run.

A YAML file is loaded by `pats.spec.loader`, validated once into these frozen models, and nothing
downstream reads YAML or falls back to defaults of its own. Cross-field rules live in
`ExperimentSpec._check_combinations` and report every contradiction at once.

Length (over 450 lines, on purpose): every section of the spec in one file. It is the one
source of defaults, schemas/experiment.schema.json is generated from it, and docs/specs.md walks it
section by section; each model is short. The environment sections, which plugins extend, are in
environments.py, the episode's token budget in budget.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator
from pydantic_core import PydanticCustomError

from pats.spec.base import SpecModel, tag_or_default
from pats.spec.budget import CLOSE_TOKENS, EpisodeBudget, budget_issues
from pats.spec.environments import EnvironmentSpec
from pats.spec.providers import default_key_env, key_mismatch

EMBEDDED_POLICY = "smollm2-135m-instruct"
CardType = Literal["outcome", "contrast", "failure", "utility", "expert"]
DEFAULT_CARDS: tuple[CardType, ...] = ("outcome", "contrast", "failure", "utility")


class LoraSpec(SpecModel):
    rank: int = Field(16, ge=1, le=1024)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    top_layers: int | None = Field(
        None,
        ge=1,
        description="Adapters on the top N decoder layers only: the backward pass stops below them "
        "(a faster update, less capacity). Unset: every layer.",
    )


class PolicySpec(SpecModel):
    model: str = Field(
        EMBEDDED_POLICY,
        description=f"Hugging Face model id or directory; '{EMBEDDED_POLICY}' is the embedded default.",
    )
    dtype: Literal["float32", "bfloat16"] = "float32"
    lora: LoraSpec | None = Field(default_factory=LoraSpec, description="null trains all weights.")
    action: Literal["generate", "score"] = Field(
        "generate",
        description="generate: free text parsed into an action; score: softmax over admissible actions.",
    )
    temperature: float = Field(1.0, gt=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(64, ge=1, le=8192, description="Per turn, in generate mode.")
    score_normalization: Literal["mean", "sum", "distinct_mean", "pmi"] = Field(
        "mean",
        description="score mode: how an action's token log-probs (its text and the end token, after the "
        "prompt) become its score. mean: their mean (length-normalized); sum: their sum (favours short "
        "actions); distinct_mean: the mean over the action's distinguishing tokens only, those after the "
        "longest token prefix it shares with another admissible action ('take' in 'take apple' / 'take "
        "pear'); pmi: the sum minus the same action's sum after a neutral premise that holds only the "
        "turn's last line, 'Admissible actions: ...' (an empty system message, that line as the user "
        "message), the domain-conditional PMI of 'Surface Form Competition' (Holtzman et al., 2021): what "
        "being listed and the action's own words are worth cancels, what the rest of the prompt (task, "
        "observation, history, guidance) adds remains. "
        "The policy samples from softmax(score / temperature) under every rule, and trains that "
        "distribution.",
    )
    init_adapter: str | None = Field(
        None,
        description="A LoRA adapter folder the policy starts from instead of fresh adapters, e.g. "
        "<logging.root>/<name>/warm_start/adapter written by `pats warm-start`; it must have been trained "
        "with this policy.model and policy.lora. Every condition of a comparison can start from the same "
        "one. verl: passed as actor_rollout_ref.model.lora_adapter_path.",
    )


class ScaffoldBudget(SpecModel):
    max_entries: int = Field(12, ge=1, description="Entries per task type before the judge prunes.")
    max_tokens: int = Field(400, ge=1, description="Scaffold tokens per task type before pruning.")
    view_tokens: int = Field(256, ge=1, description="Most scaffold tokens rendered into one prompt.")
    card_tokens: int = Field(256, ge=16, description="Cap on the size of one evidence card.")


class ScaffoldSpec(SpecModel):
    mode: Literal["none", "static", "grow", "pats"] = Field(
        "pats",
        description="none: plain GRPO; static: initial bank, never edited; grow: add-only bank; pats: full loop.",
    )
    cards: tuple[CardType, ...] = Field(DEFAULT_CARDS, description="Evidence card types to build.")
    removal: bool = Field(
        True, description="false disables DELETE and COMPRESS (the removal ablation); grow never removes."
    )
    privileged: bool = Field(False, description="Allow the privileged `expert` card (uses expert plans).")
    task_plans: bool = Field(
        True,
        description="Reviews may add task-scoped plans (from the policy's wins, and from expert plans with the "
        "expert card); false leaves only guidance that can reach other games (general and type-scoped).",
    )
    plans_per_review: int = Field(
        0,
        ge=0,
        le=64,
        description="Task plans an EXPAND or REVISE review may add beyond its mode's skill budget: 0 counts "
        "plans as skills (the published budgets: EXPAND two, REVISE one, so a review that writes the type's "
        "skill has room for one plan at most); trainer.tasks_per_step lets every reviewed game that lacks a "
        "plan get one at its first review. The rules reviser only (an LLM reviser's schema keeps the "
        "published budgets).",
    )
    probe_fraction: float = Field(
        0.25, ge=0.0, lt=1.0, description="Share of each group run without the scaffold (utility card)."
    )
    initial_bank: str | None = Field(None, description="Scaffold bank to start from (pats or SkillRL JSON).")
    placement: Literal["system", "turn"] = Field(
        "system",
        description="Where a rollout's scaffold view is rendered: system, after the instructions and the task "
        "(once per episode); turn, in every turn's user part right before the admissible actions (next to the "
        "decision, where a small policy reads it best). Probes and evaluation carry no scaffold text in "
        "either; both backends render it the same way.",
    )
    plan_view: Literal["static", "progress", "next"] = Field(
        "static",
        description="How a turn shows the view's plan entries ('Steps to try: a -> b -> c'): static, as "
        "written, every turn; progress, each step the episode has already taken marked [done] and the next "
        "one [next] (each action taken, in order, marks the earliest unmarked step with that exact action "
        "string); next, the whole guidance is the single line 'Next action: <the first plan's next step>' "
        "(the view without its plan entries once no plan has a step left). Only how a turn renders the "
        "view: the scaffold itself is unchanged. progress and next need placement: turn (the system part "
        "is the same every turn).",
    )
    budget: ScaffoldBudget = Field(default_factory=ScaffoldBudget)
    min_citations: int = Field(2, ge=0, le=10, description="Distinct cards each edit must cite.")
    review_budget_s: float = Field(
        300.0,
        gt=0,
        description="Seconds the LLM judge and reviser may take per step, retries included; past it the "
        "judge's grades are left out and the rules reviser answers, so training never waits longer.",
    )
    max_failed_reviews: int = Field(
        3,
        ge=1,
        le=1000,
        description="Stop the run after this many reviews in a row raised (a bug in a judge, reviser or "
        "card builder); fewer are logged (review_failed) and the step trains on with the current scaffold.",
    )

    @property
    def reviews(self) -> bool:
        """Whether a judge and reviser run after each step (modes grow and pats; static never edits)."""
        return self.mode in ("grow", "pats")

    @property
    def removes(self) -> bool:
        """Whether edits may delete or compress: only the full loop, and only with removal on."""
        return self.mode == "pats" and self.removal

    @field_validator("cards")
    @classmethod
    def _no_repeats(cls, cards: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({c for c in cards if cards.count(c) > 1})
        if repeated:
            raise ValueError(f"card types listed twice: {', '.join(repeated)}; list each once")
        return cards

    @model_validator(mode="after")
    def _plan_view_in_the_turn(self) -> ScaffoldSpec:
        if self.plan_view != "static" and self.placement != "turn":
            raise ValueError(
                f"plan_view: {self.plan_view} changes the guidance every turn, which only placement: turn "
                "renders (the system part is fixed for the episode); write placement: turn, or plan_view: static"
            )
        return self


class LLMSpec(SpecModel):
    """A model behind LiteLLM, picked by its model string."""

    model: str = Field(description="LiteLLM model string: openai/..., anthropic/..., hosted_vllm/...")
    api_base: str | None = Field(
        None, description="Endpoint for self-hosted models, e.g. http://host:8000/v1."
    )
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable holding the API key (never the key itself). "
        "Unset: the provider's own (openai/ OPENAI_API_KEY, anthropic/ ANTHROPIC_API_KEY, ...; none for "
        "ollama/ and hosted_vllm/), so a model swapped by an override brings its key; null: no key.",
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(1024, ge=16)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0, le=20)
    backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles each retry.")
    concurrency: int = Field(4, ge=1, le=256, description="LLM calls in flight at once.")
    cache: bool = Field(False, description="Cache LLM responses (off: every step asks afresh).")
    preflight: bool = Field(
        True,
        description="pats run first sends this LLM one short request and stops, saying what to fix, when "
        "the key is refused, the model unknown or the server unreachable; false skips it (a failing LLM "
        "then costs its retries every step: the rules reviser answers in its place, a judge's grades "
        "stay unscored).",
    )

    structured: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Ask for answers in a JSON schema built from the records (edits, verdicts), whose enums "
        "hold the scopes, entry ids and card ids shown, through response_format: on sends it (a server "
        "without schema support then refuses every call), off never does (DSPy's free-form fields), auto "
        "sends it where the endpoint enforced a schema on one short probe request (the preflight's, or "
        "the first call's when the preflight is off).",
    )

    @model_validator(mode="before")
    @classmethod
    def _key_follows_provider(cls, data):
        if isinstance(data, dict) and "api_key_env" not in data and isinstance(data.get("model"), str):
            return {**data, "api_key_env": default_key_env(data["model"])}
        return data

    @model_validator(mode="after")
    def _key_fits_provider(self):
        problem = key_mismatch(self.model, self.api_key_env, self.api_base)
        if problem:
            raise PydanticCustomError("key_mismatch", problem)
        return self

    @field_validator("model")
    @classmethod
    def _provider_prefix(cls, model: str) -> str:
        if "/" not in model or model.startswith("/") or model.endswith("/"):
            raise ValueError(
                f"'{model}' has no provider prefix; write a LiteLLM model string such as "
                "'openai/gpt-4o-mini', 'anthropic/claude-3-5-haiku-latest' or 'hosted_vllm/<model>'"
            )
        return model


class _JudgeCommon(SpecModel):
    ema_alpha: float = Field(0.1, gt=0.0, le=1.0, description="Weight of the newest group success.")
    compress_threshold: float = Field(0.7, ge=0.0, le=1.0)
    revise_threshold: float = Field(0.3, ge=0.0, le=1.0)
    ema_start: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Where each success average (per type and per task) starts: null, the first group "
        "sets it; 0.0, as the small-scale PATS reproduction's (removal then acts gradually as success "
        "rises).",
    )
    removal_warmup: int = Field(
        0,
        ge=0,
        description="Reviews of a task type before any removal driven by evidence (withdrawals, COMPRESS, "
        "all-passed plans, harm, grades); PRUNE for the budget is not held back. The reproduction: 4.",
    )
    removal_threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Success average at or above which a scope's entries are withdrawn (after the warm-up, "
        "with scaffold.removal on, at REVISE, COMPRESS or PRUNE reviews: EXPAND never deletes): "
        "task-scoped entries by their task's average, type-scoped by the type's; such a scope gets no "
        "new entries while it stays there. null: off. The reproduction: 0.25.",
    )

    @model_validator(mode="after")
    def _ordered(self):
        if self.revise_threshold > self.compress_threshold:
            raise ValueError(
                f"revise_threshold ({self.revise_threshold}) must not exceed compress_threshold "
                f"({self.compress_threshold}): REVISE sits between EXPAND and COMPRESS"
            )
        return self


class StatsJudgeSpec(_JudgeCommon):
    kind: Literal["stats"] = "stats"


class LLMJudgeSpec(_JudgeCommon):
    kind: Literal["llm"] = "llm"
    llm: LLMSpec
    rubric: str | None = Field(None, description="Rubric YAML; unset uses judges/<environment kind>.yaml.")


JudgeSpec = Annotated[
    Annotated[StatsJudgeSpec, Tag("stats")] | Annotated[LLMJudgeSpec, Tag("llm")],
    Discriminator(tag_or_default("kind", "stats")),
]


class RulesReviserSpec(SpecModel):
    kind: Literal["rules"] = "rules"


class LLMReviserSpec(SpecModel):
    kind: Literal["llm"] = "llm"
    llm: LLMSpec
    attempts: int = Field(
        2,
        ge=1,
        le=5,
        description="Answers the reviser's program may give per task type and step: each refused by the "
        "review's validator is asked again with its problems; then the rules reviser answers.",
    )
    program: str | None = Field(
        None,
        description="A compiled reviser program (`pats compile-reviser`: demos, instructions), compiled for "
        "this llm.model and this scaffold's settings; null: the uncompiled program.",
    )


ReviserSpec = Annotated[
    Annotated[RulesReviserSpec, Tag("rules")] | Annotated[LLMReviserSpec, Tag("llm")],
    Discriminator(tag_or_default("kind", "rules")),
]


class _TrainerCommon(SpecModel):
    steps: int = Field(100, ge=1)
    tasks_per_step: int = Field(8, ge=1)
    group_size: int = Field(8, ge=2, description="Rollouts per task (GRPO needs at least two).")
    lr: float = Field(1e-5, gt=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, gt=0.0)
    epochs: int = Field(1, ge=1, le=16, description="Optimizer passes over each step's rollouts.")
    clip_low: float = Field(0.2, gt=0.0, lt=1.0, description="PPO-clip lower epsilon.")
    clip_high: float = Field(0.2, gt=0.0, lt=10.0, description="PPO-clip upper epsilon.")
    kl_coef: float = Field(0.0, ge=0.0, description="KL to the reference policy; 0 disables it.")
    normalize_advantage_std: bool = Field(True, description="Divide group advantages by their std.")
    checkpoint_every: int = Field(10, ge=1)


class LocalTrainerSpec(_TrainerCommon):
    backend: Literal["local"] = "local"
    # Local only: the pats engine applies them; verl's trainer has its own handling of both.
    max_nonfinite_updates: int = Field(
        3,
        ge=1,
        le=1000,
        description="Stop the run after this many updates in a row skipped for a NaN/inf loss or gradient.",
    )
    on_env_fault: Literal["drop", "train"] = Field(
        "drop",
        description="A group with a rollout whose environment failed: drop it from the update, or train "
        "on it anyway (the failed episode counts as it ended). The review sees it either way.",
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = Field(None, ge=1, description="torch threads on CPU; unset uses all cores.")
    autocast_bf16: bool = Field(True, description="bf16 autocast for forward passes where supported.")
    micro_batch: int = Field(4, ge=1, description="Episodes per backward pass (gradient accumulation).")
    logprob_chunk: int = Field(256, ge=16, description="Tokens per chunk when computing log-probs.")
    rollout_batching: bool = Field(
        True,
        description="Reuse each system prompt's keys/values for a whole rollout. Score mode: score all "
        "live episodes of a turn in a few batched passes; generate mode: sample from the cached prefixes. "
        "false: score one episode at a time / generate from whole prompts (the older, slower paths).",
    )
    update_prefix_sharing: bool = Field(
        True,
        description="In an update, decisions whose prompts share a prefix (the system prompt: instructions, "
        "scaffold, task) run that prefix once with gradients and their suffixes (score mode: the rest and "
        "the candidates; generate mode: the rest and the response) against its keys/values; false runs "
        "every decision's whole prompt (the older path, kept for bench/perf/update.py).",
    )


class VerlTrainerSpec(_TrainerCommon):
    backend: Literal["verl"] = "verl"
    nnodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(8, ge=1)
    rollout_engine: Literal["vllm", "sglang"] = "vllm"
    tensor_parallel: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.6, gt=0.0, le=1.0)
    micro_batch_per_gpu: int = Field(
        4,
        ge=1,
        description="Sequences per forward/backward pass on each GPU (verl's ppo_micro_batch_size_per_gpu and "
        "log_prob_micro_batch_size_per_gpu); unused when token_budget_per_gpu is set.",
    )
    token_budget_per_gpu: int | None = Field(
        None,
        ge=1,
        description="verl's dynamic batch sizing: each pass on a GPU packs sequences up to this many tokens "
        "(ppo_max_token_len_per_gpu, and log_prob_max_token_len_per_gpu for the old and reference "
        "log-probs). At least max_prompt_tokens + max_response_tokens (verl refuses a longer sequence). "
        "Unset: micro_batch_per_gpu sequences per pass.",
    )
    fused_kernels: bool = Field(
        False,
        description="verl's fused linear + log-prob/entropy kernel (model.use_fused_kernels, torch backend): "
        "the full-vocabulary logits of a pass are never materialized, 512 tokens at a time instead.",
    )
    gradient_checkpointing: bool = Field(
        True,
        description="Recompute each decoder layer's activations in the backward pass "
        "(model.enable_gradient_checkpointing); only the layers' inputs are kept.",
    )
    param_offload: bool = Field(
        False,
        description="Keep the actor's parameter shards in CPU memory outside the update "
        "(actor.fsdp_config.param_offload): frees GPU memory for the rollout engine.",
    )
    optimizer_offload: bool = Field(
        False,
        description="Keep the Adam states in CPU memory outside the update (actor.fsdp_config.optimizer_offload).",
    )
    gpu_memory_gb: float = Field(
        80.0,
        gt=0.0,
        description="Memory of one GPU in GB (10^9 bytes): `pats plan` checks the run fits it and `pats run` / "
        "`pats export verl` refuse a spec that does not (80 for an A100/H100 80GB, 141 for an H200).",
    )
    checkpoints_kept: int | None = Field(
        3,
        ge=1,
        description="verl keeps the newest N checkpoints and deletes older ones (trainer.max_actor_ckpt_to_keep); "
        "null keeps every one (steps / checkpoint_every of them).",
    )
    max_prompt_tokens: int = Field(
        1024,
        ge=16,
        description="verl's data.max_prompt_length: the first prompt (instructions, task, scaffold); "
        "longer ones are cut from the left.",
    )
    max_response_tokens: int = Field(
        512,
        ge=1,
        description="verl's data.max_response_length: every token after the first prompt, the policy's "
        "and the environment's turns together (an episode is one growing chat); the episode ends, "
        "truncated, when the next turn would not fit.",
    )
    overrides: tuple[str, ...] = Field((), description="Extra verl Hydra overrides, key=value.")

    @model_validator(mode="after")
    def _budget_holds_a_sequence(self):
        longest = self.max_prompt_tokens + self.max_response_tokens
        if self.token_budget_per_gpu is not None and self.token_budget_per_gpu < longest:
            raise ValueError(
                f"token_budget_per_gpu {self.token_budget_per_gpu} is below max_prompt_tokens + "
                f"max_response_tokens = {longest}: verl refuses a sequence longer than its budget; write "
                f"token_budget_per_gpu: {longest} or more, or lower the two lengths"
            )
        return self


TrainerSpec = Annotated[
    Annotated[LocalTrainerSpec, Tag("local")] | Annotated[VerlTrainerSpec, Tag("verl")],
    Discriminator(tag_or_default("backend", "local")),
]


class EvalSpec(SpecModel):
    every: int = Field(10, ge=1, description="Evaluate every k training steps (and after the last).")
    at_start: bool = Field(True, description="Also evaluate the untrained policy.")
    num_tasks: int | None = Field(
        None, ge=1, description="Held-out tasks; unset uses environment.num_eval_tasks (less first_task)."
    )
    first_task: int = Field(
        0,
        ge=0,
        description="Index of the first held-out task played: evaluations play the eval split's tasks "
        "[first_task, first_task + num_tasks), so a campaign can skip games earlier campaigns used. "
        "environment.num_eval_tasks must reach past them.",
    )
    samples_per_task: int = Field(1, ge=1)
    greedy: bool = Field(True, description="Greedy actions; false samples at the policy temperature.")
    with_scaffold: bool = Field(True, description="Also evaluate with the scaffold to show the reliance gap.")
    gap_tasks: int = Field(
        4,
        ge=0,
        description="Training tasks whose expert plans give the (state, action) pairs of the response-"
        "likelihood gap (eval/likelihood_gap: expert-action NLL without minus with the scaffold), measured "
        "at every evaluation; 0 turns it off. Needs score mode on the local backend and an environment "
        "with expert plans (elsewhere no pairs are built, and the run says so at start). Under "
        "scaffold.mode: none only the no-scaffold NLL is measured (eval/expert_nll).",
    )
    pool: bool = Field(
        False,
        description="At each evaluation also play every training task (the environment's training pool) "
        "without the scaffold, as the held-out tasks are played (pool/success): what the method claims the "
        "policy internalizes from guidance it trained with.",
    )


class WarmStartSpec(SpecModel):
    """Behaviour cloning from expert plans before any RL (`pats warm-start SPEC`, pats.warm_start)."""

    environment: EnvironmentSpec = Field(
        description="The environment whose training-fold expert plans are cloned: another game family "
        "than the run's own environment (e.g. twx coin or cookingworld for a twc run), so the policy "
        "learns to read guidance rather than to play the game it is compared on."
    )
    num_tasks: int = Field(64, ge=1, description="Training-fold tasks whose expert plans are replayed.")
    guided_fraction: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Share of examples whose prompt carries the task's own expert plan as a task-scoped "
        "scaffold view, rendered where scaffold.placement puts it; the rest carry no guidance.",
    )
    necessary_fraction: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of the guided examples whose target is an admissible action other than the "
        "expert's, drawn with the seed, that only the guidance names: the plan shown has that action as "
        "its next step, so the game state cannot predict the target and only reading the guidance can "
        "(issue 34, item 4). 0: every target is the expert's own action.",
    )
    epochs: int = Field(3, ge=1, le=100, description="Passes over the examples.")
    lr: float = Field(1e-4, gt=0.0, lt=1.0)
    batch_size: int = Field(16, ge=1, description="Examples per optimizer step.")
    report_tasks: int = Field(
        16,
        ge=1,
        description="The report's NLLs (with and without guidance, before and after) are measured on "
        "the decisions of the first N cloned tasks: measuring all of them costs about two epochs.",
    )

    @model_validator(mode="after")
    def _necessary_needs_guided(self) -> WarmStartSpec:
        if self.necessary_fraction > 0 and self.guided_fraction == 0:
            raise ValueError(
                "necessary_fraction is a share of the guided examples, and guided_fraction is 0: "
                "raise guided_fraction (e.g. 0.5) or set necessary_fraction: 0"
            )
        return self


class LoggingSpec(SpecModel):
    root: str = Field("runs", description="Runs are written to <root>/<name>.")
    wandb: Literal["offline", "online", "disabled"] = "offline"
    project: str = "pats"
    entity: str | None = None
    group: str | None = Field(
        None,
        description="W&B group of the run (the local backend); `pats sweep` sets it to the sweep's name, so "
        "its cells sit together in W&B.",
    )
    progress: bool = Field(True, description="Live progress display in the terminal.")


class ExperimentSpec(SpecModel):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$", description="Run name (folder-safe).")
    seed: int = Field(0, ge=0)
    environment: EnvironmentSpec
    policy: PolicySpec = Field(default_factory=PolicySpec)
    scaffold: ScaffoldSpec = Field(default_factory=ScaffoldSpec)
    judge: JudgeSpec = Field(default_factory=StatsJudgeSpec)
    reviser: ReviserSpec = Field(default_factory=RulesReviserSpec)
    trainer: TrainerSpec = Field(default_factory=LocalTrainerSpec)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    warm_start: WarmStartSpec | None = Field(
        None, description="Behaviour cloning before RL, run by `pats warm-start SPEC` (not by `pats run`)."
    )

    @model_validator(mode="after")
    def _check_combinations(self):
        problems = _contradictions(self)
        if problems:
            # One error carrying every contradiction; the loader turns each into its own issue.
            summary = "; ".join(f"{path}: {msg}" for path, msg in problems)
            raise PydanticCustomError(
                "spec_contradiction", "{summary}", {"summary": summary, "problems": problems}
            )
        return self

    def eval_tasks(self) -> slice:
        """Which of the eval split's tasks (the environment lists num_eval_tasks) evaluations play."""
        first = self.eval.first_task
        return slice(first, first + (self.eval.num_tasks or self.environment.num_eval_tasks - first))

    def evaluates_after(self, step: int) -> bool:
        """Whether the held-out evaluation runs after step `step` (0-based): every `eval.every` steps and
        after the last."""
        return (step + 1) % self.eval.every == 0 or step + 1 == self.trainer.steps

    def eval_batch(self) -> int:
        """Held-out games played at once: as many episodes as a training step plays (tasks_per_step x
        group_size), whole games, at least one. The local backend keeps an environment (a
        TextWorldExpress JVM, ~55 MB) per episode in flight, so 64 games x 4 episodes at once held 256."""
        return max(1, self.trainer.tasks_per_step * self.trainer.group_size // self.eval.samples_per_task)

    def probe_count(self) -> int:
        """Rollouts per group that run without the scaffold."""
        if self.scaffold.mode == "none":
            return 0
        return round(self.scaffold.probe_fraction * self.trainer.group_size)

    def local_trainer(self) -> LocalTrainerSpec:
        """The trainer section where the pats engine trains (trainer.backend: local)."""
        if not isinstance(self.trainer, LocalTrainerSpec):
            from pats.errors import PrerequisiteError

            raise PrerequisiteError(
                f"trainer.backend: {self.trainer.backend} trains through its own trainer, not the pats "
                "engine; `pats run SPEC` launches it (see docs/verl.md)"
            )
        return self.trainer

    def verl_trainer(self) -> VerlTrainerSpec:
        """The trainer section of a run verl trains (trainer.backend: verl)."""
        if not isinstance(self.trainer, VerlTrainerSpec):
            from pats.errors import SpecError

            raise SpecError("this needs trainer.backend: verl (see docs/verl.md)")
        return self.trainer


def _contradictions(spec: ExperimentSpec) -> list[tuple[str, str]]:
    """(YAML path, message) for each pair of options that contradict each other."""
    sc, tr = spec.scaffold, spec.trainer
    out: list[tuple[str, str]] = []
    if sc.mode == "none":
        # Options that would change something only if a scaffold existed. Checked on values, not on
        # which keys were written, so that `pats show` output of a valid spec stays valid.
        unused = {
            "cards": sc.cards != DEFAULT_CARDS,
            "initial_bank": sc.initial_bank is not None,
            "privileged": sc.privileged,
        }
        for key in (k for k, is_set in unused.items() if is_set):
            out.append(
                (
                    f"scaffold.{key}",
                    f"mode 'none' builds no scaffold, so scaffold.{key} has no effect; "
                    f"remove scaffold.{key} or pick mode pats, grow or static",
                )
            )
    first, listed = spec.eval.first_task, spec.environment.num_eval_tasks
    if first and first + (spec.eval.num_tasks or 1) > listed:
        out.append(
            (
                "eval.first_task",
                f"evaluations play held-out tasks from {first} on, but the environment lists "
                f"{listed} (environment.num_eval_tasks); set environment.num_eval_tasks to at least "
                f"{first + (spec.eval.num_tasks or 1)} or lower eval.first_task",
            )
        )
    if sc.mode == "static" and sc.initial_bank is None:
        out.append(
            (
                "scaffold.initial_bank",
                "mode 'static' keeps an initial bank unchanged; set scaffold.initial_bank to a bank "
                "file, or use mode none for plain GRPO",
            )
        )
    if sc.mode != "none" and sc.probe_fraction > 0:
        probes = round(sc.probe_fraction * tr.group_size)
        if probes < 1 or probes > tr.group_size - 1:
            out.append(
                (
                    "scaffold.probe_fraction",
                    f"{sc.probe_fraction} of trainer.group_size {tr.group_size} gives {probes} probe "
                    "rollouts; it must leave at least one rollout with and one without the scaffold: use "
                    + _fractions(tr.group_size)
                    + ", or 0 to turn probes off",
                )
            )
    if sc.mode != "none" and "utility" in sc.cards and sc.probe_fraction == 0:
        out.append(
            (
                "scaffold.cards",
                "the utility card compares rollouts with and without the scaffold; set "
                "scaffold.probe_fraction > 0 or remove utility from scaffold.cards",
            )
        )
    if sc.plans_per_review and not sc.task_plans:
        out.append(
            (
                "scaffold.plans_per_review",
                "scaffold.task_plans is false, so reviews add no task plans; set plans_per_review: 0 or "
                "task_plans: true",
            )
        )
    if sc.plans_per_review and spec.reviser.kind != "rules":
        out.append(
            (
                "scaffold.plans_per_review",
                f"reviser.kind {spec.reviser.kind} answers in the published mode budgets (plans count as "
                "skills); set plans_per_review: 0, or reviser.kind: rules",
            )
        )
    if "expert" in sc.cards and not sc.privileged:
        out.append(
            (
                "scaffold.cards",
                "the expert card uses privileged expert plans; set scaffold.privileged: true to allow "
                "it, or remove expert from scaffold.cards",
            )
        )
    if not spec.environment.HAS_EXPERT and "expert" in sc.cards:
        out.append(
            (
                "scaffold.cards",
                f"{spec.environment.kind} has no expert plan; remove expert from scaffold.cards",
            )
        )
    if spec.policy.action == "score" and spec.environment.FREE_TEXT:
        out.append(
            (
                "policy.action",
                f"{spec.environment.kind} actions are free text (queries, answers) that cannot be "
                "listed and scored; use action: generate",
            )
        )
    if spec.policy.action == "score" and tr.backend == "verl":
        out.append(("policy.action", "the verl backend generates text; use action: generate with verl"))
    if tr.backend == "verl":  # the episode (outputs and observations) fits verl's token budgets
        out += budget_issues(episode_budget(spec), tr.max_prompt_tokens, tr.max_response_tokens)
    if tr.backend == "verl" and spec.environment.history_window is not None:
        out.append(
            (
                "environment.history_window",
                "verl trains one token sequence per episode, so its episodes are one growing chat and no "
                "history window applies; remove history_window (the local backend's option) and size "
                "trainer.max_response_tokens for max_turns turns instead",
            )
        )
    if tr.backend == "verl" and spec.policy.lora is not None and spec.policy.lora.top_layers is not None:
        out.append(
            (
                "policy.lora.top_layers",
                "verl puts LoRA adapters on every layer of target_modules; remove top_layers (the local "
                "backend's update-speed option)",
            )
        )
    out += _warm_start_contradictions(spec)
    return out


def _fractions(group_size: int) -> str:
    """The probe fractions that leave a rollout on each side of a group: one value for a group of two."""
    low, high = 1 / group_size, (group_size - 1) / group_size
    return f"{low:.3g}" if low == high else f"a fraction between {low:.3g} and {high:.3g}"


def episode_budget(spec: ExperimentSpec) -> EpisodeBudget:
    """The most tokens one verl episode of `spec` can take (pats.spec.budget says what counts)."""
    env, sc = spec.environment, spec.scaffold
    view = 0 if sc.mode == "none" else sc.budget.view_tokens
    return EpisodeBudget(
        environment=env.kind,
        turns=env.max_turns,
        action_tokens=spec.policy.max_new_tokens + CLOSE_TOKENS,
        observation_tokens=env.TURN_TOKENS + (view if sc.placement == "turn" else 0),
        view_tokens=view,
        first_observation_tokens=env.TURN_TOKENS,
    )


def game_families(env) -> set[str]:
    """The game families an environment section plays: a twx game, ALFWorld task types, else its kind."""
    if env.kind == "twx":
        return {f"twx:{env.game}"}
    if env.kind == "alfworld":
        return {f"alfworld:{t}" for t in env.task_types}
    return {env.kind}


def _warm_start_contradictions(spec: ExperimentSpec) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if spec.policy.init_adapter is not None and spec.policy.lora is None:
        out.append(
            (
                "policy.init_adapter",
                "an adapter needs LoRA; set policy.lora as the warm start trained it, or remove init_adapter",
            )
        )
    ws = spec.warm_start
    if ws is None:
        return out
    shared = sorted(game_families(ws.environment) & game_families(spec.environment))
    if shared:
        out.append(
            (
                "warm_start.environment",
                f"the warm start would clone expert plans of the game the run trains and is compared on "
                f"({', '.join(shared)}); clone another family instead, e.g. twx coin or cookingworld for "
                "a twc run",
            )
        )
    if not ws.environment.HAS_EXPERT:
        out.append(
            (
                "warm_start.environment",
                f"{ws.environment.kind} has no expert plans to clone; pick an environment that has them "
                "(twx, alfworld)",
            )
        )
    elif ws.environment.FREE_TEXT and spec.policy.action == "score":
        out.append(
            (
                "warm_start.environment",
                f"{ws.environment.kind} actions are free text and cannot be scored; use policy.action: "
                "generate or clone twx or alfworld",
            )
        )
    if spec.policy.lora is None:
        out.append(
            ("policy.lora", "the warm start trains a LoRA adapter; set policy.lora (null trains all weights)")
        )
    return out
