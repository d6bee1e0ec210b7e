"""Where the time goes: achieved GFLOP/s beside what this CPU's bf16 matmul reaches.

`counted_gflop` counts the FLOPs a call really runs (torch's FlopCounterMode: matmuls and attention,
forward and backward, padding and recomputation included), `matmul_gflops` measures a plain bf16
matmul at a given shape, so a phase's GFLOP/s can be read against the same shapes and against a
large one (2048^3), where a CPU's bf16 units come closest to their limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

MODEL_SHAPE = (576, 1536)  # SmolLM2-135M's MLP: (rows x 576) @ (576 x 1536)


def best_seconds(fn: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of `repeats` timed calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_gflops(m: int, k: int, n: int) -> float:
    """GFLOP/s of a bf16 (m x k) @ (k x n) matmul on this machine."""
    a, b = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(k, n, dtype=torch.bfloat16)
    return 2 * m * k * n / best_seconds(lambda: a @ b) / 1e9


def linear_weights(model) -> int:
    """Weights of the decoder's linear layers (LoRA included): a token costs 2 FLOPs per weight."""
    layers = model.get_decoder().layers
    return sum(m.weight.numel() for m in layers.modules() if isinstance(m, torch.nn.Linear))


def counted_gflop(fn: Callable[[], object]) -> float:
    """GFLOP that one call of `fn` runs (counting slows it down: time it separately)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops() / 1e9
