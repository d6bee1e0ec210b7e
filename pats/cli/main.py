"""`pats` command line: validate, show, plan, run, warm-start, report, scaffold, eval, export, schema, data,
compile-reviser, reviser (bench, record), sweep and compare.

Errors from the pats error tree print without a traceback and exit with their code
(2 for a bad spec, 3 for a missing prerequisite); anything else is a bug and keeps its traceback.

Length (over 450 lines, on purpose): the argument parser of every command in one place, so that
`pats --help` and each command's help are written side by side; commands with more than a few lines
of their own live in modules beside it (compile_reviser.py, sweep.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from pats.cli.args import _split_args
from pats.errors import PatsError, SpecError, SpecNotice

EPILOG = """examples:
  pats validate experiments/*.yaml
  pats show experiments/quickstart.yaml trainer.steps=3 scaffold.mode=none
  pats schema --check
overrides are dotted keys, e.g. trainer.steps=20 reviser.kind=llm reviser.llm.model=openai/gpt-4o-mini"""


def _validate_one(path: str, overrides: list[str]) -> str:
    """Check one file: a judge rubric or reviser prompt under judges/, else an experiment spec."""
    if Path(path).parent.name == "judges":
        from pats.judges import load_rubric
        from pats.reviser import load_reviser_prompt

        if Path(path).stem == "reviser":
            load_reviser_prompt(path)
            return "reviser prompt"
        load_rubric(path, Path(path).stem)
        return "judge rubric"
    from pats.sweep.grid import is_sweep_file

    if is_sweep_file(path):  # every cell planned, with the command line read as `pats sweep` reads it
        from pats.cli.sweep import sweep_of
        from pats.sweep.grid import cells
        from pats.sweep.words import counted

        planned = cells(sweep_of([path], overrides))
        return f"sweep: {counted(len(planned), 'cell')}, {counted(len({c.condition for c in planned}), 'condition')}"
    from pats.llm_check import check_providers, unset_keys
    from pats.spec.loader import load_spec_sourced, missing_files

    spec, sources = load_spec_sourced(path, overrides)
    missing = missing_files(spec, sources)
    if missing:
        raise SpecError(missing, file=path)
    if spec.scaffold.initial_bank:  # a bank in neither format is caught now, not at the run's start
        from pats.scaffold.bank import load_bank

        load_bank(spec.scaffold.initial_bank)
    check_providers(spec, file=path)  # imports LiteLLM (seconds), so not in load_spec
    for note in unset_keys(spec):
        warnings.warn(f"{path}: {note}", SpecNotice, stacklevel=2)
    if spec.judge.kind == "llm":  # a missing or malformed rubric is caught now, not mid-run
        from pats.judges import load_rubric

        load_rubric(spec.judge.rubric, spec.environment.kind)
    if spec.reviser.kind == "llm" and spec.reviser.program:  # a program that does not fit, now
        from pats.reviser.compile import settings_of
        from pats.reviser.llm import load_reviser_prompt
        from pats.reviser.program import load_program

        load_program(spec.reviser, load_reviser_prompt(), settings_of(spec))
    return (
        f"{spec.name}: {spec.environment.kind}, scaffold {spec.scaffold.mode}, {spec.trainer.backend} backend"
    )


def cmd_validate(args: argparse.Namespace) -> int:
    specs, overrides = _split_args(args.items)
    if not specs:
        raise SpecError("no spec file given; run e.g. `pats validate experiments/quickstart.yaml`")
    failed = 0
    for spec_path in specs:
        try:
            what = _validate_one(spec_path, overrides)
        except PatsError as err:
            failed += 1
            print(f"error: {err}", file=sys.stderr)
            continue
        print(f"ok: {spec_path} ({what})")
    if failed:
        print(f"{failed} of {len(specs)} spec(s) failed validation", file=sys.stderr)
        return SpecError.exit_code
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from pats.spec import load_spec, spec_to_yaml

    specs, overrides = _split_args(args.items)
    if len(specs) != 1:
        raise SpecError(f"`pats show` takes exactly one spec file, got {len(specs)}: {specs}")
    sys.stdout.write(spec_to_yaml(load_spec(specs[0], overrides)))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from pats.spec.schema import schema_texts
    from pats.sweep.grid import SweepSpec

    texts = {Path(path): text for path, text in schema_texts(SweepSpec).items()}
    if args.out:
        texts = {Path(args.out) / path.name: text for path, text in texts.items()}
    if args.check:
        stale = [p for p, text in texts.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
        for target in stale:
            print(
                f"error: {target} is out of date with the spec models; run `pats schema` to rewrite it",
                file=sys.stderr,
            )
        if stale:
            return 1
        print(f"ok: {', '.join(map(str, texts))} match the spec models")
        return 0
    for target, text in texts.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from pats.engine.run import resume, run_spec
    from pats.spec import load_spec

    if args.resume:
        if args.items:
            raise SpecError("--resume continues a run with its saved spec; give only the run directory")
        run_dir = resume(Path(args.resume))
    else:
        specs, overrides = _split_args(args.items)
        if len(specs) != 1:
            raise SpecError(
                f"`pats run` takes one spec file (or --resume RUN_DIR), got {len(specs)}: {specs}"
            )
        spec = load_spec(specs[0], overrides)
        if spec.trainer.backend == "verl":
            _verl_plan(spec)
        run_dir = run_spec(spec)
    print(f"run finished: {run_dir}")
    from pats.engine.summary import heldout_summary

    for line in heldout_summary(load_spec(run_dir / "spec.yaml"), run_dir):
        print(line)
    print(f"report: pats report {run_dir}")
    return 0


def _verl_plan(spec) -> None:
    """Print a verl spec's memory plan (and a note where this machine has fewer GPUs than a node of it);
    refuse (SpecError) one that does not fit trainer.gpu_memory_gb."""
    from pats.backends.verl.plan import gpus_here, plan_verl, require_fits
    from pats.backends.verl.preflight import nvidia_gpus

    plan = plan_verl(spec)
    print(plan.render())
    note = gpus_here(spec, len(nvidia_gpus()))
    if note is not None:
        print(note)
    require_fits(plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from pats.spec import load_spec

    specs, overrides = _split_args(args.items)
    if len(specs) != 1:
        raise SpecError(f"`pats plan` takes one spec file and overrides, got {len(specs)}: {specs}")
    _verl_plan(load_spec(specs[0], overrides))
    return 0


def cmd_warm_start(args: argparse.Namespace) -> int:
    from pats.spec import load_spec
    from pats.warm_start import warm_start

    specs, overrides = _split_args(args.items)
    if len(specs) != 1:
        raise SpecError(f"`pats warm-start` takes one spec file, got {len(specs)}: {specs}")
    out, report = warm_start(load_spec(specs[0], overrides))
    print(json.dumps(report, indent=1))
    print(f"wrote {out}/; start runs from it with policy.init_adapter={out / 'adapter'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pats.report import write_report

    run_dir = Path(args.run_dir)
    for path in write_report(run_dir):
        print(f"wrote {path}")
    if (run_dir / "spec.yaml").is_file():  # a run pats started: the report joins its W&B run
        from pats.engine.run import load_run

        spec, state = load_run(run_dir)
        if spec.logging.wandb != "disabled" and state is not None and state.wandb_id:
            from pats.logging.sinks import log_report_artifact

            log = spec.logging
            config = spec.model_dump(mode="json")
            log_report_artifact(
                run_dir, log.project, log.entity, log.wandb, spec.name, state.wandb_id, config
            )
            print(f"logged report/ to W&B run {state.wandb_id} as the artifact {spec.name}-report")
    return 0


def cmd_scaffold(args: argparse.Namespace) -> int:
    from pats.scaffold.history import (
        format_diff,
        format_history,
        format_version,
        open_store,
        print_text,
        version_at,
    )

    store = open_store(Path(args.run_dir))  # store.version(n) says which numbers exist
    if args.diff:
        print_text(format_diff(*(store.version(n) for n in args.diff)))
    elif args.version is not None:
        print_text(format_version(store.version(args.version)))
    elif args.at is not None:
        print_text(f"at step {args.at}: " + format_version(version_at(Path(args.run_dir), store, args.at)))
    else:
        print_text(format_history(store.versions()))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from pats.engine.evaluate import eval_path, evaluate_run

    metrics = evaluate_run(
        Path(args.run_dir),
        split=args.split,
        num_tasks=args.tasks,
        with_scaffold=args.with_scaffold,
        first_task=args.first,
    )
    for key, value in sorted(metrics.items()):
        print(f"{key}: {value:.4f}")
    print(f"wrote {eval_path(Path(args.run_dir), args.split)}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from pats.backends.verl.export import export_verl
    from pats.spec import load_spec

    paths, overrides = _split_args(args.items)
    if len(paths) != 2:
        raise SpecError(
            f"`pats export verl` takes a spec file, an output folder and overrides, got {paths}; "
            "e.g. pats export verl experiments/alfworld/pats.yaml out/alfworld"
        )
    spec = load_spec(paths[0], overrides)
    if spec.trainer.backend != "verl":
        raise SpecError(
            "`pats export verl` needs trainer.backend: verl (add the override trainer.backend=verl)"
        )
    _verl_plan(spec)
    done = export_verl(spec, Path(paths[1]), data=not args.no_data)
    out = done.out
    print(f"checked: verl's validate_config accepts the composed config\nwrote {out}/ (see {out}/README.md)")
    for key, source, target in done.copied:
        print(f"  {target}: copy of {source} ({key})")
    if done.task_rows:
        print("  train.parquet, val.parquet: the task rows")
    else:
        print(
            "  no task rows (--no-data): launch.sh writes train.parquet and val.parquet before training, "
            f"or run `python3 -m pats.backends.verl.data {out}` on a node with the environment's data"
        )
    for key, path, here in done.absolute:
        print(f"  {key} is read from {path} on every node{'' if here else ' (not found on this machine)'}")
    for name, value in done.env:
        print(f"  Ray workers get {name}={value} unless the launching shell sets it")
    for need in done.needs.lines():
        print(f"  every node needs {need}")
    for note in done.needs.notes():
        print(f"  {note}")
    for what in done.unchecked:
        print(f"  not checked here: {what}")
    print(f"run it on a GPU node or a Ray head node: bash {done.launch}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pats",
        description="Train LLM agents with RL and a policy-centric training scaffold.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from pats import __version__

    parser.add_argument("--version", action="version", version=f"pats {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "validate",
        help="check spec files (and judge rubrics) without running anything",
        description="Validate experiment specs, and judge rubrics / the reviser prompt under judges/. "
        "Every problem is reported with its YAML path. Exit code 0 if all are valid, 2 otherwise.",
    )
    p.add_argument("items", nargs="+", metavar="SPEC|KEY=VALUE", help="spec files and overrides")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "show",
        help="print the fully resolved spec (bases, interpolation, overrides)",
        description="Print the resolved spec as YAML: every default filled in. "
        "The output is itself a valid spec.",
    )
    p.add_argument("items", nargs="+", metavar="SPEC|KEY=VALUE", help="one spec file and overrides")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "run",
        help="train: build everything from a spec and run it in runs/<name>",
        description="Train from a spec into <logging.root>/<name>/ (spec, event log, scaffold versions, "
        "checkpoints, W&B offline run). Overrides as in validate. --resume continues a run after a crash "
        "from its last checkpoint.",
    )
    p.add_argument("items", nargs="*", metavar="SPEC|KEY=VALUE", help="one spec file and overrides")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "plan",
        help="print a verl spec's per-GPU memory and disk plan; refuse one that does not fit",
        description="Estimate, per GPU, what a verl run holds in each stage of a step (the rollout "
        "engine's share, the old log-probs, the update, the optimizer step: FSDP-sharded parameters, "
        "gradients and Adam states, activations, the logits of one pass) and the checkpoints on disk, "
        "from the spec and the policy's config.json. Exit code 2 when a stage exceeds "
        "trainer.gpu_memory_gb, with the knob to turn. `pats run` and `pats export verl` print it too. "
        "An estimate (docs/verl.md, Memory plan), not a measurement.",
    )
    p.add_argument("items", nargs="+", metavar="SPEC|KEY=VALUE", help="one spec file and overrides")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser(
        "warm-start",
        help="behaviour-clone expert plans of another game into a LoRA adapter later runs start from",
        description="Run the spec's warm_start section: replay the expert plans of its environment's "
        "training tasks, train policy.lora on them (part of the examples with the task's plan as "
        "guidance), and write <logging.root>/<name>/warm_start/ (adapter/, examples.jsonl, report.json, "
        "sft.parquet for verl). Later specs start from it with policy.init_adapter.",
    )
    p.add_argument("items", nargs="+", metavar="SPEC|KEY=VALUE", help="one spec file and overrides")
    p.set_defaults(func=cmd_warm_start)

    p = sub.add_parser(
        "report",
        help="write plots and a markdown summary of a run",
        description="Read RUN_DIR/events.jsonl and write RUN_DIR/report/*.png and summary.md.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "scaffold",
        help="show how a run's guidance evolved, version by version",
        description="Read RUN_DIR/scaffold/versions/ and print, for each version, the entries it added (+), "
        "rewrote (~, with the old text) and removed (-), with the cards each cites; --version N prints every "
        "entry of version N, --at STEP the version the policy saw at that training step, --diff A B what "
        "changed from A to B. `pats report` puts the history in summary.md.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--version", type=int, metavar="N", help="print version N in full instead")
    which.add_argument("--at", type=int, metavar="STEP", help="print the version the rollouts of STEP saw")
    which.add_argument(
        "--diff", type=int, nargs=2, metavar=("A", "B"), help="what changed from version A to B"
    )
    p.set_defaults(func=cmd_scaffold)

    p = sub.add_parser(
        "eval",
        help="evaluate a run's latest policy checkpoint on held-out tasks",
        description="Load RUN_DIR's spec and latest checkpoint and evaluate the policy without the scaffold "
        "(deployment), optionally with it too. Writes RUN_DIR/report/eval_<split>.json.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--split", default="eval", help="task split: eval (the spec's held-out split) or train")
    p.add_argument(
        "--tasks",
        type=int,
        help="number of tasks, even past the spec's environment.num_eval_tasks (default: the spec's eval "
        "size); more than the split has is refused",
    )
    p.add_argument(
        "--first",
        type=int,
        metavar="I",
        help="index of the first task played (default: the spec's eval.first_task on the eval split, "
        "0 on train), e.g. --first 160 --tasks 32 plays tasks 160-191",
    )
    p.add_argument("--with-scaffold", action="store_true", help="also evaluate with the final scaffold")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "export",
        help="write a spec as a verl run for a GPU cluster (parquet tasks, agent loops, launch script)",
        description="pats export verl SPEC OUT/ [KEY=VALUE ...]: check the spec with verl's "
        "validate_config, then write a new folder OUT/ whole or not at all: train.parquet, val.parquet, "
        "agent_loops.yaml, spec.yaml, files/ (copies of the initial bank and rubric), README.md and "
        "launch.sh (the preflight of the node, then python3 -m pats.backends.verl.main: verl's main_ppo after "
        "pats' Ray start and the check of every node, with every Hydra override). OUT must not exist "
        "or be empty. See docs/verl.md for one node and Ray clusters.",
    )
    p.add_argument("target", choices=["verl"], help="what to export for (verl)")
    p.add_argument(
        "items", nargs="+", metavar="SPEC|OUT|KEY=VALUE", help="spec file, output folder, overrides"
    )
    p.add_argument(
        "--no-data",
        action="store_true",
        help="skip the task rows (train/val.parquet), for a machine without the environment's data; "
        "launch.sh writes them on the cluster",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "schema",
        help="write or check the JSON Schemas editors use for specs and sweep files",
        description="Write schemas/experiment.schema.json and schemas/sweep.schema.json from the spec "
        "models, or with --check fail if one is out of date. docs/specs.md says which files map to which.",
    )
    p.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on drift")
    p.add_argument("--out", metavar="DIR", help="the folder to write them to (default schemas/)")
    p.set_defaults(func=cmd_schema)

    from pats.cli.bank import add_bank_parser
    from pats.cli.compile_reviser import add_compile_parser
    from pats.cli.reviser import add_reviser_parser
    from pats.cli.serve import add_serve_parser
    from pats.cli.sweep import add_sweep_parser
    from pats.compare.command import add_compare_parser
    from pats.data.command import add_data_parser

    add_data_parser(sub)
    add_bank_parser(sub)
    add_compile_parser(sub)
    add_reviser_parser(sub)
    add_serve_parser(sub)
    add_sweep_parser(sub)
    add_compare_parser(sub)
    return parser


def _format_warning(message, category, filename, lineno, line=None) -> str:
    if issubclass(category, SpecNotice):  # meant for the user, not a code location
        return f"note: {message}\n"
    return _plain_format(message, category, filename, lineno, line)


_plain_format = warnings.formatwarning


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _format_warning
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    # argparse ends a command's SPEC|KEY=VALUE items at the first option and would refuse the items after
    # it (`pats export verl SPEC OUT --no-data key=val`): they are more of the same items.
    if rest and hasattr(args, "items") and not any(item.startswith("-") for item in rest):
        args.items += rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        code = args.func(args)
        sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's last flush
        return code
    except BrokenPipeError:
        return _reader_gone()
    except PatsError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code


def _reader_gone() -> int:
    """stdout's reader went away (`pats sweep status | head`): stop quietly, with the exit code of a
    process SIGPIPE stops (Python ignores the signal, so the write raised instead)."""
    import contextlib
    import os
    import signal

    with contextlib.suppress(OSError, ValueError):  # the interpreter's last flush then writes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
