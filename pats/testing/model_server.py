"""A real model behind an OpenAI-compatible endpoint on 127.0.0.1: `transformers serve`, for tests.

`ScriptedOpenAIServer` answers from a script; this one answers with a model, so a test sees what DSPy's
parsing, the retries and the rules fallback do with text a real model wrote. It starts
`transformers serve` (the `serving` extra of transformers: fastapi, uvicorn) as a child process pinned
to one local model directory, on a free port, offline, and stops it on exit:

    with ServedModel(resolve_model_dir(EMBEDDED_POLICY)) as served:
        llm = {"model": served.model, "api_base": served.base_url}   # openai/<name>, http://.../v1

The server is pinned to the directory it was started with and refuses requests for any other model
name; it is started from a scratch folder holding a link `<name>` to the directory, so the model
string is the short `openai/<name>` rather than `openai/<absolute path>`. On a 2-core CPU the embedded
SmolLM2-135M writes a few to a few tens of tokens a second: keep `llm.max_tokens` small.

One gap of `transformers serve` (5.10) is patched in the server process (`python -m
pats.testing.model_server`): it ignores `max_completion_tokens`, the field DSPy's OpenAI client sends
`llm.max_tokens` in, and then generates up to 1024 tokens per call; here it is read as `max_tokens`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from pats.errors import PrerequisiteError

SERVING_INSTALL = "`pip install 'transformers[serving]'` (in a clone: `./scripts/install .venv --test`)"


def require_serving() -> None:
    """A PrerequisiteError naming the install command when `transformers serve` cannot run."""
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise PrerequisiteError(f"`transformers serve` needs {' and '.join(missing)}: {SERVING_INSTALL}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServedModel:
    """`transformers serve <model_dir>` on 127.0.0.1; `model` and `base_url` are what a spec's llm needs."""

    def __init__(self, model_dir: str | Path, *, name: str | None = None, ready_s: float = 120.0):
        self.model_dir = Path(model_dir).resolve()
        self.name = name or self.model_dir.name
        self.ready_s = ready_s  # the most seconds to wait for the server to answer /health
        self.port: int | None = None
        self.started_s: float | None = None  # seconds from launch to ready
        self._proc: subprocess.Popen | None = None
        self._folder: Path | None = None

    @property
    def model(self) -> str:
        return f"openai/{self.name}"

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not running; use it as a context manager or call start()")
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ServedModel:
        require_serving()
        if not (self.model_dir / "config.json").is_file():
            raise PrerequisiteError(f"{self.model_dir} is not a model directory (no config.json)")
        self._folder = Path(tempfile.mkdtemp(prefix="pats-serve-"))
        (self._folder / self.name).symlink_to(self.model_dir, target_is_directory=True)
        self.port = free_port()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        command = [sys.executable, "-m", "pats.testing.model_server", "serve", self.name]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu"]
        log = open(self._folder / "serve.log", "wb")  # noqa: SIM115 - closed with the process
        began = time.monotonic()
        self._proc = proc = subprocess.Popen(
            command, cwd=self._folder, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        try:
            self._wait_ready(proc, began)
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
                    f"`transformers serve` exited with code {proc.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise PrerequisiteError(
            f"`transformers serve` did not answer {url} within {self.ready_s:g}s:\n" + self.log_tail()
        )

    def requests(self) -> int:
        """Chat completions the server has answered so far (from its access log)."""
        path = self._folder / "serve.log" if self._folder else None
        if path is None or not path.is_file():
            return 0
        return path.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')

    def log_tail(self, chars: int = 3000) -> str:
        path = self._folder / "serve.log" if self._folder else None
        if path is None or not path.is_file():
            return "(no log)"
        return path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._proc = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> ServedModel:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _accept_max_completion_tokens() -> None:
    """Make `transformers serve` read `max_completion_tokens` (OpenAI's current name) as `max_tokens`."""
    from transformers.cli.serving.chat_completion import ChatCompletionHandler

    build = ChatCompletionHandler._build_generation_config

    def build_reading_max_completion_tokens(self, body, model_generation_config, use_cb=False):
        if body.get("max_tokens") is None and body.get("max_completion_tokens") is not None:
            body = {**body, "max_tokens": body["max_completion_tokens"]}
        return build(self, body, model_generation_config, use_cb=use_cb)

    # Patched on the class: transformers serve builds its handlers itself.
    ChatCompletionHandler._build_generation_config = build_reading_max_completion_tokens  # type: ignore[method-assign]
    ChatCompletionHandler._unused_fields = set(ChatCompletionHandler._unused_fields) - {
        "max_completion_tokens"
    }


if __name__ == "__main__":  # `transformers ...` with the patch above: what ServedModel starts
    _accept_max_completion_tokens()
    from transformers.cli.transformers import main

    sys.argv[0] = "transformers"
    main()
