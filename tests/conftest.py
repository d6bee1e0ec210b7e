"""Shared fixtures and the two tiers. Tests run on CPU, offline; the data sets are found via `shared_data`
($PATS_DATA or ../shared/data).

Tiers (docs/testing.md): a plain `pytest` runs the default tier; tests marked `slow` (real model
servers, vLLM, Ray, training runs, real games in real processes) run only with `--run-slow` or
PATS_RUN_SLOW=1, as transformers' RUN_SLOW. Left out, they are deselected and one line at the end
says how many and how to run them. `.ci/run` runs both tiers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

RUN_SLOW = "PATS_RUN_SLOW"
SLOW_LEFT = pytest.StashKey[int]()
HOW_TO_RUN_SLOW = (
    f"run them with `pytest --run-slow` or {RUN_SLOW}=1, that tier alone with `--run-slow -m slow` "
    "(docs/testing.md; vLLM's tests need `./scripts/install .venv --test --vllm`)"
)


def pytest_addoption(parser):
    parser.addoption(
        "--run-slow",
        action="store_true",
        help=f"also run the tests marked slow (the same as {RUN_SLOW}=1); docs/testing.md",
    )


def runs_slow(config) -> bool:
    return bool(config.getoption("--run-slow")) or os.environ.get(RUN_SLOW, "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    """Without the switch, the slow tier is deselected (one summary line, not a skip line per test)."""
    if runs_slow(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if not slow:
        return
    config.hook.pytest_deselected(items=slow)
    items[:] = [item for item in items if not item.get_closest_marker("slow")]
    config.stash[SLOW_LEFT] = len(slow)
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: tell the controller, which collects nothing
        config.workeroutput["pats_slow_left"] = len(slow)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, in the controller
def pytest_testnodedown(node, error):
    left = getattr(node, "workeroutput", {}).get("pats_slow_left", 0)
    node.config.stash[SLOW_LEFT] = max(left, node.config.stash.get(SLOW_LEFT, 0))


def pytest_terminal_summary(terminalreporter, config):
    left = config.stash.get(SLOW_LEFT, 0)
    if left:
        tests = "test" if left == 1 else "tests"
        terminalreporter.write_line(
            f"{left} slow {tests} not run (the slow tier: model servers, vLLM, Ray, training runs); "
            + HOW_TO_RUN_SLOW
        )


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def shared_data() -> Path:
    """The data root of the tests: $PATS_DATA, else ../shared/data beside the checkout (`.ci/run` sets
    PATS_DATA to it). Without it a test skips, saying why; under CI (CI=true) it fails instead."""
    from pats.data import DATASETS

    path = Path(os.environ.get("PATS_DATA") or REPO.parent / "shared" / "data").absolute()
    missing = [d.name for d in DATASETS if not all((path / f.path).is_file() for f in d.files)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(
                f"shared data missing at {path} ({', '.join(missing)}): CI runs with ../shared beside the checkout"
            )
        pytest.skip(
            f"needs the data sets {', '.join(missing)} at {path}: set PATS_DATA to a folder filled by "
            f"`pats data fetch {' '.join(missing)}` (the tests read ALFWorld's tarballs, which come from a "
            "--mirror; see docs/environments.md), or put ../shared/data beside the checkout"
        )
    return path


@pytest.fixture
def write(tmp_path):
    """Write a file under tmp_path and return its path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return _write


@pytest.fixture(scope="session")
def count_tokens():
    """The embedded policy's real tokenizer as a token counter (converted once, then cached)."""
    from pats.models import token_counter
    from pats.spec.models import EMBEDDED_POLICY

    return token_counter(EMBEDDED_POLICY)


@pytest.fixture(scope="module")  # each module that uses it builds it after torch.manual_seed(0), as before
def tiny_model_dir(tmp_path_factory):
    """A random 2-layer Llama with SmolLM2's tokenizer: any model directory works like the default (a
    policy that loads in a second and scores in milliseconds, for tests of plumbing, not of numbers)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pats.models import load_tokenizer
    from pats.spec.models import EMBEDDED_POLICY

    tokenizer = load_tokenizer(EMBEDDED_POLICY)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("tiny")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def kill_jvm_on_step(monkeypatch):
    """`kill_jvm_on_step(n)`: the n-th TwxEnv.step of the test (counting from 1) first kills the
    environment's JVM (SIGKILL), as a crash would, then runs as usual."""
    import asyncio
    import signal

    from pats.envs.twx import TwxEnv

    def arm(n: int) -> None:
        original, calls = TwxEnv.step, []

        async def step(self, action):
            calls.append(action)
            if len(calls) == n:
                os.kill(self.jvm_pid, signal.SIGKILL)
                await asyncio.sleep(0.2)
            return await original(self, action)

        monkeypatch.setattr(TwxEnv, "step", step)

    return arm
