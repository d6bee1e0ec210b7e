"""The memory and disk a verl run needs per GPU, before anything starts (`pats plan SPEC`).

Estimated from the spec and the policy's config.json, as verl 0.9.1 runs it (read from its source:
workers/engine/fsdp/transformer_impl.py, workers/engine_workers.py, utils/torch_functional.py):
- the actor trains FSDP-sharded over every GPU with fp32 master weights (`model_dtype: fp32`) and bf16
  compute: parameters 4 bytes, gradients 4 and Adam's two states 8 per trained parameter, each / GPUs;
  the FSDP root unit (embeddings, final norm, an untied head) and up to two decoder layers are gathered
  whole in bf16 during a pass;
- the reference policy costs no GPU memory: verl forces CPU offload on its forward-only engine (and
  with LoRA the reference is the actor with the adapter off);
- activations: with gradient checkpointing each layer's input (bf16) for every token of a pass, plus
  one layer's recomputed activations; without it every layer's (`layer_activation_bytes`);
- the logits of one pass (tokens x vocabulary x 2 bytes, bf16): in the update the logits and their
  gradient (flash-attn's cross-entropy writes the gradient in place, so this is an upper bound there);
  in the old-log-prob pass the logits plus the entropy computed in chunks of 2048 tokens in fp32 (the
  mapping turns `entropy_from_logits_with_chunking` on); with `trainer.fused_kernels` only 512 tokens'
  fp32 logits exist at a time. A sampling temperature other than 1 adds a scaled copy;
- a pass holds `token_budget_per_gpu` tokens (dynamic batch sizing) or `micro_batch_per_gpu` whole
  sequences of max_prompt_tokens + max_response_tokens;
- the rollout engine holds `gpu_memory_utilization` x the GPU while it generates and sleeps (weights
  and KV cache released) during the update; the actor's shards stay on the GPU meanwhile unless
  offloaded (`param_offload`, `optimizer_offload`: both are loaded back for the update itself);
- without flash-attn (SDPA: what pats picks where flash_attn does not import, and what the plan
  assumes unless the spec's overrides name flash_attention_2), two more terms in every forward pass:
  verl computes log-probs with `logprobs_from_logits_v2`, which log-softmaxes the packed row whole (one
  more copy of the logits; flash-attn's cross-entropy avoids it), and transformers builds a
  T x T boolean mask for the packed sequences, which torch's CUDA SDPA kernels turn into a bias of the
  query's dtype (2 more bytes per entry). All three were measured on one H200 with torch 2.11+cu130
  (bench/perf/sdpa_memory.py: ratio 1.00 at 8,192 and 28,672 tokens), the mask and the copy also on a CPU
  (tests/test_verl_plan.py);
- the reserve, in parts: two CUDA contexts per GPU (the FSDP worker's and the vLLM server's), NCCL's
  buffers, allocator fragmentation and vLLM's CUDA-graph pool (kept while the engine sleeps). Each an
  assumption, not a measurement (`RESERVE`);
- the KV cache: what the rollout engine's share holds after the bf16 weights, against the tokens of
  every rollout of a step at full length on each server; more than it holds and vLLM preempts;
- on disk each checkpoint holds the fp32 model (all parameters) and Adam's states of the trained ones,
  times `checkpoints_kept` (verl's max_actor_ckpt_to_keep).
On a GPU only the three SDPA terms were measured, with torch and transformers alone (no verl run):
one H200, torch 2.11+cu130, bench/perf/sdpa_memory.py at 8,192 and 28,672 tokens, ratio 1.00 each (the
bytes are in docs/verl.md, Memory plan, and commit bff84c0; that run's JSON output was not kept:
`python3 bench/perf/sdpa_memory.py --out bench/results/sdpa_memory.json` on a GPU writes one). Every other
term is an estimate. Each term says where it comes from (`Term.source`): "measured" (on a CPU: the
states, activations without checkpointing and chunked logits against the local backend in
bench/perf/memory_plan.py), "gpu" (the SDPA terms, on that H200), "code" (read from verl's, transformers'
or torch's source), "assumed" (an allowance).
Of `trainer.overrides` the plan reads two keys: the attention (`ATTN_KEY`: flash_attention_2 drops the
SDPA terms) and `actor_rollout_ref.rollout.enforce_eager` (`EAGER_KEY`: true drops vLLM's CUDA-graph
pool from the reserve). It names every other override as not read, and says which of those touch a key
its estimate depends on (`PLANNED_KEYS`).

Length (over 450 lines, on purpose): one estimate, term by term, each term saying where verl
0.9.1 allocates it; the terms are read together to check that the plan adds them up as verl does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pats.errors import PrerequisiteError, SpecError, SpecIssue
from pats.spec.models import ExperimentSpec, LoraSpec

GB = 1e9  # the spec's gpu_memory_gb and every number printed here: 10^9 bytes
GRAPHS = "vLLM CUDA-graph pool"  # the reserve's part enforce_eager turns off
# The reserve, part by part: (name, GB, why). Assumptions, to be measured on the first GPU run.
RESERVE = (
    ("CUDA contexts", 1.0, "two processes per GPU, the FSDP worker and the vLLM server, ~0.5 GB each"),
    ("NCCL buffers", 0.5, "the FSDP process group's communicators and their buffers"),
    ("allocator fragmentation", 1.0, "blocks PyTorch's caching allocator holds but cannot reuse"),
    (GRAPHS, 4.0, "3-6 GB expected for a 0.5B-7B model; kept while the engine sleeps"),
)
RESERVE_GB = sum(gb for _, gb, _ in RESERVE)
ATTN_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
EAGER_KEY = "actor_rollout_ref.rollout.enforce_eager"  # verl's default false: vLLM captures CUDA graphs
ENTROPY_CHUNK = 2048  # verl's entropy_from_logits_chunk_size
FUSED_CHUNK = 512  # verl's FusedLinearForPPO chunk_size
# verl keys the plan depends on: an override of one makes the plan say it did not read it.
PLANNED_KEYS = (
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.actor.use_dynamic_bsz",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.model.use_fused_kernels",
    "actor_rollout_ref.model.enable_gradient_checkpointing",
    "actor_rollout_ref.actor.fsdp_config",
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking",
    "actor_rollout_ref.actor.checkpoint",
    "trainer.max_actor_ckpt_to_keep",
    "data.max_prompt_length",
    "data.max_response_length",
)


def override_key(override: str) -> str:
    """The key a Hydra override sets (`key=v`, `+key=v`, `++key=v`) or deletes (`~key`)."""
    return override.lstrip("+~").split("=", 1)[0]


def override_value(overrides: tuple[str, ...], key: str) -> str | None:
    """The value the last override of `key` sets, or None (none, or the last one deletes it)."""
    value = None
    for override in overrides:
        if override_key(override) == key:
            value = None if override.startswith("~") else override.partition("=")[2]
    return value


def eager(overrides: tuple[str, ...]) -> bool | None:
    """Whether the overrides turn enforce_eager on (True) or leave verl's default, off (False); None
    for a value the plan cannot read (an interpolation): it is then named as not read."""
    value = override_value(overrides, EAGER_KEY)
    if value is None:
        return False
    return {"true": True, "false": False}.get(value.strip().lower())


@dataclass(frozen=True)
class Unread:
    """An override the plan does not read, and whether its key is one the estimate depends on."""

    override: str
    planned: bool  # its key is in PLANNED_KEYS: the numbers assume the spec's value instead

    def note(self) -> str:
        why = ", a key the estimate depends on: the numbers above assume the value without it"
        return f"note: the plan does not read the override '{self.override}'" + (why if self.planned else "")


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only model that memory depends on, and where they were read."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool  # input and output embeddings share one matrix
    qkv_bias: bool  # Qwen2: q, k and v projections have biases
    source: str

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h, q, kv = self.hidden, self.q_dim, self.kv_dim
        attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        return attention + 3 * h * self.intermediate + 2 * h  # + two RMSNorm weights

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return embeddings + self.layers * self.layer_params + self.hidden  # + the final norm


# Published config.json values, for Hugging Face ids whose files are not on this machine (the plan
# never downloads). Read from huggingface.co/<id>/blob/main/config.json; a local copy wins.
@dataclass(frozen=True)
class Published:
    """A Qwen2.5 config.json's sizes; the small models tie their embeddings, all have q/k/v biases."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int = 151936
    tied: bool = True


KNOWN_CONFIGS = {
    "Qwen/Qwen2.5-0.5B-Instruct": Published(layers=24, hidden=896, intermediate=4864, heads=14, kv_heads=2),
    "Qwen/Qwen2.5-1.5B-Instruct": Published(layers=28, hidden=1536, intermediate=8960, heads=12, kv_heads=2),
    "Qwen/Qwen2.5-3B-Instruct": Published(layers=36, hidden=2048, intermediate=11008, heads=16, kv_heads=2),
    "Qwen/Qwen2.5-7B-Instruct": Published(
        layers=28, hidden=3584, intermediate=18944, heads=28, kv_heads=4, vocab=152064, tied=False
    ),
}


def shape_from_config(config: dict, source: str) -> ModelShape:
    """A `ModelShape` from a Hugging Face config.json's fields (text config of a multimodal one)."""
    config = config.get("text_config", config)
    heads = config["num_attention_heads"]
    return ModelShape(
        layers=config["num_hidden_layers"],
        hidden=config["hidden_size"],
        intermediate=config["intermediate_size"],
        heads=heads,
        kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        vocab=config["vocab_size"],
        tied=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=config.get("model_type") == "qwen2" or bool(config.get("attention_bias", False)),
        source=source,
    )


def model_shape(model: str) -> ModelShape:
    """The policy's sizes: its config.json (a local directory, the embedded model, the Hugging Face
    cache), else the labelled table of published configs; never a download."""
    from pats.models import resolve_model_dir

    local = Path(str(resolve_model_dir(model))) / "config.json"
    path = local if local.is_file() else _cached_config(model)
    if path is not None:
        return shape_from_config(json.loads(Path(path).read_text(encoding="utf-8")), f"{path}")
    if model in KNOWN_CONFIGS:
        k = KNOWN_CONFIGS[model]
        return ModelShape(
            layers=k.layers,
            hidden=k.hidden,
            intermediate=k.intermediate,
            heads=k.heads,
            kv_heads=k.kv_heads,
            head_dim=k.hidden // k.heads,
            vocab=k.vocab,
            tied=k.tied,
            qkv_bias=True,
            source=f"pats' table of published configs ({model})",
        )
    raise PrerequisiteError(
        f"the memory plan needs the config.json of policy.model '{model}', which is neither a local "
        "directory, in the Hugging Face cache nor in pats' table of published configs; download it "
        f"(`huggingface-cli download {model} config.json`) or set policy.model to a local directory"
    )


def _cached_config(model: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(model, "config.json")
    return found if isinstance(found, str) else None


LORA_SHAPES = {  # (inputs, outputs) of each module LoRA can target, for `lora_params`
    "q_proj": lambda m: (m.hidden, m.q_dim),
    "k_proj": lambda m: (m.hidden, m.kv_dim),
    "v_proj": lambda m: (m.hidden, m.kv_dim),
    "o_proj": lambda m: (m.q_dim, m.hidden),
    "gate_proj": lambda m: (m.hidden, m.intermediate),
    "up_proj": lambda m: (m.hidden, m.intermediate),
    "down_proj": lambda m: (m.intermediate, m.hidden),
}


def lora_params(shape: ModelShape, lora: LoraSpec) -> int:
    """Parameters of the adapters: rank x (inputs + outputs) per targeted module and layer."""
    unknown = [name for name in lora.target_modules if name not in LORA_SHAPES]
    if unknown:
        raise SpecError(
            SpecIssue(
                "policy.lora.target_modules",
                f"the memory plan knows no module {unknown}; write names among {sorted(LORA_SHAPES)}",
            )
        )
    layers = lora.top_layers or shape.layers
    return layers * sum(lora.rank * sum(LORA_SHAPES[name](shape)) for name in lora.target_modules)


def layer_activation_bytes(shape: ModelShape, act_bytes: int, attention_copy: bool) -> int:
    """Bytes one token keeps for one decoder layer's backward pass (no attention scores: flash-attn
    and torch's fused CPU attention save only their output and log-sum-exp). Per RMSNorm: its input
    cast to fp32 (4h, the residual itself in fp32), the normalized input and the output (2 x act h);
    attention: rotated q and k, v, and the output (act x (2h + 2kv)), plus a contiguous copy of the
    output before o_proj where the attention returns it transposed (torch SDPA); MLP: gate, up,
    silu(gate) and their product (4 x act x intermediate)."""
    h, kv = shape.hidden, shape.kv_dim
    norm = 4 * h + 2 * act_bytes * h
    attention = act_bytes * (2 * shape.q_dim + 2 * kv) + (act_bytes * shape.q_dim if attention_copy else 0)
    return 2 * norm + attention + 4 * act_bytes * shape.intermediate


SOURCES = {
    "measured": "checked on a CPU",
    "gpu": "measured on an H200",  # bench/perf/sdpa_memory.py, torch 2.11+cu130 (what verl[vllm]==0.9.1 pins)
    "code": "from the code",
    "assumed": "assumed",
}


@dataclass(frozen=True)
class Term:
    """One line of the plan: what it is, its size in GB, how it was computed, and where that comes
    from (`SOURCES`: measured on a CPU, read from the code, or assumed)."""

    name: str
    gb: float
    how: str
    source: str = "code"


@dataclass(frozen=True)
class Phase:
    """What is on one GPU at once during one stage of a step, and the knob that shrinks it most."""

    name: str
    terms: tuple[Term, ...]
    knob: str

    @property
    def gb(self) -> float:
        return sum(t.gb for t in self.terms)


@dataclass(frozen=True)
class MemoryPlan:
    spec_name: str
    model: str
    shape: ModelShape
    gpus: int
    gpu_gb: float
    params: int
    trained: int
    tokens_per_pass: int
    phases: tuple[Phase, ...]
    checkpoint_gb: float
    checkpoints_on_disk: int
    unread_overrides: tuple[Unread, ...]
    kv: KvCache | None = None

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda p: p.gb)

    @property
    def fits(self) -> bool:
        return self.peak.gb <= self.gpu_gb

    @property
    def disk_gb(self) -> float:
        return self.checkpoint_gb * self.checkpoints_on_disk

    def render(self) -> str:
        s = self.shape
        lines = [
            f"memory plan for {self.spec_name}: {self.model} ({self.params / 1e9:.2f}B parameters, "
            f"{self.trained / 1e6:.1f}M trained; {s.layers} layers, hidden {s.hidden}, vocabulary {s.vocab}; "
            f"from {s.source})",
            f"per GPU, {self.gpus} GPU(s) of {self.gpu_gb:g} GB, {self.tokens_per_pass} tokens per pass:",
        ]
        for phase in self.phases:
            lines.append(f"  {phase.name}: {phase.gb:.1f} GB")
            lines += [f"    {t.gb:7.2f} GB  {t.name} ({t.how}) [{SOURCES[t.source]}]" for t in phase.terms]
        verdict = "fits" if self.fits else "DOES NOT FIT"
        lines.append(f"peak {self.peak.gb:.1f} GB ({self.peak.name}) of {self.gpu_gb:g} GB: {verdict}")
        if self.kv is not None:
            lines.append(self.kv.render())
        lines.append(
            f"disk: {self.checkpoint_gb:.1f} GB per checkpoint x {self.checkpoints_on_disk} kept = "
            f"{self.disk_gb:.1f} GB"
        )
        lines += [unread.note() for unread in self.unread_overrides]
        return "\n".join(lines)


@dataclass(frozen=True)
class KvCache:
    """The rollout engine's KV cache against the worst case of a step: every rollout at full length."""

    capacity_tokens: int  # per server: its share of the GPU(s) after the bf16 weights, per KV token
    worst_tokens: int  # per server: tasks_per_step x group_size x (prompt + response) / servers
    servers: int
    bytes_per_token: int

    def render(self) -> str:
        head = (
            f"KV cache: room for about {self.capacity_tokens:,} tokens per rollout server "
            f"({self.bytes_per_token:,} B per token) against {self.worst_tokens:,} when every rollout of a "
            f"step is at full length ({self.servers} server(s)) [from the code; vLLM's activation "
            "reserve not subtracted]"
        )
        if self.worst_tokens <= self.capacity_tokens:
            return head + ": fits"
        return (
            f"{head}: {self.worst_tokens / self.capacity_tokens:.1f}x over, so vLLM preempts: it drops "
            "the KV cache of the newest sequences and recomputes their prefixes when they resume (a "
            "slower step, not a failure); more GPUs, a higher gpu_memory_utilization or shorter "
            "episodes lower it"
        )


def kv_cache(spec: ExperimentSpec, shape: ModelShape) -> KvCache:
    tr = spec.verl_trainer()
    tp = tr.tensor_parallel
    servers = max(1, tr.nnodes * tr.gpus_per_node // tp)
    per_token = 2 * shape.layers * shape.kv_dim * 2 // tp  # K and V, bf16, split over the TP group
    weights = shape.params * 2 / tp  # bf16
    room = max(0.0, tr.gpu_memory_utilization * tr.gpu_memory_gb * GB - weights)
    worst = tr.tasks_per_step * tr.group_size * (tr.max_prompt_tokens + tr.max_response_tokens)
    return KvCache(int(room // per_token), -(-worst // servers), servers, per_token)


def reserve_terms(enforce_eager: bool = False) -> tuple[Term, ...]:
    """The reserve's parts; with enforce_eager vLLM captures no CUDA graphs, so their pool is 0."""
    return tuple(
        Term(f"reserve: {name}", 0.0, f"{EAGER_KEY}=True: no CUDA graphs", "code")
        if name == GRAPHS and enforce_eager
        else Term(f"reserve: {name}", gb, why, "assumed")
        for name, gb, why in RESERVE
    )


def sdpa_terms(tokens: int, vocab: int, fused: bool) -> tuple[Term, ...]:
    """What a pass costs without flash-attn (see the module docstring): the packed row's mask, and
    (unless the fused kernels compute the log-probs) the whole-row log-softmax's copy of the logits."""
    mask = (
        Term(
            "attention mask (SDPA, packed sequences)",
            tokens * tokens / GB,
            f"{tokens}^2 x 1 B, bool, built by transformers from the restarting position ids",
            "gpu",  # bench/perf/sdpa_memory.py (and tests/test_verl_plan.py on the CPU): the mask SDPA receives
        ),
        Term(
            "attention mask as the kernel's bias",
            tokens * tokens * 2 / GB,
            f"{tokens}^2 x 2 B: torch's CUDA SDPA turns a bool mask into a bf16 bias",
            "gpu",  # bench/perf/sdpa_memory.py: the extra peak of SDPA with the mask over is_causal, ratio 1.00
        ),
    )
    if fused:
        return mask
    copy = Term(
        "logits copy (no flash-attn cross-entropy)",
        tokens * vocab * 2 / GB,
        f"{tokens} x {vocab} x 2 B: verl's logprobs_from_logits_v2 log-softmaxes the packed row whole",
        "gpu",  # bench/perf/sdpa_memory.py (and tests/test_verl_plan.py on the CPU): its extra peak, ratio 1.00
    )
    return (copy, *mask)


def state_terms(params: int, trained: int, gpus: int, weight_bytes: int) -> dict[str, Term]:
    """Parameters, gradients, Adam states and the optimizer step's temporary, sharded over `gpus`."""
    return {
        "params": Term(
            "parameters",
            params * weight_bytes / gpus / GB,
            f"{params:,} x {weight_bytes} B / {gpus}",
            "measured",
        ),
        "grads": Term(
            "gradients", trained * 4 / gpus / GB, f"{trained:,} trained x 4 B / {gpus}", "measured"
        ),
        "adam": Term("Adam states", trained * 8 / gpus / GB, f"{trained:,} x 2 x 4 B / {gpus}", "measured"),
        # torch's AdamW (foreach) builds sqrt(v) for every trained parameter at once
        "step": Term(
            "optimizer step temporary", trained * 4 / gpus / GB, "sqrt of Adam's second moment", "measured"
        ),
    }


def activation_term(
    shape: ModelShape, tokens: int, act_bytes: int, checkpointing: bool, attention_copy: bool
) -> Term:
    per_layer = layer_activation_bytes(shape, act_bytes, attention_copy)
    final_norm = 4 * shape.hidden + 2 * act_bytes * shape.hidden
    if checkpointing:
        kept = shape.layers * tokens * act_bytes * shape.hidden + tokens * (per_layer + final_norm)
        how = f"{shape.layers} layer inputs + 1 recomputed layer ({per_layer:,} B) per token"
    else:
        kept = tokens * (shape.layers * per_layer + final_norm)
        how = f"{shape.layers} layers x {per_layer:,} B per token"
    # Without checkpointing the per-token formula was checked against the local backend on a CPU.
    return Term("activations", kept / GB, f"{tokens} tokens, {how}", "code" if checkpointing else "measured")


def chunked_logits_term(chunk: int, vocab: int, what: str) -> Term:
    """Logits computed `chunk` tokens at a time in fp32 (verl's fused kernels, the local backend's
    checkpointed chunks): the chunk's logits, their softmax and their gradient."""
    return Term(
        "logits", 3 * chunk * vocab * 4 / GB, f"{what}: {chunk} tokens x {vocab} x 4 B x 3", "measured"
    )


def plan_verl(spec: ExperimentSpec, shape: ModelShape | None = None) -> MemoryPlan:
    """The per-GPU plan of a verl spec (see the module docstring for what each term assumes)."""
    tr, pol = spec.trainer, spec.policy
    if tr.backend != "verl":
        raise SpecError(
            SpecIssue("trainer.backend", "the memory plan is for verl runs; write trainer.backend: verl")
        )
    shape = shape or model_shape(pol.model)
    gpus = tr.nnodes * tr.gpus_per_node
    params = shape.params
    trained = params if pol.lora is None else lora_params(shape, pol.lora)
    stored = params + (trained if pol.lora is not None else 0)  # adapters beside the frozen weights
    seq = tr.max_prompt_tokens + tr.max_response_tokens
    tokens = tr.token_budget_per_gpu or tr.micro_batch_per_gpu * seq
    v = shape.vocab
    logit_gb = tokens * v * 2 / GB  # bf16
    scaled = pol.temperature != 1.0
    eager_mode = eager(tr.overrides)
    reserve = reserve_terms(bool(eager_mode))
    # Without flash-attn (SDPA, pats' pick where it does not import): the mask and the logits copy.
    flash = (override_value(tr.overrides, ATTN_KEY) or "").startswith("flash_attention")
    sdpa = () if flash else sdpa_terms(tokens, v, tr.fused_kernels)
    states = state_terms(stored, trained, gpus, 4)
    embeddings = v * shape.hidden * 2 * (1 if shape.tied else 2)
    gathered = Term(
        "gathered weights", (embeddings + 2 * shape.layer_params * 2) / GB, "root unit + 2 layers in bf16"
    )
    if tr.fused_kernels:
        update_logits = chunked_logits_term(FUSED_CHUNK, v, "fused")
        logprob_logits = update_logits
    else:
        copies = 2 + (1 if scaled else 0)
        update_logits = Term(
            "logits",
            copies * logit_gb,
            f"{tokens} x {v} x 2 B x {copies} (logits, gradient" + (", temperature copy)" if scaled else ")"),
        )
        entropy = 3 * min(ENTROPY_CHUNK, tokens) * v * 4 / GB
        logprob_logits = Term(
            "logits",
            (1 + (1 if scaled else 0)) * logit_gb + entropy,
            f"{tokens} x {v} x 2 B + entropy in {ENTROPY_CHUNK}-token fp32 chunks",
        )
    knob_tokens = (
        f"lower trainer.token_budget_per_gpu (now {tr.token_budget_per_gpu}; at least {seq})"
        if tr.token_budget_per_gpu
        else f"set trainer.token_budget_per_gpu: {seq} (now {tr.micro_batch_per_gpu} whole sequences per pass)"
    )
    act = activation_term(shape, tokens, 2, tr.gradient_checkpointing, attention_copy=False)
    update = Phase(
        "update",
        (states["params"], states["grads"], states["adam"], gathered, act, update_logits, *sdpa, *reserve),
        f"{knob_tokens}, or trainer.fused_kernels: true"
        + ("" if tr.gradient_checkpointing else ", or trainer.gradient_checkpointing: true"),
    )
    # No gradients: a layer's activations are dropped as soon as the next layer has run.
    one_layer = Term(
        "activations",
        tokens * layer_activation_bytes(shape, 2, False) / GB,
        "one layer at a time, no gradients",
    )
    logprob = Phase(
        "old log-probs",
        (
            states["params"],
            states["adam"] if not tr.optimizer_offload else _zero("Adam states", "offloaded"),
            gathered,
            one_layer,
            logprob_logits,
            *sdpa,
            *reserve,
        ),
        f"{knob_tokens}, or trainer.fused_kernels: true",
    )
    step = Phase(
        "optimizer step",
        (states["params"], states["grads"], states["adam"], states["step"], *reserve),
        "more GPUs (trainer.gpus_per_node), or LoRA (policy.lora)",
    )
    engine = tr.gpu_memory_utilization * tr.gpu_memory_gb
    rollout = Phase(
        "rollout",
        (
            states["params"] if not tr.param_offload else _zero("parameters", "offloaded"),
            states["adam"] if not tr.optimizer_offload else _zero("Adam states", "offloaded"),
            Term(
                "rollout engine",
                engine,
                f"gpu_memory_utilization {tr.gpu_memory_utilization} x {tr.gpu_memory_gb:g} GB",
            ),
            *reserve,
        ),
        f"lower trainer.gpu_memory_utilization (now {tr.gpu_memory_utilization}), or "
        "trainer.param_offload / trainer.optimizer_offload: true",
    )
    saves = -(-tr.steps // tr.checkpoint_every)
    kept = saves if tr.checkpoints_kept is None else min(tr.checkpoints_kept, saves)
    read = {ATTN_KEY} | ({EAGER_KEY} if eager_mode is not None else set())
    unread = tuple(
        Unread(o, override_key(o).startswith(PLANNED_KEYS))
        for o in tr.overrides
        if override_key(o) not in read
    )
    return MemoryPlan(
        spec_name=spec.name,
        model=pol.model,
        shape=shape,
        gpus=gpus,
        gpu_gb=tr.gpu_memory_gb,
        params=params,
        trained=trained,
        tokens_per_pass=tokens,
        phases=(rollout, logprob, update, step),
        checkpoint_gb=(stored * 4 + trained * 8) / GB,
        checkpoints_on_disk=kept,
        unread_overrides=unread,
        kv=kv_cache(spec, shape),
    )


def gpus_here(spec: ExperimentSpec, here: int) -> str | None:
    """A note where this machine lists GPUs (`here`, nvidia-smi's count; 0 where it lists none, e.g. a
    machine that plans for another) but fewer than one node of the spec: the preflight would refuse a
    run here (pats.backends.verl.cluster.check_gpus), so the note names the override a run here needs."""
    tr = spec.verl_trainer()
    if here == 0 or here >= tr.gpus_per_node:
        return None
    return (
        f"note: nvidia-smi lists {here} GPU(s) on this machine and the plan is for {tr.nnodes} node(s) x "
        f"{tr.gpus_per_node} GPU(s): a run here needs trainer.gpus_per_node={here} (`pats plan SPEC "
        f"trainer.gpus_per_node={here}` plans that), else the preflight refuses it"
    )


def _zero(name: str, why: str) -> Term:
    return Term(name, 0.0, why)


def require_fits(plan: MemoryPlan) -> None:
    """Refuse a plan whose peak exceeds the declared GPU memory, with the numbers and the knob."""
    over = [p for p in plan.phases if p.gb > plan.gpu_gb]
    if not over:
        return
    issues = [
        SpecIssue(
            "trainer",
            f"the {p.name} needs {p.gb:.1f} GB per GPU and trainer.gpu_memory_gb is {plan.gpu_gb:g} "
            f"(largest: {max(p.terms, key=lambda t: t.gb).name} {max(t.gb for t in p.terms):.1f} GB); "
            f"{p.knob} (`pats plan SPEC` prints every term)",
        )
        for p in over
    ]
    raise SpecError(issues)
