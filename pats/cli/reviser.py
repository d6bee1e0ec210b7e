"""`pats reviser bench` and `pats reviser record`: the reviser benchmark as a user command.

`bench` scores a reviser (the rules reviser, or a LiteLLM model with an optional compiled program) on
recorded bundles (default: the ones shipped with pats, pats.reviser.bundles.SHIPPED) and prints a
line per bundle as it is scored and the totals (pats.reviser.bench, pats.reviser.bench_table);
`--compare` scores a second one on each bundle too and prints them side by side; `--out DIR` writes
each one's result file. An LLM is checked first (`preflight`: one short request, waiting
--check-timeout, not a bundle's --timeout); it exits 1 when no bundle was scored because every answer
was a fault. Flags that cannot run are a UsageError (exit 2: no spec is involved). `record` turns a
finished run's reviews into bundles (pats.reviser.bundles.record).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pats.errors import UsageError

if TYPE_CHECKING:
    from pats.reviser.prompt import ReviserSettings
    from pats.spec.models import LLMSpec

BENCH_EXAMPLES = """Each bundle is one review of a recorded run (its evidence cards, the judge's assessment, the
entries, the run's scaffold settings), given to the reviser as the review gives it: an LLM answers,
and when the review's check refuses the set, answers once more with the problems. Printed per bundle
and in total: valid at the first answer and after the retry, the rules that refused the others, the
kinds of edit (A/U/D) against the rules reviser's, prompt/completion tokens, seconds, USD (LiteLLM's
offline cost map; unknown for a self-hosted model), the fault of a call that gave no usable answer (a
timeout, an HTTP error, a malformed answer; its whole text is in the --out file) and the refusing rules.
Before the first bundle, one short request checks the LLM (--check-timeout). Exit codes: 0 when the
bundles were scored; 1 when no bundle was scored because every answer was a fault; 2 for flags that
cannot run; 3 when the check before the first bundle fails (key, model, server).

examples:
  pats reviser bench --rules
  pats reviser bench --model openai/gpt-4o-mini                        # OPENAI_API_KEY set
  pats reviser bench --model hosted_vllm/M --api-base http://HOST:8000/v1 --program programs/reviser-M.json
  pats reviser bench --model openai/gpt-4o-mini --compare anthropic/claude-3-5-haiku-latest
  pats reviser bench --model hosted_vllm/M --api-base URL --program P.json --compare uncompiled
  pats reviser bench --model hosted_vllm/M --api-base URL --compare rules --out bench-results/
  pats serve      # the embedded model behind vLLM: --model hosted_vllm/smollm2-135m-instruct --api-base http://127.0.0.1:8000/v1"""

RECORD_EXAMPLES = """examples:
  pats reviser record runs/quickstart                       # -> reviser-bundles/
  pats reviser record runs/a runs/b --bundles my-bundles --split train
  pats reviser bench --model MODEL --bundles my-bundles --split all"""


def add_reviser_parser(sub) -> None:
    from pats.spec.models import LLMSpec

    # The check before the first bundle waits as long as `pats run`'s does (the spec's default), not as
    # long as a bundle's call may: a server that accepts and never answers is told within a minute.
    CHECK_TIMEOUT_S = LLMSpec.model_fields["timeout_s"].default
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
    bench.add_argument("--timeout", type=float, default=600.0,
                       help="llm.timeout_s: seconds each bundle's call may wait for its answer (default 600)")  # fmt: skip
    bench.add_argument("--check-timeout", type=float, default=CHECK_TIMEOUT_S,
                       help="seconds the short request before the first bundle waits for its answer "
                       f"(default {CHECK_TIMEOUT_S:g}, pats run's llm.timeout_s)")  # fmt: skip
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
            raise UsageError(f"{d}: not a `pats run` directory (no spec.yaml and events.jsonl)")
        bundles = record(d, f"pats run: {d.name}", args.split)
        try:
            paths = save(bundles, args.bundles)
        except FileExistsError as err:
            raise UsageError(str(err)) from None
        print(f"{d}: {len(paths)} bundles ({args.split}) in {args.bundles}/")
    return 0


def _llm(model: str, api_base: str | None, args: argparse.Namespace, model_flag: str = "--model"):
    """The LLMSpec of a model the flags name; flag values the spec refuses, and a provider LiteLLM does
    not know (the check `pats validate` makes: pats.llm_check.unknown_provider), are a UsageError naming
    the flag (`model_flag` for the model)."""
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
        llm = LLMSpec(**fields)
    except ValidationError as err:
        flag = {**FLAGS, "model": model_flag, "max_tokens": "--max-tokens"}
        issues = [
            f"{flag.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" if e["loc"] else e["msg"]
            for e in err.errors()
        ]
        raise UsageError("; ".join(issues)) from None
    from pats.llm_check import unknown_provider

    problem = unknown_provider(model)
    if problem:
        raise UsageError(f"{model_flag} {model}: {problem}")
    return llm


def _label(model: str, program: str | None) -> str:
    """A result's name: the program's file name, else the model string's (programs are per model)."""
    return Path(program).stem if program else model.replace("/", "_")


def contenders(args: argparse.Namespace) -> list:
    """The reviser the flags name and, with --compare, the second one."""
    from pats.reviser.bench import Contender

    if args.program and not args.model:
        raise UsageError("--program is a compiled program for --model: name the model it was compiled for")
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
            raise UsageError(
                "--compare uncompiled: --model without its --program; give both --model and --program"
            )
        second = Contender(label=_label(first.llm.model, None), llm=first.llm)
    elif args.compare.endswith(".json"):
        if first.llm is None:
            raise UsageError(
                f"--compare {args.compare}: a program is compiled for a model; name it with --model"
            )
        second = Contender(label=_label(first.llm.model, args.compare), llm=first.llm, program=args.compare)
    else:
        second = Contender(
            label=_label(args.compare, None),
            llm=_llm(args.compare, args.compare_api_base, args, model_flag="--compare"),
        )
    if second.label == first.label:
        raise UsageError(f"--compare {args.compare}: that is the reviser already named; compare another one")
    return [first, second]


# The flags of `pats reviser bench` that set each LLMSpec field `pats.llm_check` names in its advice.
FLAGS = {
    "api_key_env": "--api-key-env",
    "api_base": "--api-base",
    "model": "--model",
    "timeout_s": "--timeout",
    "max_retries": "--max-retries",
}
COMPARE_FLAGS = {**FLAGS, "model": "--compare", "api_base": "--compare-api-base"}  # of the --compare model


def preflight(
    llm: LLMSpec,
    settings: ReviserSettings,
    flags: dict[str, str] = FLAGS,
    check_timeout_s: float | None = None,
) -> LLMSpec:
    """What `pats run` checks before training, done before the first bundle: the key's variable, one
    short request to the LLM waiting `check_timeout_s` (None: llm.timeout_s) for its answer (a refused
    key, an unknown model, an unreachable or silent server stops here, naming the flag to change:
    `flags`, field -> flag), then, for `structured: auto`, the probe with the reviser's own schema
    under `settings`. Says first what it waits for, and how long each bundle's call may. Returns `llm`
    with structured output decided (on or off), so that no bundle's row counts the probe."""
    import asyncio

    from pats.errors import PrerequisiteError
    from pats.llm_check import _check
    from pats.lm.caller import missing_key
    from pats.lm.probe import structured_decision
    from pats.reviser.llm import reviser_probe

    at = f" at {llm.api_base}" if llm.api_base else ""
    key = missing_key(llm, flags["api_key_env"], null=None)
    if key:
        raise PrerequisiteError(f"the reviser ({llm.model}{at}): {key}")
    wait = llm.timeout_s if check_timeout_s is None else check_timeout_s
    probe = (
        ", then one with the reviser's answer schema (structured: auto)" if llm.structured == "auto" else ""
    )
    print(
        f"checking {llm.model}{at}: one short request, waiting up to {wait:g} s for its answer "
        f"(--check-timeout){probe}; then each bundle's call may wait up to {llm.timeout_s:g} s (--timeout)",
        flush=True,
    )
    problem = asyncio.run(_check("reviser.llm", llm, reviser_probe(settings), ask_timeout_s=check_timeout_s))
    if problem:
        # _check's only failing request is the short one, which waited --check-timeout
        named = {**flags, "timeout_s": "--check-timeout"} if check_timeout_s is not None else flags
        for field, flag in named.items():
            problem = problem.replace(f"reviser.llm.{field}", flag)
        raise PrerequisiteError(problem.replace("reviser.llm", "the reviser", 1))
    if llm.structured != "auto":
        return llm
    return llm.model_copy(update={"structured": "on" if structured_decision(llm) else "off"})


def checked(contender, bundles, compared: bool = False, check_timeout_s: float | None = None):
    """The contender before anything runs: its program fits every bundle's settings (else a SpecError
    saying which setting differs), its LLM answers (`preflight`, waiting `check_timeout_s`) and
    structured output is decided. `compared`: it is --compare's, whose model and endpoint other flags
    set."""
    from pats.reviser.llm import load_reviser_prompt
    from pats.reviser.program import load_program
    from pats.reviser.prompt import ReviserSettings
    from pats.spec.models import LLMReviserSpec

    if contender.llm is None:
        return contender
    settings = list(dict.fromkeys(ReviserSettings.of(b.scaffold) for b in bundles))
    if contender.program:
        if not Path(contender.program).is_file():
            raise UsageError(
                f"{contender.program}: no such program file (compile one with `pats compile-reviser`)"
            )
        spec = LLMReviserSpec(llm=contender.llm, program=contender.program)
        for s in settings:
            load_program(spec, load_reviser_prompt(), s)
    flags = COMPARE_FLAGS if compared else FLAGS
    return contender.model_copy(update={"llm": preflight(contender.llm, settings[0], flags, check_timeout_s)})


def bundles_for(folder: Path, only: list[str], split: str) -> list:
    """The bundles of `folder` the flags name; none is a UsageError that says what the folder holds and
    which --split or --only would find some."""
    from collections import Counter

    from pats.reviser.bundles import load

    if not folder.is_dir():
        raise UsageError(
            f"--bundles {folder}: not a folder of reviser bundles (record some: pats reviser record RUN_DIR)"
        )
    try:
        named = load(folder, only)
    except FileNotFoundError as err:
        raise UsageError(f"--bundles {folder}: {err}") from None
    chosen = named if split == "all" else [b for b in named if b.split == split]
    if chosen:
        return chosen
    if not named:
        every = Counter(b.split for b in load(folder))
        holds = " and ".join(f"{k} {name}" for name, k in sorted(every.items()))
        raise UsageError(
            f"no bundle in {folder} has a name containing {' or '.join(only)} (it holds {holds} bundles): "
            "name a part of one of theirs with --only"
        )
    other = "train" if split == "heldout" else "heldout"  # every bundle named is of the other split
    which = f" whose name contains {' or '.join(only)}" if only else ""
    raise UsageError(
        f"{folder} holds {len(named)} {other} bundles{which} and no {split} ones (--split {split}"
        f"{' is the default' if split == 'heldout' else ''}): pass --split {other}, or --split all"
    )


def cmd_bench(args: argparse.Namespace) -> int:
    from pats.reviser import bench
    from pats.reviser.bench_table import head, line, pair, pair_head, totals
    from pats.reviser.bundles import SHIPPED

    folder = args.bundles or SHIPPED
    bundles = bundles_for(folder, args.only, args.split)
    named = contenders(args)
    print(f"{len(bundles)} {args.split} bundles from {folder}", flush=True)
    revisers = [
        checked(c, bundles, compared=n == 1, check_timeout_s=args.check_timeout) for n, c in enumerate(named)
    ]
    n = len(bundles)
    width = len(f"{n}/{n}")  # the k/N column: every line keeps its columns where the table's head has them
    heads = [
        bench.meta(c, bench.in_checkout(folder, Path.cwd()), args.structured if c.llm else None)
        for c in revisers
    ]
    if len(revisers) == 2:
        print(pair_head(revisers[0].label, revisers[1].label, width), flush=True)
    else:
        print(head(revisers[0].label, width), flush=True)

    def after_each(rows: list[list]) -> None:
        k = len(rows[0])
        last = [r[-1] for r in rows]
        text = (
            pair(*last, *(c.model for c in revisers)) if len(rows) == 2 else line(last[0], revisers[0].model)
        )
        print(f"{f'{k}/{n}':>{width}} {text}", flush=True)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            for c, meta, scored in zip(revisers, heads, rows, strict=True):
                out = bench.result(meta, c.label, scored, n, c.model)
                (args.out / f"{c.label}.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")

    results = bench.run_together(revisers, bundles, after_each)
    for letter, c, rows in zip("AB", revisers, results, strict=False):
        print(("" if len(revisers) == 1 else f"{letter} ") + totals(c.label, rows, c.model))
    for n, (c, rows) in enumerate(zip(revisers, results, strict=True)):
        faulted = [r for r in rows if r.fault]
        if faulted:  # whole, with the flags that set the fields it names (the result file keeps it as it was)
            said = faulted[0].error
            for field, flag in (COMPARE_FLAGS if n == 1 else FLAGS).items():
                said = said.replace(f"llm.{field}", flag)
            print(f"{c.label}: first fault, on {faulted[0].bundle}: {said}")
    if args.out:
        print(f"wrote {', '.join(str(args.out / f'{c.label}.json') for c in revisers)}")
    failed = [c.label for c, rows in zip(revisers, results, strict=True) if bench.only_faults(rows)]
    if failed:
        print(
            f"error: no bundle was scored by {' or '.join(failed)}: every answer was a fault (above); exit 1",
            file=sys.stderr,
        )
        return 1
    return 0
