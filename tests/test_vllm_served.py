"""The LLM judge and reviser behind a real vLLM server with structured output (issue 36).

`tests/test_served_llm.py` runs them behind `transformers serve`, which takes no schema: there the
embedded 135M model's free-form answers never parse and the rules reviser answers. Here one
module-scoped vLLM server (`pats.testing.VLLMServer`, its own venv, 127.0.0.1, offline) serves the same
model, and a one-step `pats run` with `structured: auto` must find structured output on through the
preflight's probe, get answers that parse in at least 95% of the calls that were answered, and either
apply at least one LLM edit that passed the validator or name the validator rules that refused every
LLM edit set. The model's text is never asserted on.

Policy side: the scripted backend on FakeEnv tasks. Under CI a missing vLLM venv or model fails
instead of skipping. `PATS_VLLM_URL=http://127.0.0.1:PORT/v1` (a server already serving the embedded
model as `smollm2-135m-instruct`) skips the start, for development on a shared machine.
"""

from __future__ import annotations

import os
import time

import pytest

from pats.cli.main import main
from pats.engine import run as run_module
from pats.errors import PrerequisiteError
from pats.logging.events import EditEvent, FallbackEvent, RefusedEvent, StepEndEvent, read_events
from pats.testing import FakeEnv, ScriptedBackend, improving_schedule
from pats.testing.vllm_server import VLLMServer

pytestmark = pytest.mark.slow
MAX_TOKENS = 800  # room for the schema's largest edit set (REVISE: four edits of <= 300 characters)
TIMEOUT_S = 400

SPEC = """\
name: vllm
environment: {{kind: twx}}
scaffold: {{mode: pats, min_citations: 1, review_budget_s: {budget}, initial_bank: "{bank}"}}
judge:
  kind: llm
  llm: {{model: "{model}", api_base: "{base_url}", max_tokens: {max_tokens}, max_retries: 1, backoff_s: 0, timeout_s: {timeout}, structured: auto}}
reviser:
  kind: llm
  llm: {{model: "{model}", api_base: "{base_url}", max_tokens: {max_tokens}, max_retries: 1, backoff_s: 0, timeout_s: {timeout}, structured: auto}}
trainer: {{steps: 1, tasks_per_step: 1, group_size: 4, checkpoint_every: 10}}
eval: {{every: 100, at_start: false, with_scaffold: false, num_tasks: 2}}
logging: {{root: "{root}", wandb: disabled, progress: false}}
"""


class _Running:
    """A server someone else started (PATS_VLLM_URL)."""

    def __init__(self, base_url: str):
        self.base_url, self.model, self.started_s = (
            base_url.rstrip("/"),
            "hosted_vllm/smollm2-135m-instruct",
            0.0,
        )

    def requests(self) -> int | None:
        return None  # its log is not ours to read


@pytest.fixture(scope="module")
def vllm():
    from pats.models import resolve_model_dir
    from pats.spec.models import EMBEDDED_POLICY

    if os.environ.get("PATS_VLLM_URL"):
        yield _Running(os.environ["PATS_VLLM_URL"])
        return
    try:
        server = VLLMServer(resolve_model_dir(EMBEDDED_POLICY), name="smollm2-135m-instruct").start()
    except PrerequisiteError as err:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no vLLM server: {err}")
    yield server
    server.stop()


class ClosingBackend(ScriptedBackend):
    def __init__(self):
        super().__init__(improving_schedule(), seed=3)

    async def close(self) -> None:
        return None


def test_a_run_behind_vllm_answers_in_the_schema(vllm, tmp_path, monkeypatch, write, capsys, repo):
    monkeypatch.setattr(run_module, "make_env_factory", lambda spec: lambda: FakeEnv(num_tasks=2))
    monkeypatch.setattr(run_module, "make_backend", lambda spec, make_env: ClosingBackend())
    spec = write(
        "vllm.yaml",
        SPEC.format(
            bank=repo / "experiments" / "banks" / "twc.json",
            model=vllm.model,
            base_url=vllm.base_url,
            max_tokens=MAX_TOKENS,
            timeout=TIMEOUT_S,
            budget=6 * TIMEOUT_S,
            root=tmp_path,
        ),
    )
    started = time.monotonic()
    code = main(["run", str(spec)])
    seconds = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 0, err
    assert "structured output on" in err, "the preflight's probe should find vLLM enforcing the schema"

    events = tmp_path / "vllm" / "events.jsonl"
    (end,) = read_events(events, StepEndEvent)
    m = end.metrics
    calls, faults = int(m["review/llm_calls"]), int(m["review/llm_faults"])
    malformed, timeouts = int(m["review/llm_malformed"]), int(m["review/llm_timeouts"])
    refused = [r.problem for r in read_events(events, RefusedEvent)]
    fallbacks = read_events(events, FallbackEvent)
    edits = read_events(events, EditEvent)
    answered = calls - (faults - malformed)  # requests that brought an answer
    parsed = calls - faults
    print(
        f"\nvLLM run: {seconds:.0f} s (server ready in {vllm.started_s:.0f} s), {vllm.requests()} requests; "
        f"calls {calls}, parsed {parsed}, malformed {malformed}, timed out {timeouts}, tokens "
        f"{int(m['review/llm_tokens'])}; edits applied {len(edits)}, refused sets {len(refused)}, "
        f"fallbacks {len(fallbacks)}"
    )
    for problem in refused:
        print("  refused:", problem[:400])

    assert faults == malformed + timeouts, "the server was up: every fault is an answer or a slow one"
    assert answered > 0 and parsed >= 0.95 * answered, f"{parsed} of {answered} answers parsed"
    if vllm.requests() is not None:  # the preflight and its probe, then every call
        assert vllm.requests() == 2 + calls
    # The LLM's own edit set entered the scaffold (no fallback this step), or the validator refused
    # every one it wrote, each refusal naming its rule.
    llm_sets = [p for p in refused if " attempt " in p]
    if edits and not fallbacks:
        return
    assert llm_sets, f"no LLM edit set reached the validator: {refused}"
    assert all(":" in p.split(" attempt ", 1)[1] for p in llm_sets)
