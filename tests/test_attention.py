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
