"""The verl memory plan (pats.backends.verl.plan, `pats plan`): its terms against numbers computed by
hand, the parameter count against transformers' own models, the refusal of a spec that does not fit,
every shipped verl spec fitting one 80 GB and one 141 GB GPU, the peaks the shipped specs' comments and
docs/verl.md quote being the plan's, and the spec fields as verl keys."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from pats.backends.verl.plan import (
    GB,
    KNOWN_CONFIGS,
    RESERVE,
    RESERVE_GB,
    SOURCES,
    ModelShape,
    eager,
    layer_activation_bytes,
    lora_params,
    model_shape,
    plan_verl,
    require_fits,
    sdpa_terms,
)
from pats.cli.main import main
from pats.errors import SpecError
from pats.spec import load_spec

REPO = Path(__file__).resolve().parents[1]
ALFWORLD = REPO / "experiments" / "alfworld" / "pats.yaml"
VERL_SPECS = sorted(  # by text: experiments/ also holds files that are not specs (sweeps)
    str(p.relative_to(REPO))
    for p in (REPO / "experiments").rglob("*.yaml")
    if "backend: verl" in p.read_text(encoding="utf-8")
)
QWEN_1_5B = model_shape("Qwen/Qwen2.5-1.5B-Instruct")


def phase(plan, name):
    return next(p for p in plan.phases if p.name == name)


def term(phase, name):
    return next(t for t in phase.terms if t.name == name)


def test_the_verl_specs_are_alfworld_webshop_and_search_qa():
    kinds = {load_spec(REPO / p).environment.kind for p in VERL_SPECS}
    assert kinds == {"alfworld", "webshop", "search_qa"}


def test_parameter_counts_match_the_published_sizes():
    # Qwen's model cards: 1.54B parameters, 1.31B without the embeddings; 3.09B. (The exact counts
    # are checked against transformers' own models below.)
    assert round(QWEN_1_5B.params / 1e9, 2) == 1.54
    assert round((QWEN_1_5B.params - QWEN_1_5B.vocab * QWEN_1_5B.hidden) / 1e9, 2) == 1.31
    assert round(model_shape("Qwen/Qwen2.5-3B-Instruct").params / 1e9, 2) == 3.09
    assert "table of published configs" in QWEN_1_5B.source


@pytest.mark.parametrize("name", ["smollm2-135m-instruct", *KNOWN_CONFIGS])
def test_parameter_count_equals_the_transformers_model(name):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config

    shape = model_shape(name)
    if name in KNOWN_CONFIGS:
        config = Qwen2Config(
            vocab_size=shape.vocab,
            hidden_size=shape.hidden,
            intermediate_size=shape.intermediate,
            num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads,
            num_key_value_heads=shape.kv_heads,
            tie_word_embeddings=shape.tied,
        )
    else:
        from pats.models import resolve_model_dir

        config = AutoConfig.from_pretrained(resolve_model_dir(name))
        assert shape.source.endswith("config.json")  # read from the model's own files
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(config)
    assert shape.params == sum(p.numel() for p in model.parameters())


def test_lora_parameters_by_hand():
    # rank 64 on q, k, v, o, gate, up, down of a 1.5B layer: 64 x ((1536+1536) + 2 (1536+256)
    # + (1536+1536) + 2 (1536+8960) + (8960+1536)) = 64 x 41216 = 2,637,824; x 28 layers.
    lora = load_spec(REPO / "experiments/webshop/pats.yaml").policy.lora
    assert (lora.rank, lora.alpha) == (64, 32)
    assert lora_params(QWEN_1_5B, lora) == 73_859_072


def test_layer_activations_by_hand():
    # bf16, flash-attn: 2 RMSNorms x (4 x 1536 fp32 input + 2 x 2 x 1536) = 24576; attention
    # 2 x (2 x 1536 + 2 x 256) = 7168; MLP 4 x 2 x 8960 = 71680.
    assert layer_activation_bytes(QWEN_1_5B, 2, attention_copy=False) == 103_424
    # fp32 with torch SDPA's transposed output copied (the CPU bench): 4 x (9 h + 2 kv + 4 I) elements.
    smol = model_shape("smollm2-135m-instruct")
    assert layer_activation_bytes(smol, 4, attention_copy=True) == 4 * (9 * 576 + 2 * 192 + 4 * 1536)


def test_alfworld_plan_by_hand():
    plan = plan_verl(load_spec(ALFWORLD), QWEN_1_5B)
    assert plan.tokens_per_pass == 28672 and plan.gpus == 8
    update = phase(plan, "update")
    assert term(update, "parameters").gb == pytest.approx(1_543_714_304 * 4 / 8 / 1e9)
    assert term(update, "gradients").gb == pytest.approx(1_543_714_304 * 4 / 8 / 1e9)
    assert term(update, "Adam states").gb == pytest.approx(1_543_714_304 * 8 / 8 / 1e9)
    # bf16 logits and their gradient: 28672 x 151936 x 2 B x 2 = 17,425,235,968 B
    assert term(update, "logits").gb == pytest.approx(17.425235968)
    # checkpointing: 28 layer inputs (28 x 28672 x 1536 x 2 = 2,466,250,752 B) and one recomputed layer
    # plus the final norm (28672 x (103424 + 12288) = 3,317,694,464 B)
    assert term(update, "activations").gb == pytest.approx(5.783945216)
    # the old log-probs: the logits once (8,712,617,984 B) and entropy in 2048-token fp32 chunks x 3
    # (3 x 2048 x 151936 x 4 = 3,733,979,136 B)
    assert term(phase(plan, "old log-probs"), "logits").gb == pytest.approx(12.44659712)
    rollout = phase(plan, "rollout")
    assert term(rollout, "rollout engine").gb == pytest.approx(48.0)  # 0.6 x 80
    # the reserve, part by part: CUDA contexts 1, NCCL 0.5, fragmentation 1, vLLM's CUDA graphs 4
    assert rollout.gb == pytest.approx(0.771857152 + 1.543714304 + 48 + 6.5)
    assert plan.fits and plan.peak.name == "rollout"
    # disk: fp32 weights and Adam's two states = 12 B per parameter, 3 kept
    assert plan.checkpoint_gb == 1_543_714_304 * 12 / 1e9, "fp32 weights and Adam's two moments, exactly"
    assert plan.checkpoints_on_disk == 3


def test_an_untied_head_is_gathered_beside_the_embeddings():
    """The root unit gathers the input embeddings and, when it is not tied to them, the output head:
    one more vocab x hidden matrix in bf16."""
    spec = load_spec(ALFWORLD)
    tied, untied = (
        term(phase(plan_verl(spec, replace(QWEN_1_5B, tied=t)), "update"), "gathered weights")
        for t in (True, False)
    )
    assert tied.how == "root unit + 2 layers in bf16"
    layers = 2 * QWEN_1_5B.layer_params * 2
    assert (tied.gb, untied.gb) == (
        (151936 * 1536 * 2 + layers) / 1e9,
        (2 * 151936 * 1536 * 2 + layers) / 1e9,
    )


def test_a_sampling_temperature_adds_a_copy_of_the_logits():
    """Below or above 1.0 the logits are divided by the temperature: one more bf16 copy in the update and
    in the old log-probs, and the term says so; at 1.0 none."""
    logits = 28672 * 151936 * 2 / 1e9
    entropy = 3 * 2048 * 151936 * 4 / 1e9
    for temperature, copies, how in ((1.0, 2, ")"), (0.7, 3, ", temperature copy)")):
        plan = plan_verl(load_spec(ALFWORLD, [f"policy.temperature={temperature}"]), QWEN_1_5B)
        update = term(phase(plan, "update"), "logits")
        assert update.gb == pytest.approx(copies * logits)
        assert update.how == f"28672 x 151936 x 2 B x {copies} (logits, gradient{how}"
        assert term(phase(plan, "old log-probs"), "logits").gb == pytest.approx(
            (copies - 1) * logits + entropy
        )


def test_fused_kernels_and_offload_change_their_terms():
    spec = load_spec(
        ALFWORLD,
        ["trainer.fused_kernels=true", "trainer.param_offload=true", "trainer.optimizer_offload=true"],
    )
    plan = plan_verl(spec, QWEN_1_5B)
    # 512 tokens' fp32 logits, their softmax and gradient, whatever the pass' length
    assert term(phase(plan, "update"), "logits").gb == pytest.approx(3 * 512 * 151936 * 4 / 1e9)
    fused = term(phase(plan, "old log-probs"), "logits")  # the old log-probs use the same kernels
    assert (
        fused == term(phase(plan, "update"), "logits") and fused.how == "fused: 512 tokens x 151936 x 4 B x 3"
    )
    rollout = phase(plan, "rollout")
    assert term(rollout, "parameters").gb == 0 and term(rollout, "Adam states").gb == 0


def test_without_a_token_budget_four_whole_episodes_do_not_fit_and_the_refusal_says_what_to_write():
    spec = load_spec(ALFWORLD, ["trainer.token_budget_per_gpu=null", "trainer.gpus_per_node=1"])
    plan = plan_verl(spec, QWEN_1_5B)
    assert plan.tokens_per_pass == 4 * (2048 + 25600)
    assert not plan.fits
    with pytest.raises(SpecError) as err:
        require_fits(plan)
    message = str(err.value)
    # 116.9 GB before the SDPA terms (33.6 GB of logits copy, 36.7 GB of mask) and the reserve's parts
    assert "the update needs 191.7 GB per GPU and trainer.gpu_memory_gb is 80" in message
    assert "logits 67.2 GB" in message
    assert "set trainer.token_budget_per_gpu: 27648" in message


def test_each_phases_knob_and_the_old_log_probs_logits_read_whole():
    """What the refusal tells a user to change, per phase, with and without a token budget and gradient
    checkpointing (the update names checkpointing only where it is off), and how the old log-probs'
    logits are counted (from the mutation run of plan.py, issue 59: these texts were read in part)."""
    knobs = {
        (): (
            "lower trainer.token_budget_per_gpu (now 28672; at least 27648), or trainer.fused_kernels: true",
        )
        * 2,
        ("trainer.token_budget_per_gpu=null", "trainer.gradient_checkpointing=false"): (
            "set trainer.token_budget_per_gpu: 27648 (now 4 whole sequences per pass), or trainer.fused_kernels: "
            "true, or trainer.gradient_checkpointing: true",
            "set trainer.token_budget_per_gpu: 27648 (now 4 whole sequences per pass), or trainer.fused_kernels: "
            "true",
        ),
    }
    for overrides, (update, logprob) in knobs.items():
        plan = plan_verl(load_spec(ALFWORLD, list(overrides)), QWEN_1_5B)
        assert (phase(plan, "update").knob, phase(plan, "old log-probs").knob) == (update, logprob)
        tokens = plan.tokens_per_pass
        assert term(phase(plan, "old log-probs"), "logits").how == (
            f"{tokens} x 151936 x 2 B + entropy in 2048-token fp32 chunks"
        )
    assert phase(plan, "rollout").knob == (
        "lower trainer.gpu_memory_utilization (now 0.6), or trainer.param_offload / trainer.optimizer_offload: true"
    )
    assert phase(plan, "optimizer step").knob == "more GPUs (trainer.gpus_per_node), or LoRA (policy.lora)"


def test_the_old_log_probs_hold_one_layer_and_offloaded_states_are_zero_saying_so():
    """The old log-probs keep one layer's activations at a time (the 103,424 B per token the update
    recomputes, no gradients); offloaded parameters and Adam states are 0 GB, "offloaded", where the
    pass would otherwise hold them; the rollout engine's share says its product; and a checkpoint
    every 3 of 10 steps keeps 4 when none are dropped (from the mutation run of plan.py, issue 59)."""
    for offload, adam in (("false", 1_543_714_304 * 8 / 8 / 1e9), ("true", 0.0)):
        plan = plan_verl(
            load_spec(ALFWORLD, [f"trainer.optimizer_offload={offload}", f"trainer.param_offload={offload}"]),
            QWEN_1_5B,
        )
        logprob, rollout = phase(plan, "old log-probs"), phase(plan, "rollout")
        assert (term(logprob, "Adam states").gb, term(rollout, "Adam states").gb) == (adam, adam)
        assert term(rollout, "parameters").gb == (0.0 if offload == "true" else 1_543_714_304 * 4 / 8 / 1e9)
    assert {(t.name, t.gb, t.how) for t in (*rollout.terms, *logprob.terms) if t.gb == 0} == {
        ("parameters", 0.0, "offloaded"),
        ("Adam states", 0.0, "offloaded"),
    }
    layer = term(logprob, "activations")
    assert (layer.gb, layer.how) == (28672 * 103_424 / 1e9, "one layer at a time, no gradients")
    assert term(rollout, "rollout engine").how == "gpu_memory_utilization 0.6 x 80 GB"
    kept = ["trainer.steps=10", "trainer.checkpoint_every=3", "trainer.checkpoints_kept=null"]
    assert plan_verl(load_spec(ALFWORLD, kept), QWEN_1_5B).checkpoints_on_disk == 4


def test_a_budget_below_one_sequence_is_a_spec_error():
    with pytest.raises(SpecError) as err:
        load_spec(ALFWORLD, ["trainer.token_budget_per_gpu=16384"])
    assert "write token_budget_per_gpu: 27648 or more" in str(err.value)


@pytest.mark.parametrize("gpus", [1, 8])
@pytest.mark.parametrize("gpu_gb", [80, 141])
@pytest.mark.parametrize("path", VERL_SPECS)
def test_every_shipped_verl_spec_fits_80_and_141_gb(path, gpu_gb, gpus):
    spec = load_spec(REPO / path, [f"trainer.gpu_memory_gb={gpu_gb}", f"trainer.gpus_per_node={gpus}"])
    plan = plan_verl(spec)
    require_fits(plan)  # raises with the numbers when a stage does not fit
    assert plan.peak.gb <= gpu_gb
    assert spec.trainer.token_budget_per_gpu is not None and spec.trainer.checkpoints_kept is not None


def test_the_plan_names_every_override_it_does_not_read():
    """Every override but the two it reads (the attention, enforce_eager) is named, those on a key the
    estimate depends on said so (issue 59, item 17: a fixed list of memory keys left others unnamed)."""
    fused, save = "actor_rollout_ref.model.use_fused_kernels=True", "trainer.save_freq=5"
    sdpa = "++actor_rollout_ref.model.override_config.attn_implementation=sdpa"
    spec = load_spec(ALFWORLD, [f"trainer.overrides=[{fused},{save},{sdpa}]"])
    plan = plan_verl(spec, QWEN_1_5B)
    assert [(u.override, u.planned) for u in plan.unread_overrides] == [(fused, True), (save, False)]
    notes = [line for line in plan.render().splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: the plan does not read the override '{fused}', a key the estimate depends on: the numbers "
        "above assume the value without it",
        f"note: the plan does not read the override '{save}'",
    ]


POOL = "reserve: vLLM CUDA-graph pool"


def test_the_plan_reads_enforce_eager_and_drops_the_cuda_graph_pool():
    def graphs(*overrides: str) -> list[float]:
        spec = load_spec(ALFWORLD, [f"trainer.overrides=[{','.join(overrides)}]"] if overrides else [])
        plan = plan_verl(spec, QWEN_1_5B)
        assert not [u for u in plan.unread_overrides if "enforce_eager" in u.override], "read, not named"
        return [term(p, "reserve: vLLM CUDA-graph pool").gb for p in plan.phases]

    assert graphs() == [4.0] * 4 == graphs("actor_rollout_ref.rollout.enforce_eager=False")
    eager = "actor_rollout_ref.rollout.enforce_eager=True"
    assert graphs(eager) == [0.0] * 4 == graphs(f"++{eager.lower()}")
    pool = term(plan_verl(load_spec(ALFWORLD, [f"trainer.overrides=[{eager}]"]), QWEN_1_5B).phases[0], POOL)
    assert (pool.how, pool.source) == (f"{eager}: no CUDA graphs", "code"), "says why it is 0"
    assert graphs(eager, "actor_rollout_ref.rollout.enforce_eager=false") == [4.0] * 4, "the last one wins"
    plain, without = (
        plan_verl(load_spec(ALFWORLD, o), QWEN_1_5B) for o in ([], [f"trainer.overrides=[{eager}]"])
    )
    assert [round(p.gb - q.gb, 6) for p, q in zip(plain.phases, without.phases, strict=True)] == [4.0] * 4
    # A value the plan cannot read is named rather than guessed.
    odd = "actor_rollout_ref.rollout.enforce_eager=1"
    spec = load_spec(ALFWORLD, [f"trainer.overrides=[{odd}]"])
    assert [u.override for u in plan_verl(spec, QWEN_1_5B).unread_overrides] == [odd]


def test_enforce_eager_deleted_or_absent_is_verls_default_and_read():
    """No override of enforce_eager is verl's default (off), not a value the plan cannot read; a deletion
    (`~key`) after one that turns it on leaves the default too, and neither is named as not read."""
    assert eager(()) is False
    on = "actor_rollout_ref.rollout.enforce_eager=True"
    deleted = "~actor_rollout_ref.rollout.enforce_eager"
    assert eager((on,)) is True and eager((on, deleted)) is False
    spec = load_spec(ALFWORLD, [f"trainer.overrides=[{on},'{deleted}']"])
    plan = plan_verl(spec, QWEN_1_5B)
    assert plan.unread_overrides == ()
    assert [term(p, POOL).gb for p in plan.phases] == [4.0] * 4


def test_cli_plan_prints_and_refuses(capsys):
    assert main(["plan", str(ALFWORLD)]) == 0
    out = capsys.readouterr().out
    assert "peak 56.8 GB (rollout) of 80 GB: fits" in out
    assert "disk: 18.5 GB per checkpoint x 3 kept = 55.6 GB" in out
    assert main(["plan", str(ALFWORLD), "trainer.gpu_memory_utilization=0.99"]) == SpecError.exit_code
    captured = capsys.readouterr()
    assert "DOES NOT FIT" in captured.out
    assert "lower trainer.gpu_memory_utilization (now 0.99)" in captured.err


def test_cli_plan_refuses_a_local_spec(capsys):
    assert main(["plan", str(REPO / "experiments" / "quickstart.yaml")]) == SpecError.exit_code
    assert capsys.readouterr().err == (
        "error: 1 problem in the spec\n"
        "  trainer.backend: the memory plan is for verl runs; write trainer.backend: verl\n"
    ), "the field and the refusal read whole"


def test_gb_is_decimal():
    assert GB == 1e9  # the spec's gpu_memory_gb, as GPUs are sold (80 GB, 141 GB)


def test_unknown_models_name_what_to_do():
    from pats.errors import PrerequisiteError

    with pytest.raises(PrerequisiteError, match="huggingface-cli download some/model config.json"):
        model_shape("some/model")


def test_model_shape_is_a_frozen_record():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        QWEN_1_5B.layers = 1  # type: ignore[misc]
    assert isinstance(QWEN_1_5B, ModelShape)


@pytest.mark.parametrize("env", ["alfworld", "webshop", "search_qa"])
def test_memory_fields_become_verl_keys_that_validate_config_accepts(env, tmp_path):
    from pats.testing.verl import require_verl_or_skip

    require_verl_or_skip()
    from pats.backends.verl.config import check, compose
    from pats.backends.verl.launch import write_bundle

    # sglang: vllm cannot be imported on a CPU; the memory keys are the same for either engine.
    spec = load_spec(REPO / "experiments" / env / "pats.yaml", ["trainer.rollout_engine=sglang"])
    overrides = write_bundle(spec, tmp_path / "bundle", run_dir=str(tmp_path / "run"), data=False)
    cfg = compose(overrides)
    check(cfg)  # verl's validate_config
    arr, budget = cfg.actor_rollout_ref, spec.trainer.token_budget_per_gpu
    assert arr.actor.use_dynamic_bsz is True and arr.actor.ppo_max_token_len_per_gpu == budget
    assert arr.rollout.log_prob_use_dynamic_bsz is True and arr.ref.log_prob_use_dynamic_bsz is True
    assert arr.rollout.log_prob_max_token_len_per_gpu == budget == arr.ref.log_prob_max_token_len_per_gpu
    assert cfg.trainer.max_actor_ckpt_to_keep == 3
    assert arr.model.enable_gradient_checkpointing is True and arr.model.use_fused_kernels is False
    assert arr.actor.fsdp_config.param_offload is False and arr.actor.fsdp_config.optimizer_offload is False
    assert arr.actor.entropy_from_logits_with_chunking is True
    if env == "alfworld":
        assert arr.model.lora_rank == 0 and arr.actor.optim.lr == 1e-6
        return
    # verl's LoRA recipe: rank 64, alpha 32, every linear layer, lr 3e-6, safetensors + layered_summon
    assert (arr.model.lora_rank, arr.model.lora_alpha, arr.actor.optim.lr) == (64, 32, 3e-6)
    assert list(arr.model.target_modules) == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    assert arr.rollout.load_format == "safetensors" and arr.rollout.layered_summon is True


def test_run_and_export_print_the_plan_and_refuse_before_anything_starts(tmp_path, capsys):
    too_big = "trainer.gpu_memory_utilization=0.99"
    logging_root = f"logging.root={tmp_path / 'runs'}"
    assert main(["run", str(ALFWORLD), too_big, logging_root]) == SpecError.exit_code
    captured = capsys.readouterr()
    assert "memory plan for alfworld-pats" in captured.out and "DOES NOT FIT" in captured.out
    assert not (tmp_path / "runs").exists()  # refused before a run directory was made
    out = tmp_path / "bundle"
    assert main(["export", "verl", str(ALFWORLD), str(out), too_big, "--no-data"]) == SpecError.exit_code
    assert "lower trainer.gpu_memory_utilization (now 0.99)" in capsys.readouterr().err
    assert not out.exists()


def test_the_sdpa_terms_are_what_a_cpu_measures():
    """Without flash-attn: the mask transformers hands to SDPA for packed sequences, and the copy of the
    logits verl's log-probs make, against the plan's formulas (small sizes, on a CPU)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import LlamaConfig, LlamaForCausalLM

    pytest.importorskip("verl")
    from verl.utils import torch_functional

    tokens, vocab = 768, 4096
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, attn_implementation="sdpa",
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    masks = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        mask = kwargs.get("attn_mask")
        masks.append(None if mask is None else mask.numel() * mask.element_size())
        return sdpa(*args, **kwargs)

    positions = torch.cat([torch.arange(500), torch.arange(tokens - 500)])[None]  # two packed sequences
    ids = torch.randint(0, vocab, (1, tokens))
    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        with torch.no_grad():
            model(input_ids=ids, position_ids=positions, use_cache=False)  # verl's remove-padding call
    finally:
        torch.nn.functional.scaled_dot_product_attention = sdpa
    copy, mask, bias = sdpa_terms(tokens, vocab, fused=False)
    assert masks == [round(mask.gb * 1e9)] == [tokens * tokens]
    # Measured on an H200 too (bench/perf/sdpa_memory.py), the bias only there.
    assert (mask.source, copy.source, bias.source) == ("gpu", "gpu", "gpu")

    assert not torch_functional.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE  # no flash-attn here
    logits = torch.randn(1, tokens, vocab, dtype=torch.bfloat16)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        torch_functional.logprobs_from_logits(logits, torch.randint(0, vocab, (1, tokens)))
    softmax = [e.self_cpu_memory_usage for e in prof.key_averages() if e.key == "aten::_log_softmax"]
    assert softmax == [round(copy.gb * 1e9)] == [tokens * vocab * 2]
    assert sdpa_terms(tokens, vocab, fused=True) == (mask, bias)  # the fused kernels compute log-probs


def test_a_spec_that_asks_for_flash_attention_has_no_sdpa_terms():
    flash = "++actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"
    names = {t.name for t in phase(plan_verl(load_spec(ALFWORLD), QWEN_1_5B), "update").terms}
    assert {"logits copy (no flash-attn cross-entropy)", "attention mask (SDPA, packed sequences)"} <= names
    plan = plan_verl(load_spec(ALFWORLD, [f"trainer.overrides=[{flash}]"]), QWEN_1_5B)
    assert not [t for t in phase(plan, "update").terms if "mask" in t.name or "copy" in t.name]


def test_every_term_says_where_it_comes_from_and_the_reserve_is_split():
    plan = plan_verl(load_spec(ALFWORLD), QWEN_1_5B)
    for stage in plan.phases:
        assert all(t.source in SOURCES for t in stage.terms)
        reserve = [t for t in stage.terms if t.name.startswith("reserve: ")]
        assert [t.name[len("reserve: ") :] for t in reserve] == [name for name, _, _ in RESERVE]
        assert all(t.source == "assumed" for t in reserve) and sum(t.gb for t in reserve) == RESERVE_GB
    text = plan.render()
    assert "[checked on a CPU]" in text and "[from the code]" in text and "[assumed]" in text
    assert "[measured on an H200]" in text


def test_the_kv_cache_against_every_rollout_of_a_step_at_full_length():
    spec = load_spec(ALFWORLD, ["trainer.gpus_per_node=1"])
    tr = spec.trainer
    kv = plan_verl(spec, QWEN_1_5B).kv
    assert kv is not None and kv.servers == 1
    # K and V, 28 layers x 2 KV heads x 128 dims, bf16
    assert kv.bytes_per_token == 2 * 28 * 256 * 2 == 28672
    assert kv.capacity_tokens == int((0.6 * 80e9 - 1_543_714_304 * 2) // 28672)
    assert kv.worst_tokens == tr.tasks_per_step * tr.group_size * (2048 + 25600)
    assert "2.3x over, so vLLM preempts" in kv.render()
    eight = plan_verl(load_spec(ALFWORLD), QWEN_1_5B).kv
    assert eight is not None and eight.servers == 8 and eight.render().endswith(": fits")


# What a shipped spec's memory comment and docs/verl.md's table quote: "8 x 80 GB: 56.8 GB (rollout)".
QUOTED_PEAK = re.compile(r"(\d+) x (\d+) GB: (\d+\.\d) GB \(([a-z -]+)\)")
SHAPES = [(1, 80), (1, 141), (8, 80), (8, 141)]  # GPUs x GB each


def planned(path: str, gpus: int, gpu_gb: int):
    overrides = [f"trainer.gpus_per_node={gpus}", f"trainer.gpu_memory_gb={gpu_gb}"]
    return plan_verl(load_spec(REPO / path, overrides))


@pytest.mark.parametrize("path", VERL_SPECS)
def test_each_shipped_specs_memory_comment_is_what_pats_plan_prints(path):
    text = (REPO / path).read_text(encoding="utf-8")
    quoted = {(int(n), int(gb)): f"{peak} GB ({stage})" for n, gb, peak, stage in QUOTED_PEAK.findall(text)}
    assert sorted(quoted) == SHAPES, f"{path}: its memory comment quotes the peak at {SHAPES}"
    for (gpus, gpu_gb), said in quoted.items():
        plan = planned(path, gpus, gpu_gb)
        assert said == f"{plan.peak.gb:.1f} GB ({plan.peak.name})", (
            f"{path} says {said} at {gpus} x {gpu_gb} GB: write what `pats plan {path} "
            f"trainer.gpus_per_node={gpus} trainer.gpu_memory_gb={gpu_gb}` prints"
        )
    for checkpoint in re.findall(r"(\d+\.\d) GB per checkpoint", text):
        assert checkpoint == f"{planned(path, 1, 80).checkpoint_gb:.1f}", path


def test_the_docs_table_of_the_shipped_specs_is_what_pats_plan_prints():
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in (REPO / "docs" / "verl.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| experiments/")
    ]
    assert sorted(row[0].split(" ")[0] for row in rows) == VERL_SPECS
    for row in rows:
        path = row[0].split(" ")[0]
        peaks = [f"{planned(path, gpus, gb).peak.gb:.1f} GB" for gpus, gb in SHAPES]
        plan = planned(path, 1, 80)
        disk = f"{plan.disk_gb:.1f} GB"
        assert row[2:] == [*peaks, disk], f"docs/verl.md's row of {path}: write what `pats plan` prints"
