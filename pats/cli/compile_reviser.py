"""`pats compile-reviser SPEC --bundles DIR`: compile the LLM reviser's program (pats.reviser.compile)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pats.errors import SpecError

# pats.reviser.compile.OPTIMIZERS, written out: importing it costs `pats --help` ~0.3 s (a test ties them)
OPTIMIZERS = ("labeled", "bootstrap", "select", "match")

DESCRIPTION = """Compile the LLM reviser's DSPy program against the train split of recorded reviser
bundles and save it (demos, instructions, and what it was compiled under). A spec then loads it with
reviser.program: PATH; a program compiled for another model or other scaffold settings is refused.

  labeled    demos: the rules reviser's accepted answers on the shortest train bundles (no LLM needed)
  bootstrap  demos: the spec's reviser LLM's own first answers that the review's check accepted
  select     no demo, or one labeled demo: each candidate scored by the reviser LLM's first answers on
             the other train bundles (the review's check as the metric); the best is kept, and every
             candidate's score is saved with the program. Calls the LLM (candidates x train bundles)
  match      every labeled demo kept; each review is shown the one of its task type and review mode
             (else of its mode, else none), whose kinds of edit a small model copies (no LLM needed)

examples:
  pats compile-reviser experiments/ablations/llm_reviser_embedded.yaml      # the shipped train bundles
  pats compile-reviser SPEC reviser.llm.model=hosted_vllm/M --optimizer bootstrap --demos 3
  pats compile-reviser SPEC --bundles DIR --optimizer select --candidates 4   # your own (pats reviser record)
  pats reviser bench --model M --program programs/reviser-M.json --compare M  # compiled against uncompiled"""


def cmd_compile_reviser(args: argparse.Namespace) -> int:
    from pats.cli.args import _split_args
    from pats.models import token_counter
    from pats.reviser.bundles import SHIPPED, load
    from pats.reviser.compile import compile_program, default_out
    from pats.reviser.program import save_program
    from pats.spec import load_spec

    specs, overrides = _split_args(args.items)
    if len(specs) != 1:
        raise SpecError(
            f"`pats compile-reviser` takes one spec file and overrides, got {len(specs)}: {specs}"
        )
    spec = load_spec(specs[0], overrides)
    folder = args.bundles or SHIPPED
    if not folder.is_dir():
        raise SpecError(
            f"--bundles {folder}: not a folder of reviser bundles (*.json); record some with "
            "`pats reviser record RUN_DIR --split train`"
        )
    bundles = load(folder)
    program, meta = compile_program(
        spec,
        bundles,
        token_counter(spec.policy.model),
        optimizer=args.optimizer,
        k=args.demos,
        candidates=args.candidates,
    )
    out = save_program(program, meta, args.out or default_out(spec))
    for c in meta.selection:
        print(f"  candidate demo {c.demo or '(none)'}: {c.score:.3f} over {c.scored} train bundles")
    print(
        f"compiled the reviser for {meta.model} ({meta.optimizer}, {meta.demos} demos from "
        f"{len(meta.trainset)} train bundles); wrote {out}\nuse it with reviser.program={out}"
    )
    return 0


def add_compile_parser(sub) -> None:
    p = sub.add_parser(
        "compile-reviser",
        help="compile the LLM reviser's DSPy program against recorded bundles",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "items", nargs="+", metavar="SPEC|KEY=VALUE", help="one spec (reviser.kind: llm) and overrides"
    )
    p.add_argument(
        "--bundles",
        type=Path,
        help="folder of bundles; their train split is used (default: the shipped ones)",
    )
    p.add_argument("--out", type=Path, help="where to save (default programs/reviser-<model>.json)")
    p.add_argument("--optimizer", choices=list(OPTIMIZERS), default="labeled", help="default: labeled")
    p.add_argument(
        "--candidates",
        type=int,
        help="select: score no demo and the first N labeled demos by rank (default: every one)",
    )
    p.add_argument(
        "--demos", type=int, default=2, help="demos to keep (default 2: a small model's context is short)"
    )
    p.set_defaults(func=cmd_compile_reviser)
