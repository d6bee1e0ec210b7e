"""`pats expert-bank SPEC --out FILE`: the expert plans of a spec's training pool as a pats bank
(pats.scaffold.expert_bank), for `scaffold.initial_bank` (the static-expert baseline)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from pats.errors import PrerequisiteError, SpecError

EXAMPLES = """examples:
  pats expert-bank experiments/stage2/none.yaml --out experiments/banks/twc_pool_expert_plans.json
  # then, in a spec:  scaffold: {mode: static, initial_bank: ../banks/twc_pool_expert_plans.json}"""


def add_bank_parser(sub) -> None:
    p = sub.add_parser(
        "expert-bank",
        help="write the expert plans of a spec's training pool as a bank (for scaffold.initial_bank)",
        description="Replay the environment's expert plan of every game of the spec's training pool (the "
        "first environment.num_train_tasks of its train fold) and write the ones that win as task-scoped "
        "plans in pats' bank format, each the whole path as the rules reviser writes a plan from the "
        "expert card. Privileged guidance: for baselines such as static-expert, never for evaluation.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("items", nargs="+", metavar="SPEC|KEY=VALUE", help="one spec file and overrides")
    p.add_argument("--out", required=True, metavar="FILE", help="the bank file to write (JSON)")
    p.set_defaults(func=cmd_expert_bank)


def cmd_expert_bank(args: argparse.Namespace) -> int:
    from pats.cli.args import _split_args
    from pats.engine.run import make_env_factory
    from pats.scaffold.expert_bank import expert_bank
    from pats.spec import load_spec

    specs, overrides = _split_args(args.items)
    if len(specs) != 1:
        raise SpecError(f"`pats expert-bank` takes one spec file, got {len(specs)}: {specs}")
    spec = load_spec(specs[0], overrides)
    env = make_env_factory(spec)()

    async def build() -> tuple[dict, list[str]]:
        try:
            return await expert_bank(env, env.tasks("train"))
        finally:
            await env.close()

    bank, left_out = asyncio.run(build())
    if not bank["entries"]:
        raise PrerequisiteError(
            f"no game of {specs[0]}'s training pool has an expert plan that wins it "
            f"(environment {spec.environment.kind}); this environment cannot make an expert bank"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(bank, indent=1) + "\n")
    print(
        f"wrote {out}: {len(bank['entries'])} plans"
        + (f"; left out (no winning plan): {', '.join(left_out)}" if left_out else "")
    )
    return 0
