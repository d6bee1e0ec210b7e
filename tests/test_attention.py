"""The local policy's attention with gradients on a CPU (pats/backends/local/attention.py) computes what
transformers' SDPA attention computes, outputs and gradients, in fp64, for every mask it is given:
boolean, additive, none (causal, queries after cached keys), with grouped key/value heads."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from pats.backends.local import attention


class Module(nn.Module):
    """What the attention interface reads off an attention layer."""

    num_key_value_groups = 3
    is_causal = True


def _inputs(queries: int, keys: int):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 9, queries, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    k = torch.randn(2, 3, keys, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(2, 3, keys, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    return q, k, v


def _masks(queries: int, keys: int):
    gen = torch.Generator().manual_seed(1)
    allowed = torch.rand(2, 1, queries, keys, generator=gen) > 0.4
    allowed[..., 0] = True  # every query sees a key
    additive = torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(
        ~allowed, torch.finfo(torch.float64).min
    )
    return {"boolean": allowed, "additive": additive, "none": None}


@pytest.mark.parametrize("kind", ["boolean", "additive", "none"])
@pytest.mark.parametrize("queries,keys", [(5, 5), (4, 11)])
def test_the_recomputed_core_equals_sdpa_with_gradients(kind, queries, keys):
    mask = _masks(queries, keys)[kind]
    if mask is None and queries != keys:
        # SDPA without a mask aligns a causal mask top-left; transformers passes a mask whenever keys
        # were cached, so the reference is the explicit bottom-right causal mask.
        reference_mask = torch.ones(queries, keys, dtype=torch.bool).tril(keys - queries)[None, None]
    else:
        reference_mask = mask
    outs, grads = [], []
    for fn, m in ((attention.attention, mask), (sdpa_attention_forward, reference_mask)):
        q, k, v = _inputs(queries, keys)
        out, weights = fn(Module(), q, k, v, m, scaling=0.3)
        assert weights is None and out.shape == (2, queries, 9, 8)
        out.pow(2).sum().backward()
        outs.append(out.detach())
        grads.append([t.grad for t in (q, k, v)])
    assert torch.allclose(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(grads[0], grads[1], strict=True):
        assert torch.allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_it_is_torch_sdpa_without_gradients_or_when_switched_off(monkeypatch):
    """Rollouts run torch's SDPA (faster there without a backward); RECOMPUTED false runs it always."""
    calls = []
    monkeypatch.setattr(attention, "_core", lambda q, *rest: calls.append(rest) or torch.zeros_like(q))
    q, k, v = _inputs(4, 4)
    with torch.no_grad():
        attention.attention(Module(), q, k, v, None)
    monkeypatch.setattr(attention, "RECOMPUTED", False)
    attention.attention(Module(), q, k, v, None)
    assert calls == []
    monkeypatch.setattr(attention, "RECOMPUTED", True)
    out, _ = attention.attention(Module(), q, k, v, None)
    assert len(calls) == 1 and not out.any()  # with gradients the core ran


def test_only_a_cpu_model_on_sdpa_through_the_attention_interface_takes_it():
    class Config:
        _attn_implementation = "sdpa"

    class Model:
        config = Config()
        _supports_attention_backend = True

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert attention.applies(Model(), cpu)
    assert not attention.applies(Model(), cuda)
    Model._supports_attention_backend = False  # an architecture that calls SDPA itself
    assert not attention.applies(Model(), cpu)
    Model._supports_attention_backend, Config._attn_implementation = True, "eager"
    assert not attention.applies(Model(), cpu)

    class Bare:  # no word on its attention backend: not taken
        config = Config()

    Config._attn_implementation = "sdpa"
    assert not attention.applies(Bare(), cpu)


def test_without_a_scale_it_is_sdpas_default_and_only_a_non_causal_module_sees_every_key():
    class Open(Module):
        is_causal = False

    class Unsaid(nn.Module):  # no is_causal: causal, as transformers' SDPA path reads it
        num_key_value_groups = 3

    for module, queries in ((Module(), 2), (Open(), 4), (Unsaid(), 4)):
        results = []
        for fn in (attention.attention, sdpa_attention_forward):
            q, k, v = _inputs(queries, queries)
            out, _ = fn(module, q, k, v, None)
            out.pow(2).sum().backward()
            results.append((out.detach(), q.grad))
        assert torch.allclose(results[0][0], results[1][0], rtol=1e-12, atol=1e-12)
        assert torch.allclose(results[0][1], results[1][1], rtol=1e-10, atol=1e-12)


def test_in_bf16_it_computes_what_transformers_eager_attention_does():
    """Scores in bf16, the softmax in fp32, then bf16 again: bit for bit the eager path's numbers."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    q, k, v = (t.detach().to(torch.bfloat16).requires_grad_() for t in _inputs(6, 9))
    mask = _masks(6, 9)["additive"].to(torch.bfloat16)
    ours, _ = attention.attention(Module(), q, k, v, mask, scaling=0.3)
    eager, _ = eager_attention_forward(Module(), q, k, v, mask, scaling=0.3)
    assert torch.equal(ours, eager)


def test_only_the_names_that_take_a_boolean_mask_get_one():
    class Config:
        _attn_implementation = "sdpa"

    class Model:
        config = Config()

    assert attention.takes_boolean_mask(Model())
    Config._attn_implementation = attention.NAME
    assert attention.takes_boolean_mask(Model())
    Config._attn_implementation = "eager"  # an additive float mask
    assert not attention.takes_boolean_mask(Model())


def test_a_model_given_it_routes_attention_through_it_with_sdpas_gradient(monkeypatch):
    """A two-layer Llama in fp64 (grouped heads, a padded row): registered and set, its attention is
    this module's, and its weights' gradient is the one it has on SDPA."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=50, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).double()
    ids = torch.randint(0, 50, (2, 7))
    pad = torch.ones_like(ids)
    pad[1, 5:] = 0

    def gradient():
        model.zero_grad()
        model(input_ids=ids, attention_mask=pad).logits.pow(2).sum().backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    on_sdpa = gradient()
    assert attention.applies(model, torch.device("cpu"))
    model.set_attn_implementation(attention.register())
    assert model.config._attn_implementation == attention.NAME
    calls = []
    original = attention._core
    monkeypatch.setattr(attention, "_core", lambda *a: calls.append(1) or original(*a))
    ours = gradient()
    assert len(calls) == 2 * 2  # each layer, in the forward and again in the backward's recomputation
    assert torch.allclose(ours, on_sdpa, rtol=1e-9, atol=1e-12)
