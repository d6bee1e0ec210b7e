"""A real model behind an OpenAI-compatible endpoint on 127.0.0.1: `transformers serve`, for tests.

`ScriptedOpenAIServer` answers from a script; this one answers with a model, so a test sees what DSPy's
parsing, the retries and the rules fallback do with text a real model wrote. It starts
`transformers serve` (the `serving` extra of transformers: fastapi, uvicorn) as a child process pinned
to one local model directory, on a free port, offline, and stops it on exit:

    with ServedModel(resolve_model_dir(EMBEDDED_POLICY)) as served:
        llm = {"model": served.model, "api_base": served.base_url}   # openai/<name>, http://.../v1

The server is pinned to the directory it was started with and refuses requests for any other model
name; it is started from a scratch folder holding a link `<name>` to the directory, so the model
string is the short `openai/<name>` rather than `openai/<absolute path>`. The weights are bf16 only
where the CPU computes bf16 natively, else fp32 (`cpu_dtype`, as vLLM's). On a 2-core CPU the embedded
SmolLM2-135M writes a few to a few tens of tokens a second: keep `llm.max_tokens` small.

One gap of `transformers serve` (5.10) is patched in the server process (`python -m
pats.testing.model_server`): it ignores `max_completion_tokens`, the field DSPy's OpenAI client sends
`llm.max_tokens` in, and then generates up to 1024 tokens per call; here it is read as `max_tokens`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pats.errors import PrerequisiteError
from pats.lm.serve import cpu_dtype
from pats.testing.local_server import LocalServer, free_port

__all__ = ["ServedModel", "free_port", "require_serving"]

SERVING_INSTALL = "`pip install 'transformers[serving]'` (in a clone: `./scripts/install .venv --test`)"


def require_serving() -> None:
    """A PrerequisiteError naming the install command when `transformers serve` cannot run."""
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise PrerequisiteError(f"`transformers serve` needs {' and '.join(missing)}: {SERVING_INSTALL}")


class ServedModel(LocalServer):
    """`transformers serve <model_dir>` on 127.0.0.1; `model` and `base_url` are what a spec's llm needs."""

    LABEL = "`transformers serve`"
    LOG = "serve.log"
    ANSWERED = '"POST /v1/chat/completions HTTP/1.1" 200'

    def __init__(self, model_dir: str | Path, *, name: str | None = None, ready_s: float = 120.0):
        super().__init__(model_dir, name=name, ready_s=ready_s)

    def start(self) -> ServedModel:
        require_serving()
        folder = self._folder_for("pats-serve-")
        (folder / self.name).symlink_to(self.model_dir, target_is_directory=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        command = [sys.executable, "-m", "pats.testing.model_server", "serve", self.name]
        command += [
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--device",
            "cpu",
            "--dtype",
            cpu_dtype(),
        ]
        return self._launch(command, env)


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
