"""The served model's dtype on this CPU: vLLM serving the embedded model in bf16 and in fp32, side by side.

`pats serve` and the tests' vLLM server pick bf16 only where the CPU computes it natively (avx512_bf16,
AMX: `pats.lm.serve.cpu_dtype`), since without it bf16 is emulated. On the 2-core AVX2-only EPYC
(2026-12-07) the long prompts took about 3x as long in bf16. This starts one server per dtype
in turn (the same command line but for `--dtype`) and sends each the same requests at temperature 0:
two short prompts (decoding dominates) and two of about 3,000 tokens (the prompt's forward pass, the
prefill, dominates, as in a reviser's call). It prints each server's start and each request's seconds
and completion tokens, and the ratio of the summed request seconds, and writes them to
bench/results/serve_dtype-<cpu flag>.json:

    python bench/perf/serve_dtype.py                       # bfloat16 then float32
    python bench/perf/serve_dtype.py --dtypes float32      # one only

Needs vLLM's interpreter (`./scripts/install .venv --vllm`). Each server takes 1-4 minutes to start.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path

from pats.host import cpu_has_native_bf16, cpu_model
from pats.models import resolve_model_dir
from pats.spec.models import EMBEDDED_POLICY
from pats.testing.vllm_server import VLLMServer

RESULTS = Path(__file__).resolve().parents[1] / "results"
SHORT = "Write a JSON object with keys a, b, c holding three short English sentences about cooking."
CARDS = " ".join(
    f"Card {i}: the agent opened the fridge, took the apple and put it on the table." for i in range(150)
)
PROMPTS = (
    SHORT,
    SHORT,
    CARDS + " Summarize the cards in one sentence.",
    "Card 0 again. " + CARDS + " Name one object.",
)


def ask(server: VLLMServer, prompt: str) -> tuple[float, int]:
    body = {"model": server.name, "messages": [{"role": "user", "content": prompt}], "max_tokens": 200,
            "temperature": 0}  # fmt: skip
    request = urllib.request.Request(
        server.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    began = time.monotonic()
    answer = json.load(urllib.request.urlopen(request, timeout=900))
    return time.monotonic() - began, int(answer["usage"]["completion_tokens"])


def one(dtype: str) -> dict:
    began = time.monotonic()
    server = VLLMServer(resolve_model_dir(EMBEDDED_POLICY), name="m", dtype=dtype).start()
    try:
        ready = time.monotonic() - began
        requests = [ask(server, p) for p in PROMPTS]
    finally:
        server.stop()
    row = {"dtype": dtype, "ready_s": round(ready, 1), "requests": [[round(s, 2), n] for s, n in requests]}
    print(dtype, f"ready {ready:.0f} s;", " ".join(f"{s:.1f} s/{n} tokens" for s, n in requests), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dtypes", nargs="+", default=["bfloat16", "float32"], choices=["bfloat16", "float32"]
    )
    args = parser.parse_args()
    rows = [one(d) for d in args.dtypes]
    totals = {r["dtype"]: sum(s for s, _ in r["requests"]) for r in rows}
    if len(totals) == 2:
        print(f"requests' seconds, bfloat16 / float32: {totals['bfloat16'] / totals['float32']:.2f}x")
    native = cpu_has_native_bf16()
    out = RESULTS / f"serve_dtype-{'native_bf16' if native else 'no_native_bf16'}.json"
    out.write_text(json.dumps({"cpu": cpu_model(), "native_bf16": native, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
