"""The reviser benchmark: one reviser on the committed bundles of real runs, counted per bundle.

    python bench/reviser.py --rules                                   # the offline rules reviser
    python bench/reviser.py --serve vllm --structured on off          # the embedded model behind vLLM
    python bench/reviser.py --serve transformers --structured off     # ... behind `transformers serve`
    python bench/reviser.py --model openai/gpt-4o-mini                # a hosted model (OPENAI_API_KEY)
    python bench/reviser.py --model hosted_vllm/M --api-base http://HOST:8000/v1 --structured on
    python bench/reviser.py --record /path/to/run_dir ...             # bundles from finished runs
    python bench/reviser.py --recount LABEL ...                      # committed results, columns added since
    python bench/reviser.py --walkthrough experiments/alfworld/local.yaml trainer.steps=3 ...

Each bundle (bench/reviser_bundles/, see bench/reviser_bundles.py) is one task type's review of a
recorded run: its cards, assessment, current entries and scaffold settings. The reviser is called on
it as the review calls it (pats' prompts, parsing and schema), once: the review's retry with the
validator's errors and its rules fallback are left out, so the numbers are the model's first answers.
Per bundle (bench/reviser_score.py): parsed, edits proposed, edits the validator accepts and the rules
that refuse the others, citations valid, the type's scaffold tokens after the valid edits, LLM calls,
tokens (prompt and completion apart) and seconds; the summary prices the tokens in USD by LiteLLM's
offline cost map (None, with the reason, for a model it does not know, such as any self-hosted one). A
table is printed and the rows go to bench/results/reviser/<label>.json.

`--serve` starts a server on the embedded model for the run (pats.testing.ServedModel for
`transformers serve`, which takes no schema; pats.testing.VLLMServer, from the `<venv>-vllm` venv or
$PATS_VLLM_PYTHON) and scores every `--structured` value against that one server.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, RESULTS, write_result  # noqa: E402
from reviser_bundles import BUNDLES, ReviserBundle, load, record, save  # noqa: E402
from reviser_score import BundleScore, bundle_check, kinds_fields, score  # noqa: E402

OUT = RESULTS / "reviser"
SERVED_KEY = "PATS_BENCH_SERVED_KEY"  # openai/ sends a key; transformers serve ignores it


def cost(rows: list[BundleScore], model: str | None) -> tuple[float | None, str]:
    """(USD, why not): the rows' LLM tokens priced by LiteLLM's offline cost map (`pats.lm.caller.usd_cost`);
    0 without LLM calls (the rules reviser), None with the reason where they cannot be priced."""
    if not any(r.calls for r in rows):
        return 0.0, "no LLM calls"
    if model is None:
        return None, "no model named to price"
    if any(r.llm_tokens != r.prompt_tokens + r.completion_tokens for r in rows):
        return None, "rows without prompt and completion tokens apart"
    from pats.lm.caller import usd_cost

    usd = usd_cost(model, sum(r.prompt_tokens for r in rows), sum(r.completion_tokens for r in rows))
    return (usd, "") if usd is not None else (None, f"LiteLLM's offline cost map does not know {model}")


def summary(rows: list[BundleScore], model: str | None = None) -> dict:
    """The rows counted; `model` (the LLM's LiteLLM model string, None for the rules) prices them."""
    parsed = [r for r in rows if r.parsed]
    calls = sum(r.calls for r in rows)
    usd, why = cost(rows, model)
    kinds = [r.kinds_as_rules for r in rows if r.kinds_as_rules is not None]
    return {
        "bundles": len(rows),
        "parsed": len(parsed),
        "sets_valid": sum(r.set_valid for r in rows),  # at the first answer
        "sets_valid_after_retry": sum(r.valid_after_retry for r in rows),
        "edits_proposed": sum(r.proposed for r in rows),
        "edits_valid": sum(r.valid_edits for r in rows),
        "citations_valid": sum(bool(r.citations_valid) for r in parsed),
        "tokens_before": sum(r.tokens_before for r in rows),
        "tokens_after": sum(r.tokens_after for r in rows),
        "calls": calls,
        "tokens_per_call": sum(r.llm_tokens for r in rows) / calls if calls else 0.0,
        "seconds_per_call": sum(r.seconds for r in rows) / max(calls, 1)
        if calls
        else sum(r.seconds for r in rows) / max(len(rows), 1),
        "refusing_rules": sorted({rule for r in rows for rule in r.rules}),
        # accepted sets scored since the column exists (2026-12-05): the mean agreement of their kinds
        # of edit with the rules reviser's on the same bundle, and over how many sets
        "kinds_as_rules": mean(kinds) if kinds else None,
        "kinds_as_rules_sets": len(kinds),
        "prompt_tokens": sum(r.prompt_tokens for r in rows),
        "completion_tokens": sum(r.completion_tokens for r in rows),
        "usd": usd,  # all calls together; None: not priced, `usd_note` says why
        "usd_note": why,
    }


def table(label: str, rows: list[BundleScore], model: str | None = None) -> str:
    head = f"{'bundle':58} {'mode':8} {'parsed':6} {'edits':>5} {'valid':>5} {'set':>3} {'cites':>5} {'tok':>9} {'llm_tok':>7} {'s':>7}  rules"
    lines = [f"== {label}", head]
    for r in rows:
        cites = "-" if r.citations_valid is None else ("ok" if r.citations_valid else "bad")
        lines.append(
            f"{r.bundle[:58]:58} {r.mode:8} {'yes' if r.parsed else 'no':6} {r.proposed:5} {r.valid_edits:5} "
            f"{'ok' if r.set_valid else '-':>3} {cites:>5} {f'{r.tokens_before}>{r.tokens_after}':>9} {r.llm_tokens:7} "
            f"{r.seconds:7.1f}  {','.join(sorted(set(r.rules))) or (r.error[:60] if r.error else '')}"
        )
    s = summary(rows, model)
    usd = f"USD {s['usd']:.4f}" if s["usd"] is not None else f"USD unknown ({s['usd_note']})"
    lines.append(
        f"parsed {s['parsed']}/{s['bundles']}, sets valid {s['sets_valid']}/{s['bundles']} at the first answer "
        f"and {s['sets_valid_after_retry']}/{s['bundles']} after the retry, edits valid "
        f"{s['edits_valid']}/{s['edits_proposed']}, citations valid {s['citations_valid']}/{s['parsed']}, scaffold "
        f"tokens {s['tokens_before']} -> {s['tokens_after']}, {s['tokens_per_call']:.0f} tokens and "
        f"{s['seconds_per_call']:.1f} s per call, {usd}"
        + (
            f", kinds of edit as the rules' {s['kinds_as_rules']:.2f} over {s['kinds_as_rules_sets']} accepted sets"
            if s["kinds_as_rules"] is not None
            else ""
        )
    )
    return "\n".join(lines)


def llm_reviser(bundle: ReviserBundle, llm: dict, count=None, program: str | None = None):
    """The LLM reviser under the bundle's run settings; with `count` (the policy tokenizer) it gets the
    bundle's check, and its program asks once more when the first answer is refused, as in training."""
    from pats.reviser import LLMReviser
    from pats.reviser.prompt import ReviserSettings
    from pats.spec.models import LLMReviserSpec, LLMSpec

    spec = LLMReviserSpec(llm=LLMSpec(**llm), program=program)
    check = bundle_check(bundle, count) if count is not None else None
    return LLMReviser(spec, ReviserSettings.of(bundle.scaffold), check=check)


def rules_reviser(bundle: ReviserBundle, count=None):
    from pats.reviser import RulesReviser

    sc = bundle.scaffold
    if sc.mode not in ("grow", "pats"):  # a bundle is a review, so its run's scaffold reviewed
        raise ValueError(f"{bundle.name}: scaffold mode {sc.mode} has no reviser")
    return RulesReviser(
        removal=sc.removes, min_citations=sc.min_citations, mode_of_scaffold=sc.mode, budget=sc.budget,
        task_plans=sc.task_plans,
    )  # fmt: skip


def resolve_structured(llm: dict) -> str:
    """`auto` decided once by pats' own probe (one request, not counted in any bundle), as on/off."""
    if llm["structured"] != "auto":
        return llm["structured"]
    import asyncio

    from pats.lm.caller import LLMCaller, probe_structured
    from pats.spec.models import LLMSpec

    caller = LLMCaller(LLMSpec(**llm))
    on = asyncio.run(probe_structured(caller, "bench"))
    caller.close()
    return "on" if on else "off"


def run(label: str, bundles: list[ReviserBundle], make, meta: dict) -> Path:
    from pats.models import token_counter

    counters: dict = {}
    rows: list[BundleScore] = []
    model = meta["llm"]["model"] if meta["reviser"] == "llm" else None  # what the USD are priced by
    path = OUT / f"{label}.json"
    for b in bundles:
        if b.policy_model not in counters:
            counters[b.policy_model] = token_counter(b.policy_model)
        reviser = make(b, counters[b.policy_model])
        rows.append(score(b, reviser, counters[b.policy_model]))
        if hasattr(reviser, "caller"):
            reviser.caller.close()
        print(table(label, rows[-1:]).splitlines()[-2], flush=True)
        # Written after every bundle: a run stopped part way keeps what it scored.
        result = {
            **meta,
            "label": label,
            "complete": len(rows) == len(bundles),
            "summary": summary(rows, model),
            "rows": [r.model_dump(mode="json") for r in rows],
        }
        path = write_result(label, result, OUT)
    print(table(label, rows, model))
    print(f"wrote {path}")
    return path


def recount(label: str, bundles: list[ReviserBundle]) -> Path:
    """A committed result's stored first answers counted again for the columns added after it ran (the
    rules reviser's kinds of edit on each bundle, and an accepted set's agreement with them); what was
    measured (parsed, valid, tokens, seconds) is kept as it was. The LLM is not called."""
    path = OUT / f"{label}.json"
    result = json.loads(path.read_text(encoding="utf-8"))
    by_name = {b.name: b for b in bundles}
    rows = []
    for row in result["rows"]:
        score = BundleScore.model_validate(row)
        update = kinds_fields(by_name[score.bundle], score.edits, score.set_valid)
        rows.append(score.model_copy(update=update))
    model = result["llm"]["model"] if result["reviser"] == "llm" else None
    result.update(
        recounted=datetime.date.today().isoformat(),
        summary=summary(rows, model),
        rows=[r.model_dump(mode="json") for r in rows],
    )
    print(table(label, rows, model))
    return write_result(label, result, OUT)


def checks(bundles: list[ReviserBundle], meta: dict) -> None:
    """The oracle row on every bundle and the perturbation table on the first bundle with entries."""
    from reviser_checks import oracle_row, perturbation_rows

    from pats.models import token_counter

    count = token_counter(bundles[0].policy_model)
    oracle = [oracle_row(b, count) for b in bundles]
    base = next(
        b for b in bundles if b.entries and len({c.id for c in b.cards if c.task_type == b.task_type}) >= 2
    )
    table = perturbation_rows(base, count)
    for row in oracle:
        print(
            f"oracle {row['bundle'][:58]:58} {row['mode']:8} edits {row['edits']}  {'passes' if row['passes'] else 'FAILS: ' + '; '.join(row['problems'])}"
        )
    for row in table:
        print(
            f"perturb {row['rule']:22} refused {row['refused']!s:5} by its rule {row['by_its_rule']!s:5} schema refuses {row['schema_refuses']}"
        )
    path = write_result("oracle", {**meta, "rows": oracle, "passes": sum(r["passes"] for r in oracle)}, OUT)
    print(f"oracle: {sum(r['passes'] for r in oracle)}/{len(oracle)} pass; wrote {path}")
    path = write_result("perturbations", {**meta, "bundle": base.name, "rows": table}, OUT)
    print(
        f"perturbations: {sum(r['by_its_rule'] for r in table)}/{len(table)} refused by their rule; wrote {path}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    who = p.add_mutually_exclusive_group()
    who.add_argument("--model", help="LiteLLM model string of the reviser (openai/..., hosted_vllm/...)")
    who.add_argument("--rules", action="store_true", help="score the offline rules reviser")
    who.add_argument("--checks", action="store_true",
                     help="the oracle row on every bundle and the perturbation table (bench/reviser_checks.py)")  # fmt: skip
    who.add_argument("--serve", choices=["transformers", "vllm"], help="start a server on the embedded model")
    who.add_argument("--record", nargs="+", metavar="RUN_DIR", help="write the bundles of finished run dirs")
    who.add_argument("--recount", nargs="+", metavar="LABEL",
                     help="count committed results' stored answers again for columns added since (no LLM call)")  # fmt: skip
    who.add_argument("--walkthrough", nargs="+", metavar="ARG",
                     help="SPEC [KEY=VALUE ...]: train SPEC on the walkthrough player (bench/walkthrough.py) under --runs, then record its bundles")  # fmt: skip
    p.add_argument("--api-base", help="endpoint of a self-hosted model, e.g. http://host:8000/v1")
    p.add_argument("--api-key-env", help="NAME of the variable with the key (default: the provider's)")
    p.add_argument("--structured", nargs="+", choices=["on", "off", "auto"], default=["auto"],
                   help="llm.structured; several values score each in turn against one server")  # fmt: skip
    p.add_argument(
        "--max-tokens", type=int, default=800, help="llm.max_tokens (the schema's largest set fits 800)"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="llm.timeout_s per call")
    p.add_argument("--bundles", type=Path, default=BUNDLES, help="folder of bundle JSON files")
    p.add_argument("--only", nargs="*", default=[], help="keep bundles whose name contains one of these")
    p.add_argument("--split", choices=["heldout", "train", "all"], default="heldout",
                   help="the bundles scored (default heldout); with --record: the split the new bundles join")  # fmt: skip
    p.add_argument("--program", help="a compiled reviser program (pats compile-reviser) for the LLM rows")
    p.add_argument(
        "--label",
        help="result name (rules) or its prefix (an LLM: <label>-structured_<on|off|auto-...>); default from the model",
    )
    p.add_argument("--runs", type=Path, default=Path("runs/reviser-bench"), help="root of --walkthrough runs")
    args = p.parse_args(argv)

    if args.record or args.walkthrough:
        if args.walkthrough:
            from walkthrough import walkthrough_run

            dirs = [walkthrough_run(args.walkthrough[0], args.walkthrough[1:], args.runs.resolve())]
            source = "walkthrough player (bench/walkthrough.py): " + " ".join(args.walkthrough)
        else:
            dirs, source = [Path(d) for d in args.record], ""
        for d in dirs:
            split = "heldout" if args.split == "all" else args.split
            for path in save(record(d, source or f"pats run: {d.name}", split), args.bundles):
                print(f"wrote {path}")
        return 0

    if args.recount:
        everything = load(args.bundles)
        for label in args.recount:
            print(f"wrote {recount(label, everything)}")
        return 0
    bundles = load(args.bundles, args.only, None if args.split == "all" else args.split)

    def in_repo(path: Path) -> Path:
        path = path.resolve()
        return path.relative_to(REPO) if path.is_relative_to(REPO) else path

    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "first_attempt_only": True,
        # relative to the checkout when inside it: a result names no one machine's paths
        "bundles_folder": str(in_repo(args.bundles)),
    }
    if args.rules:
        run(args.label or "rules", bundles, rules_reviser, {**meta, "reviser": "rules"})
        return 0
    if args.checks:
        checks(bundles, meta)
        return 0
    if not (args.model or args.serve):
        p.error("name a reviser: --rules, --model MODEL or --serve transformers|vllm")

    server = None
    if args.serve:
        from pats.models import resolve_model_dir
        from pats.spec.models import EMBEDDED_POLICY
        from pats.testing import ServedModel
        from pats.testing.vllm_server import VLLMServer

        began = time.monotonic()
        where = resolve_model_dir(EMBEDDED_POLICY)
        # ALFWorld bundles' prompts pass VLLMServer's default 4,096 tokens (long card ids, two tasks'
        # cards); 8,192 is the embedded model's own context, which transformers serve allows anyway.
        server = (
            ServedModel(where, name=EMBEDDED_POLICY, ready_s=900.0)
            if args.serve == "transformers"
            else VLLMServer(where, name=EMBEDDED_POLICY, ready_s=900.0)
        ).start()
        print(
            f"{args.serve} serving {server.model} at {server.base_url} after {time.monotonic() - began:.0f}s"
        )
        model, api_base = server.model, server.base_url
        key_env = SERVED_KEY if args.serve == "transformers" else None
        os.environ.setdefault(SERVED_KEY, "not-checked")
    else:
        model, api_base = args.model, args.api_base
        key_env = args.api_key_env
    try:
        for structured in args.structured:
            llm = {"model": model, "api_base": api_base, "max_tokens": args.max_tokens, "max_retries": 0,
                   "timeout_s": args.timeout, "temperature": 0.0, "structured": structured}  # fmt: skip
            if key_env is not None or args.serve:
                llm["api_key_env"] = key_env
            decided = resolve_structured(llm)
            llm["structured"] = decided
            name = args.label or ((args.serve or "") + ("-" if args.serve else "") + model.replace("/", "_"))
            label = f"{name}-structured_{structured}" + (f"-{decided}" if structured == "auto" else "")
            label += ("-compiled" if args.program else "") + (
                f"-{args.split}" if args.split != "heldout" else ""
            )
            run(label, bundles, lambda b, count, llm=llm: llm_reviser(b, llm, count, args.program), {**meta, "reviser": "llm", "llm": llm, "program": args.program,
                "structured_asked": structured, "server": args.serve})  # fmt: skip
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
