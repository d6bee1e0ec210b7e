"""`pats export verl SPEC OUT/`: the bundle of launch.py, self-contained and written whole or not at all.

The small files the spec reads (the initial bank, the judge rubric) are copied to `files/` and the
bundle's spec.yaml names them relative to itself (the loader reads relative paths beside the spec
file), so the bundle can move; large data (games, QA sets, corpora) stays at absolute paths, and the
variables that locate it (`WORKER_ENV`) reach the Ray workers through the runtime env. verl's
`validate_config` checks the composed config before anything is written; the files go to a hidden
sibling folder renamed to OUT at the end, so a failed export leaves no OUT. `--no-data` leaves the
task rows out (they list the environment's tasks, which needs its data); launch.sh writes them on
the cluster (`python3 -m pats.backends.verl.data OUT/`). The exporting machine is usually not a GPU
node: of the preflight (pats.backends.verl.preflight) it refuses only a verl other than the one the
config is checked for, and the README lists what the nodes need; launch.sh checks them there.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pats.backends.verl.config import WORKER_ENV, check_overrides, require_verl
from pats.backends.verl.launch import (
    ALFWORLD_BUILD,
    ENV_EXTRAS,
    bundle_overrides,
    export_defaults,
    model_path,
    node_install,
    write_files,
)
from pats.backends.verl.preflight import Needs, needs, verl_version_problem
from pats.errors import PatsError, PrerequisiteError, SpecError, SpecIssue
from pats.fileio import write_atomic
from pats.spec import ExperimentSpec, spec_to_yaml
from pats.spec.environments import AlfworldEnvSpec

FILES = "files"  # the bundle's copies of the small files the spec reads


@dataclass(frozen=True)
class Exported:
    """What an export wrote, for the command's report and the bundle's README."""

    out: Path
    launch: Path
    copied: tuple[tuple[str, str, str], ...]  # (spec key, source file, path in the bundle)
    absolute: tuple[tuple[str, str, bool], ...]  # (spec key, path, exists here): read on every node
    data_refs: tuple[tuple[str, str], ...]  # (spec key, `${data:...}`): read under each node's data root
    env: tuple[tuple[str, str], ...]  # launch.sh's defaults for WORKER_ENV variables
    task_rows: bool  # False: exported with --no-data
    needs: Needs  # what the launching node needs for the composed config (launch.sh checks it)
    unchecked: tuple[str, ...]  # verl checks that could not run here, and why (config.check)


def export_verl(spec: ExperimentSpec, out: Path, data: bool = True) -> Exported:
    """`pats export verl SPEC OUT/`: a self-contained bundle, written whole or not at all."""
    _refuse_existing(out)
    require_verl()
    problem = verl_version_problem(spec.verl_trainer().rollout_engine)
    if problem is not None:
        raise PrerequisiteError(f"{problem} (the export checks the config with this machine's verl)")
    copies, absolute = _spec_files(spec)
    missing = [
        SpecIssue(key, f"{source} does not exist; the export copies it into the bundle")
        for key, source, _ in copies
        if not Path(source).is_file()
    ]
    if missing:
        raise SpecError(missing)
    _read_copies(spec, copies)  # a malformed bank or rubric fails here, not on the cluster
    model = model_path(spec)
    here = os.path.abspath(out)
    overrides = bundle_overrides(spec, here, f"{here}/run", model)
    config, unchecked = check_overrides(overrides)  # before anything is written
    if Path(model).is_absolute():
        absolute += (("policy.model", model, Path(model).exists()),)
    bundled = _with_copies(spec, copies)
    spec_text, refs, moved = data_refs(bundled)
    absolute = tuple(item for item in absolute if item[1] not in moved)
    env = tuple(export_defaults().items())
    result = Exported(out, out / "launch.sh", copies, absolute, refs, env, data, needs(config), unchecked)
    with _staged(out) as stage:
        for _, source, target in copies:
            (stage / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, stage / target)
        try:
            write_files(bundled, stage, model, data, dict(result.env), spec_text)
        except PrerequisiteError as err:
            raise PrerequisiteError(
                f"{err}\nthe task rows list the environment's tasks, which needs its data here; or export "
                "without them (--no-data) and launch.sh writes them on the cluster"
            ) from None
        write_atomic(stage / "README.md", readme(spec, result))
    return result


def _refuse_existing(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is a folder that is not empty" if out.is_dir() else "exists and is not a folder"
        raise PatsError(
            f"{out} {what}; `pats export verl` writes a new bundle and never overwrites: remove {out} or "
            "choose another folder"
        )


def _spec_files(spec: ExperimentSpec) -> tuple[tuple, tuple]:
    """(copies, absolute): the initial bank and the judge rubric (pats' own for an llm judge without
    one) are copied to files/<key>/<name>; every other file the spec reads stays where it is."""
    from pats.lm.prompts import own_prompt
    from pats.spec.loader import FILE_KEYS

    copied = {"scaffold.initial_bank", "judge.rubric"}
    data = spec.model_dump(mode="json")
    if spec.judge.kind == "llm" and spec.judge.rubric is None:
        data["judge"]["rubric"] = str(own_prompt(f"{spec.environment.kind}.yaml"))
    copies, absolute = [], []
    for key in FILE_KEYS:
        value: Any = data
        for part in key:
            value = value.get(part) if isinstance(value, dict) else None
        name = ".".join(key)
        for path in [value] if isinstance(value, str) else value or []:
            if name in copied:
                copies.append((name, path, f"{FILES}/{key[-1]}/{Path(path).name}"))
            else:
                absolute.append((name, path, Path(path).exists()))
    return tuple(copies), tuple(absolute)


def _read_copies(spec: ExperimentSpec, copies) -> None:
    from pats.judges import load_rubric
    from pats.scaffold.bank import load_bank

    for key, source, _ in copies:
        if key == "scaffold.initial_bank":
            load_bank(source)
        else:
            load_rubric(source, spec.environment.kind)


def data_refs(spec: ExperimentSpec) -> tuple[str, tuple[tuple[str, str], ...], frozenset[str]]:
    """(spec.yaml's text, the references it keeps, the paths they replace): every file the spec reads under this machine's data
    root ($PATS_DATA) written back as `${data:PATH}`, so that each node's data root decides where it is
    read, as in the shipped specs; other paths stay as they are."""
    import yaml

    from pats.places import data_root
    from pats.spec.loader import FILE_KEYS

    root = data_root().resolve()
    data = json.loads(spec.model_dump_json())
    refs: list[tuple[str, str]] = []
    moved: set[str] = set()

    def ref(path: str, where: str) -> str:
        try:
            relative = Path(path).resolve().relative_to(root)
        except ValueError:
            return path
        refs.append((where, f"${{data:{relative.as_posix()}}}"))
        moved.add(path)
        return refs[-1][1]

    for key in FILE_KEYS:
        parent: Any = data
        for part in key[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or not parent.get(key[-1]):
            continue
        value, name = parent[key[-1]], ".".join(key)
        if isinstance(value, str) and Path(value).is_absolute():
            parent[key[-1]] = ref(value, name)
        elif isinstance(value, list):
            parent[key[-1]] = [
                ref(v, f"{name}.{i}") if Path(v).is_absolute() else v for i, v in enumerate(value)
            ]
    if not refs:
        return spec_to_yaml(spec), (), frozenset()
    return yaml.safe_dump(data, sort_keys=False, width=100), tuple(refs), frozenset(moved)


def _with_copies(spec: ExperimentSpec, copies) -> ExperimentSpec:
    """`spec` naming the bundle's copies, relative to spec.yaml."""
    data = spec.model_dump(mode="json")
    for key, _, target in copies:
        section, name = key.split(".")
        data[section][name] = target
    return ExperimentSpec.model_validate(data)


@contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A hidden sibling folder renamed to `out` when the block succeeds; removed, with any parent
    folders made for it, when it fails."""
    made = [p for p in out.absolute().parents if not p.exists()]  # deepest first
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    try:
        yield stage
        stage.chmod(0o755)  # mkdtemp's 0700 would hide the bundle from other users of the cluster
        os.replace(stage, out)  # atomic; replaces nothing but an empty folder
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for folder in made:
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def readme(spec: ExperimentSpec, done: Exported) -> str:
    """The bundle's README.md: what is in it and what the cluster must provide."""
    tr = spec.verl_trainer()
    lines = [
        f"# {spec.name}: a pats run for verl",
        "",
        f"Written by `pats export verl`. On the Ray head node (or one GPU node): `bash launch.sh`. "
        f"Shape: {tr.nnodes} node(s) x {tr.gpus_per_node} GPU(s); {tr.steps} steps. See pats' docs/verl.md.",
        "",
        "- `spec.yaml`: the resolved pats spec; relative paths in it are read beside it.",
        "- `agent_loops.yaml`: verl's agent-loop registry (pats_agent, pats_validation).",
        "- `launch.sh`: checks this node (`python3 -m pats.backends.verl.preflight`), then runs "
        "`python3 -m pats.backends.verl.main` (verl's main_ppo after pats' Ray start and the check of every "
        "node) with every Hydra override; more overrides go after it (`bash launch.sh trainer.save_freq=5`).",
    ]
    for key, source, target in done.copied:
        lines.append(f"- `{target}`: copy of {source} (`{key}`)")
    if done.task_rows:
        lines.append("- `train.parquet`, `val.parquet`: one row per task.")
    else:
        lines += [
            "",
            "**Task rows not written** (exported with `--no-data`): `launch.sh` writes `train.parquet` and "
            "`val.parquet` before training, or run `python3 -m pats.backends.verl.data <this folder>` on a "
            "node with the environment's data.",
        ]
    lines += ["", "## What the cluster must provide", ""]
    lines.append(
        f"- On every node, pats from a clone (the `pats` on PyPI is another project): `{node_install(spec)}`."
    )
    if "alfworld" in ENV_EXTRAS.get(spec.environment.kind, ()):
        lines.append(f"- On every node, {ALFWORLD_BUILD}.")
    lines += [f"- On every node, {need}." for need in done.needs.lines()]
    lines += [f"- {note[0].upper()}{note[1:]}." for note in done.needs.notes()]
    lines.append(
        "- launch.sh checks the GPU-side needs on the node that runs it, then every node of the Ray cluster "
        "before verl places anything (`PATS_SKIP_PREFLIGHT=head` skips the first alone, e.g. on a head node "
        "without GPUs; `all` skips both)."
    )
    lines += [f"- Not checked where the bundle was written: {what}." for what in done.unchecked]
    for key, reference in done.data_refs:
        lines.append(
            f"- `{key}`: `{reference}`, under the data root of every node (`$PATS_DATA`, which the "
            "workers get through Ray's runtime env; default ~/.cache/pats/data)"
        )
    for key, path, here in done.absolute:
        lines.append(
            f"- `{key}`: {path} on every node{'' if here else ' (not found where the bundle was written)'}"
        )
    if isinstance(spec.environment, AlfworldEnvSpec) and spec.environment.data_dir is None:
        lines.append("- ALFWorld's games at `$ALFWORLD_DATA` (data_dir is unset).")
    env = ", ".join(f"{name}={value}" for name, value in done.env) or "none were set"
    lines += [
        f"- Variables the workers get through Ray's runtime env when set: {', '.join(WORKER_ENV)}; "
        f"launch.sh's defaults (from the exporting machine; the launching shell's values win): {env}.",
    ]
    from pats.backends.verl.cluster import RUN_ENV
    from pats.llm_check import called_llms

    keys = sorted({llm.api_key_env for _, llm in called_llms(spec) if llm.api_key_env})
    lines.append(
        f"- Set in the shell that runs launch.sh when the run needs them: {', '.join([*RUN_ENV, *keys])}. "
        "launch.sh hands them to the Ray job's runtime env (pats.backends.verl.cluster), never to a file "
        "or the config."
    )
    return "\n".join(lines) + "\n"


# -- `pats run` with a verl spec ------------------------------------------------------------------
