"""`pats reviser bench` and `pats reviser record`: the reviser benchmark as a user command.

`bench` scores a reviser (the rules reviser, or a LiteLLM model with an optional compiled program) on
recorded bundles (default: the ones shipped with pats, pats.reviser.bundles.SHIPPED) and prints a
line per bundle and the totals (pats.reviser.bench, pats.reviser.bench_table); `--compare` scores a
second one on the same bundles and prints them side by side; `--out DIR` writes each one's result
file. `record` turns a finished run's reviews into bundles (pats.reviser.bundles.record).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from pats.errors import SpecError

if TYPE_CHECKING:
    from pats.reviser.prompt import ReviserSettings
    from pats.spec.models import LLMSpec

BENCH_EXAMPLES = """Each bundle is one review of a recorded run (its evidence cards, the judge's assessment, the
entries, the run's scaffold settings), given to the reviser as the review gives it: an LLM answers,
and when the review's check refuses the set, answers once more with the problems. Printed per bundle
and in total: valid at the first answer and after the retry, the rules that refused the others, the
kinds of edit (A/U/D) against the rules reviser's, prompt/completion tokens, seconds and USD (LiteLLM's
offline cost map; unknown for a self-hosted model).

examples:
  pats reviser bench --rules
  pats reviser bench --model openai/gpt-4o-mini                        # OPENAI_API_KEY set
  pats reviser bench --model hosted_vllm/M --api-base http://HOST:8000/v1 --program programs/reviser-M.json
  pats reviser bench --model openai/gpt-4o-mini --compare anthropic/claude-3-5-haiku-latest
  pats reviser bench --model hosted_vllm/M --api-base URL --program P.json --compare uncompiled
  pats reviser bench --model hosted_vllm/M --api-base URL --compare rules --out bench-results/"""

RECORD_EXAMPLES = """examples:
  pats reviser record runs/quickstart                       # -> reviser-bundles/
  pats reviser record runs/a runs/b --bundles my-bundles --split train
  pats reviser bench --model MODEL --bundles my-bundles --split all"""


def add_reviser_parser(sub) -> None:
    p = sub.add_parser(
        "reviser",
        help="benchmark a reviser on recorded reviews (bench), or record a run's reviews (record)",
        description="The reviser benchmark: `pats reviser bench` scores a reviser on recorded reviews "
        "(shipped with pats, or your own from `pats reviser record RUN_DIR`).",
    )
    commands = p.add_subparsers(dest="reviser_command", metavar="COMMAND", required=True)
    bench = commands.add_parser(
        "bench",
        help="score a reviser (rules, or an LLM and its program) on recorded bundles",
        description="Score a reviser on recorded reviser bundles: the rules reviser, or an LLM named by its "
        "LiteLLM model string (hosted, or self-hosted with --api-base), optionally with a compiled program.",
        epilog=BENCH_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    who = bench.add_mutually_exclusive_group(required=True)
    who.add_argument("--rules", action="store_true", help="the offline rules reviser")
    who.add_argument("--model", help="LiteLLM model string of the reviser (openai/..., hosted_vllm/...)")
    bench.add_argument("--program", help="a compiled program (pats compile-reviser) for --model")
    bench.add_argument("--api-base", help="endpoint of a self-hosted model, e.g. http://HOST:8000/v1")
    bench.add_argument("--api-key-env", help="NAME of the variable holding the key (default: the provider's)")
    bench.add_argument(
        "--compare",
        metavar="rules|uncompiled|PROGRAM.json|MODEL",
        help="a second reviser on the same bundles, side by side: the rules reviser, --model without its "
        "--program, another compiled program for --model, or another model string (uncompiled; its "
        "endpoint is --compare-api-base)",
    )
    bench.add_argument("--compare-api-base", help="endpoint of the --compare model (default: none)")
    bench.add_argument("--structured", choices=["auto", "on", "off"], default="auto",
                       help="llm.structured: answers in a JSON schema; auto probes the endpoint once")  # fmt: skip
    bench.add_argument(
        "--max-tokens", type=int, default=800, help="llm.max_tokens (the largest edit set fits 800)"
    )
    bench.add_argument("--timeout", type=float, default=600.0, help="llm.timeout_s per call")
    bench.add_argument("--max-retries", type=int, default=0,
                       help="llm.max_retries for transient faults (default 0: a fault leaves the bundle unparsed)")  # fmt: skip
    bench.add_argument("--bundles", type=Path, help="folder of bundles (default: the ones shipped with pats)")
    bench.add_argument("--split", choices=["heldout", "train", "all"], default="heldout",
                       help="the bundles scored (default heldout: the ones no program was compiled on)")  # fmt: skip
    bench.add_argument(
        "--only", nargs="+", default=[], metavar="NAME", help="bundles whose name contains NAME"
    )
    bench.add_argument(
        "--out", type=Path, metavar="DIR", help="write each reviser's result as DIR/<label>.json"
    )
    bench.set_defaults(func=cmd_bench)

    record = commands.add_parser(
        "record",
        help="write the reviews of finished runs as bundles",
        description="Write one bundle per (step, task type) reviewed in each finished run directory (its "
        "cards, assessment, entries and scaffold settings, read from its event log and scaffold versions), "
        "named after the run; a bundle of the same name with other content is never overwritten.",
        epilog=RECORD_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    record.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="`pats run` directories")
    record.add_argument("--bundles", type=Path, default=Path("reviser-bundles"),
                        help="folder to write them in (default reviser-bundles/)")  # fmt: skip
    record.add_argument("--split", choices=["heldout", "train"], default="heldout",
                        help="train: what `pats compile-reviser` compiles on; heldout (default): scored only")  # fmt: skip
    record.set_defaults(func=cmd_record)


def cmd_record(args: argparse.Namespace) -> int:
    from pats.reviser.bundles import record, save

    for d in map(Path, args.run_dirs):
        if not (d / "events.jsonl").is_file() or not (d / "spec.yaml").is_file():
            raise SpecError(f"{d}: not a `pats run` directory (no spec.yaml and events.jsonl)")
        bundles = record(d, f"pats run: {d.name}", args.split)
        try:
            paths = save(bundles, args.bundles)
        except FileExistsError as err:
            raise SpecError(str(err)) from None
        print(f"{d}: {len(paths)} bundles ({args.split}) in {args.bundles}/")
    return 0


def _llm(model: str, api_base: str | None, args: argparse.Namespace):
    """The LLMSpec of a model the flags name; flag values the spec refuses are a SpecError."""
    from pydantic import ValidationError

    from pats.spec.models import LLMSpec

    fields = {
        "model": model,
        "api_base": api_base,
        "max_tokens": args.max_tokens,
        "timeout_s": args.timeout,
        "max_retries": args.max_retries,
        "temperature": 0.0,
        "structured": args.structured,
    }
    if args.api_key_env:
        fields["api_key_env"] = args.api_key_env
    try:
        return LLMSpec(**fields)
    except ValidationError as err:
        flag = {"max_tokens": "--max-tokens", "timeout_s": "--timeout", "max_retries": "--max-retries"}
        issues = [f"{flag.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in err.errors()]
        raise SpecError("; ".join(issues)) from None


def _label(model: str, program: str | None) -> str:
    """A result's name: the program's file name, else the model string's (programs are per model)."""
    return Path(program).stem if program else model.replace("/", "_")


def contenders(args: argparse.Namespace) -> list:
    """The reviser the flags name and, with --compare, the second one."""
    from pats.reviser.bench import Contender

    if args.program and not args.model:
        raise SpecError("--program is a compiled program for --model: name the model it was compiled for")
    first = (
        Contender(label="rules")
        if args.rules
        else Contender(
            label=_label(args.model, args.program),
            llm=_llm(args.model, args.api_base, args),
            program=args.program,
        )
    )
    if not args.compare:
        return [first]
    if args.compare == "rules":
        second = Contender(label="rules")
    elif args.compare == "uncompiled":
        if first.llm is None or not first.program:
            raise SpecError(
                "--compare uncompiled: --model without its --program; give both --model and --program"
            )
        second = Contender(label=_label(first.llm.model, None), llm=first.llm)
    elif args.compare.endswith(".json"):
        if first.llm is None:
            raise SpecError(
                f"--compare {args.compare}: a program is compiled for a model; name it with --model"
            )
        second = Contender(label=_label(first.llm.model, args.compare), llm=first.llm, program=args.compare)
    else:
        second = Contender(
            label=_label(args.compare, None), llm=_llm(args.compare, args.compare_api_base, args)
        )
    if second.label == first.label:
        raise SpecError(f"--compare {args.compare}: that is the reviser already named; compare another one")
    return [first, second]


# The flags of `pats reviser bench` that set each LLMSpec field `pats.llm_check` names in its advice.
FLAGS = {
    "api_key_env": "--api-key-env",
    "api_base": "--api-base",
    "model": "--model",
    "timeout_s": "--timeout",
    "max_retries": "--max-retries",
}


def preflight(llm: LLMSpec, settings: ReviserSettings, flags: dict[str, str] = FLAGS) -> LLMSpec:
    """What `pats run` checks before training, done before the first bundle: one short request to the
    LLM (a refused key, an unknown model or an unreachable server stops here, naming the flag to
    change: `flags`, field -> flag), then, for `structured: auto`, the probe with the reviser's own
    schema under `settings`. Returns `llm` with structured output decided (on or off), so that no
    bundle's row counts the probe."""
    import asyncio

    from pats.errors import PrerequisiteError
    from pats.llm_check import _check
    from pats.lm.probe import structured_decision
    from pats.reviser.llm import reviser_probe

    problem = asyncio.run(_check("reviser.llm", llm, reviser_probe(settings)))
    if problem:
        for field, flag in flags.items():
            problem = problem.replace(f"reviser.llm.{field}", flag)
        raise PrerequisiteError(problem.replace("reviser.llm", "the reviser", 1))
    if llm.structured != "auto":
        return llm
    return llm.model_copy(update={"structured": "on" if structured_decision(llm) else "off"})


def checked(contender, bundles, compared: bool = False):
    """The contender before anything runs: its program fits every bundle's settings (else a SpecError
    saying which setting differs), its LLM answers and structured output is decided. `compared`: it is
    --compare's, whose model and endpoint other flags set."""
    from pats.reviser.llm import load_reviser_prompt
    from pats.reviser.program import load_program
    from pats.reviser.prompt import ReviserSettings
    from pats.spec.models import LLMReviserSpec

    if contender.llm is None:
        return contender
    settings = list(dict.fromkeys(ReviserSettings.of(b.scaffold) for b in bundles))
    if contender.program:
        if not Path(contender.program).is_file():
            raise SpecError(
                f"{contender.program}: no such program file (compile one with `pats compile-reviser`)"
            )
        spec = LLMReviserSpec(llm=contender.llm, program=contender.program)
        for s in settings:
            load_program(spec, load_reviser_prompt(), s)
    flags = {**FLAGS, "model": "--compare", "api_base": "--compare-api-base"} if compared else FLAGS
    return contender.model_copy(update={"llm": preflight(contender.llm, settings[0], flags)})


def cmd_bench(args: argparse.Namespace) -> int:
    from pats.reviser import bench
    from pats.reviser.bench_table import side_by_side, table
    from pats.reviser.bundles import SHIPPED, load

    folder = args.bundles or SHIPPED
    if not folder.is_dir():
        raise SpecError(
            f"--bundles {folder}: not a folder of reviser bundles (record some: pats reviser record RUN_DIR)"
        )
    split = None if args.split == "all" else args.split
    bundles = load(folder, args.only, split)
    if not bundles:
        raise SpecError(
            f"no {args.split} bundles in {folder} whose name contains {' or '.join(args.only) or 'anything'}"
        )
    revisers = [checked(c, bundles, compared=n == 1) for n, c in enumerate(contenders(args))]
    print(f"{len(bundles)} {args.split} bundles from {folder}")
    results = []
    for c in revisers:
        head = bench.meta(c, bench.in_checkout(folder, Path.cwd()), args.structured if c.llm else None)

        def write(rows, c=c, head=head) -> None:
            line = table(c.label, rows[-1:], c.model).splitlines()[2]
            print(f"[{c.label} {len(rows)}/{len(bundles)}] {line}", flush=True)
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                out = bench.result(head, c.label, rows, len(bundles), c.model)
                (args.out / f"{c.label}.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")

        results.append((c.label, bench.run(c, bundles, write), c.model))
    print()
    print(side_by_side(results[0], results[1]) if len(results) == 2 else table(*results[0]))
    if args.out:
        print(f"wrote {', '.join(str(args.out / f'{label}.json') for label, _, _ in results)}")
    return 0
