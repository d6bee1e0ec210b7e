"""What the test servers on 127.0.0.1 share (`ServedModel`: transformers serve; `VLLMServer`: vLLM): a
child process on a free port, with its log in a scratch folder, ready when /health answers, counted
from its access log, stopped with the folder removed. A subclass names its server and builds the
command in `start`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TypeVar

from pats.errors import PrerequisiteError

S = TypeVar("S", bound="LocalServer")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalServer:
    LABEL = "the server"  # in messages
    PROVIDER = "openai"  # the LiteLLM prefix of `model`
    LOG = "server.log"
    ANSWERED = '"POST /v1/chat/completions HTTP/1.1"'  # an access-log line that `requests` counts
    POLL_S = 0.25
    GROUP = False  # the server starts child processes: stop its whole process group

    def __init__(self, model_dir: str | Path, *, name: str | None, ready_s: float):
        self.model_dir = Path(model_dir).resolve()
        self.name = name or self.model_dir.name
        self.ready_s = ready_s  # the most seconds to wait for the server to answer /health
        self.port: int | None = None
        self.started_s: float | None = None  # seconds from launch to ready
        self._proc: subprocess.Popen | None = None
        self._folder: Path | None = None

    @property
    def model(self) -> str:
        return f"{self.PROVIDER}/{self.name}"

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not running; use it as a context manager or call start()")
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self: S) -> S:
        raise NotImplementedError

    def _folder_for(self, prefix: str) -> Path:
        """A new scratch folder and port for a start, after checking the model directory."""
        if not (self.model_dir / "config.json").is_file():
            raise PrerequisiteError(f"{self.model_dir} is not a model directory (no config.json)")
        self._folder = Path(tempfile.mkdtemp(prefix=prefix))
        self.port = free_port()
        return self._folder

    def _launch(self: S, command: list[str], env: dict[str, str]) -> S:
        """Run `command` in the scratch folder, logging there, and wait until it answers /health."""
        assert self._folder is not None, "call _folder_for first"
        log = open(self._folder / self.LOG, "wb")  # noqa: SIM115 - closed with the process
        began = time.monotonic()
        self._proc = subprocess.Popen(
            command,
            cwd=self._folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=self.GROUP,
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
                    f"{self.LABEL} exited with code {proc.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(self.POLL_S)
        raise PrerequisiteError(
            f"{self.LABEL} did not answer {url} within {self.ready_s:g}s:\n" + self.log_tail()
        )

    def _log(self) -> str | None:
        path = self._folder / self.LOG if self._folder else None
        return path.read_text(errors="replace") if path is not None and path.is_file() else None

    def requests(self) -> int:
        """Chat completions the server has answered so far (from its access log)."""
        return (self._log() or "").count(self.ANSWERED)

    def log_tail(self, chars: int = 3000) -> str:
        log = self._log()
        return "(no log)" if log is None else log[-chars:]

    def stop(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            kill = (lambda sig: os.killpg(proc.pid, sig)) if self.GROUP else proc.send_signal
            kill(15)
            try:
                proc.wait(timeout=30 if self.GROUP else 10)
            except subprocess.TimeoutExpired:
                kill(9)
                proc.wait(timeout=10)
        self._proc = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
