"""`pats export verl SPEC OUT/`: a self-contained bundle, checked by verl's validate_config, written
whole or not at all. Real verl (Hydra compose + validate_config), real task rows (TextWorldExpress
lists its tasks without game data), and launch.sh run by bash with a stand-in `python3` that records
its arguments, which are then composed by verl's Hydra config as main_ppo would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pats.testing.verl import require_verl_or_skip, twx_verl_spec

require_verl_or_skip()
from pats.backends.verl import data as verl_data
from pats.backends.verl.config import compose
from pats.backends.verl.export import export_verl
from pats.backends.verl.launch import ALFWORLD_BUILD, write_bundle
from pats.backends.verl.preflight import FLASH_ATTN_ON
from pats.cli.main import main
from pats.errors import PatsError, PrerequisiteError, SpecError
from pats.scaffold.bank import load_bank
from pats.spec import load_spec

REPO = Path(__file__).resolve().parents[1]
ALFWORLD = REPO / "experiments" / "alfworld"
ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"


def twx_spec_file(tmp_path: Path, *extra: str, scaffold: str = "probe_fraction: 0.5") -> Path:
    return twx_verl_spec(tmp_path / "spec" / "spec.yaml", *extra, scaffold=scaffold, root=tmp_path / "runs")


def pats_bank(path: Path) -> Path:
    entries = [{"kind": "skill", "scope": "general", "text": "Look before you take."}]
    path.write_text(json.dumps({"entries": entries}))
    return path


def leftovers(folder: Path) -> list[str]:
    """Staging folders an export left behind."""
    return [p.name for p in folder.iterdir() if ".export-" in p.name]


def run_launch(script: Path, tmp_path: Path, env: dict[str, str], *args: str) -> list[list[str]]:
    """`bash launch.sh ARGS` with a `python3` that records each call's arguments instead of running."""
    bin_dir, calls = tmp_path / "stub-bin", tmp_path / "calls"
    bin_dir.mkdir(parents=True, exist_ok=True)
    calls.mkdir(exist_ok=True)
    stub = bin_dir / "python3"
    stub.write_text(f'#!/bin/sh\nn=$(ls "{calls}" | wc -l)\nprintf "%s\\0" "$@" > "{calls}/$n"\n')
    stub.chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if k not in ("ALFWORLD_DATA", "PATS_DATA", "PATS_CACHE")}
    result = subprocess.run(
        ["bash", str(script), *args],
        env={**clean, **env, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return [(calls / str(i)).read_text().split("\0")[:-1] for i in range(len(list(calls.iterdir())))]


def test_the_readme_of_a_no_data_bundle_reads_whole(tmp_path, monkeypatch):
    """What the bundle's README says, every line, for the small twx spec exported with --no-data and
    two of the workers' variables set where it was written (launch.sh's defaults)."""
    monkeypatch.setenv("ALFWORLD_DATA", "/data/alf")
    monkeypatch.setenv("PATS_DATA", "/data/pats")
    done = export_verl(load_spec(twx_spec_file(tmp_path)), tmp_path / "out", data=False)
    [(key, model, here)] = done.absolute  # the model, from this machine's cache
    assert (key, here) == ("policy.model", True)
    assert (done.out / "README.md").read_text() == "\n".join(
        [
            "# verl-twx: a pats run for verl",
            "",
            "Written by `pats export verl`. On the Ray head node (or one GPU node): `bash launch.sh`. Shape: 1 "
            "node(s) x 1 GPU(s); 3 steps. See pats' docs/verl.md.",
            "",
            "- `spec.yaml`: the resolved pats spec; relative paths in it are read beside it.",
            "- `agent_loops.yaml`: verl's agent-loop registry (pats_agent, pats_validation).",
            "- `launch.sh`: checks this node (`python3 -m pats.backends.verl.preflight`), then runs `python3 -m "
            "pats.backends.verl.main` (verl's main_ppo after pats' Ray start and the check of every node) with "
            "every Hydra override; more overrides go after it (`bash launch.sh trainer.save_freq=5`).",
            "",
            "**Task rows not written** (exported with `--no-data`): `launch.sh` writes `train.parquet` and "
            "`val.parquet` before training, or run `python3 -m pats.backends.verl.data <this folder>` on a node "
            "with the environment's data.",
            "",
            "## What the cluster must provide",
            "",
            "- On every node, pats from a clone (the `pats` on PyPI is another project): `pip install -e "
            "'/path/to/pats[verl]'`.",
            f"- On every node, {done.needs.lines()[0]}.",
            "- The attention is picked where the run launches: flash_attention_2 if flash_attn imports there, else "
            f"PyTorch's SDPA (nothing to install); {FLASH_ATTN_ON}.",
            "- launch.sh checks the GPU-side needs on the node that runs it, then every node of the Ray cluster "
            "before verl places anything (`PATS_SKIP_PREFLIGHT=head` skips the first alone, e.g. on a head node "
            "without GPUs; `all` skips both).",
            f"- `policy.model`: {model} on every node",
            "- Variables the workers get through Ray's runtime env when set: ALFWORLD_DATA, PATS_DATA, PATS_CACHE; "
            "launch.sh's defaults (from the exporting machine; the launching shell's values win): "
            "ALFWORLD_DATA=/data/alf, PATS_DATA=/data/pats.",
            "- Set in the shell that runs launch.sh when the run needs them: HF_HOME, HF_TOKEN, "
            "HUGGING_FACE_HUB_TOKEN, HF_ENDPOINT, WANDB_API_KEY, WANDB_BASE_URL. launch.sh hands them to the Ray "
            "job's runtime env (pats.backends.verl.cluster), never to a file or the config.",
            "",
        ]
    )


def test_a_moved_bundle_loads_its_spec_and_finds_the_copied_files(tmp_path):
    bank = pats_bank(tmp_path / "my_bank.json")
    spec_file = twx_spec_file(
        tmp_path,
        "judge: {kind: llm, llm: {model: openai/gpt-4o-mini}}",  # no rubric: pats' own is copied
        scaffold=f"probe_fraction: 0.5, initial_bank: {bank}",
    )
    done = export_verl(load_spec(spec_file), tmp_path / "out")
    assert {target for _, _, target in done.copied} == {
        "files/initial_bank/my_bank.json",
        "files/rubric/twx.yaml",
    }
    moved = tmp_path / "elsewhere" / "bundle"
    moved.parent.mkdir()
    shutil.move(tmp_path / "out", moved)
    bank.unlink()  # only the copy is left

    spec = load_spec(moved / "spec.yaml")
    assert spec.scaffold.initial_bank == str(moved / "files" / "initial_bank" / "my_bank.json")
    assert spec.judge.rubric == str(moved / "files" / "rubric" / "twx.yaml")
    assert [e.text for e in load_bank(spec.scaffold.initial_bank)] == ["Look before you take."]
    assert (moved / "files" / "rubric" / "twx.yaml").read_text() == (REPO / "judges" / "twx.yaml").read_text()
    assert "initial_bank: files/initial_bank/my_bank.json" in (moved / "spec.yaml").read_text()
    assert (moved / "train.parquet").is_file() and (moved / "val.parquet").is_file()
    readme = (moved / "README.md").read_text().splitlines()
    for line in (
        f"- `files/initial_bank/my_bank.json`: copy of {bank} (`scaffold.initial_bank`)",
        f"- `files/rubric/twx.yaml`: copy of {REPO / 'judges' / 'twx.yaml'} (`judge.rubric`)",
        "- `train.parquet`, `val.parquet`: one row per task.",
        "- Set in the shell that runs launch.sh when the run needs them: HF_HOME, HF_TOKEN, HUGGING_FACE_HUB_TOKEN, "
        "HF_ENDPOINT, WANDB_API_KEY, WANDB_BASE_URL, OPENAI_API_KEY. launch.sh hands them to the Ray job's "
        "runtime env (pats.backends.verl.cluster), never to a file or the config.",
    ):
        assert line in readme, line
    readme = "\n".join(readme)
    # The llm judge's key and the run's variables: named, from the launching shell, never in a file.
    assert "HF_TOKEN, HUGGING_FACE_HUB_TOKEN" in readme and "WANDB_API_KEY" in readme
    assert "OPENAI_API_KEY" in readme and "never to a file" in readme


def test_the_ray_runtime_env_carries_the_data_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", "/data/alf world~games")
    monkeypatch.setenv("PATS_DATA", "/data/pats")
    monkeypatch.delenv("PATS_CACHE", raising=False)
    # pats run: the in-process overrides carry this process' values.
    spec = load_spec(ALFWORLD / "pats.yaml", ["trainer.rollout_engine=sglang"])
    cfg = compose(write_bundle(spec, tmp_path / "run" / "verl", run_dir=str(tmp_path / "run"), data=False))
    env_vars = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert (env_vars.ALFWORLD_DATA, env_vars.PATS_DATA) == ("/data/alf world~games", "/data/pats")
    assert env_vars.WANDB_MODE == "offline"

    # The export: launch.sh defaults to the exporting machine's values; the launching shell's win.
    done = export_verl(spec, tmp_path / "bundle", data=False)
    assert dict(done.env) == {"ALFWORLD_DATA": "/data/alf world~games", "PATS_DATA": "/data/pats"}
    calls = run_launch(
        done.launch,
        tmp_path,
        {"PATS_CACHE": "/scratch/cache", "PATS_DATA": "/cluster/pats"},
        "trainer.save_freq=5",
    )
    rows, checked, train = calls
    assert rows == ["-m", "pats.backends.verl.data", str((tmp_path / "bundle").resolve())]  # --no-data
    assert train[:2] == ["-m", "pats.backends.verl.main"] and train[-1] == "trainer.save_freq=5"
    # The preflight checks this node with exactly the overrides main_ppo gets, the extra ones included.
    assert checked == ["-m", "pats.backends.verl.preflight", *train[2:]]
    env_vars = compose(train[2:]).ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.ALFWORLD_DATA == "/data/alf world~games"
    assert (env_vars.PATS_DATA, env_vars.PATS_CACHE) == ("/cluster/pats", "/scratch/cache")


def test_export_runs_validate_config_and_a_refused_config_leaves_nothing(tmp_path, capsys):
    # 2 tasks x 2 rollouts = 4 sequences cannot be split over 3 GPUs: verl's own check refuses it.
    spec_file = twx_spec_file(tmp_path)
    out = tmp_path / "new" / "bundle"
    with pytest.raises(SpecError, match="divisible") as err:
        export_verl(load_spec(spec_file, ["trainer.gpus_per_node=3"]), out)
    assert "validate_config" in str(err.value)
    assert not (tmp_path / "new").exists()  # not even the parent it would have made

    assert main(["export", "verl", str(spec_file), str(out), "trainer.gpus_per_node=3"]) == 2
    assert "divisible" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()

    assert main(["export", "verl", str(spec_file), str(out)]) == 0
    assert "validate_config accepts" in capsys.readouterr().out


def test_no_data_exports_where_the_games_are_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    spec = str(ALFWORLD / "pats.yaml")
    missing = f"environment.data_dir={tmp_path / 'no-games'}"
    out = tmp_path / "alfworld"
    assert main(["export", "verl", spec, str(out), missing]) == PrerequisiteError.exit_code
    assert "--no-data" in capsys.readouterr().err
    assert not out.exists() and leftovers(tmp_path) == []
    # `pats export --help` names what launch.sh runs
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "then python3 -m pats.backends.verl.main: verl's main_ppo after pats' Ray start" in shown

    # Overrides may come after --no-data too.
    assert main(["export", "verl", spec, str(out), "--no-data", missing, "trainer.steps=7"]) == 0
    said = capsys.readouterr().out
    assert load_spec(out / "spec.yaml").trainer.steps == 7
    assert f"python3 -m pats.backends.verl.data {out}" in said
    # What every node needs, and apart from it what is picked where the run launches.
    assert "every node needs the attention" not in said
    assert (
        "\n  the attention is picked where the run launches: flash_attention_2 if flash_attn imports there, "
        "else PyTorch's SDPA (nothing to install); to use FlashAttention-2, install flash-attn" in said
    )
    assert "environment.data_dir is read from" in said and "not found on this machine" in said
    assert not (out / "train.parquet").exists()
    assert "Task rows not written" in (out / "README.md").read_text()
    assert "python3 -m pats.backends.verl.data" in (out / "launch.sh").read_text()
    # The alfworld extra builds two packages from source on every node: the bundle says so.
    readme = (out / "README.md").read_text().splitlines()
    assert f"- On every node, {ALFWORLD_BUILD}." in readme
    assert "apt-get install build-essential cmake" in ALFWORLD_BUILD
    assert (
        f"- `environment.data_dir`: {tmp_path / 'no-games'} on every node (not found where the bundle was written)"
        in readme
    )
    assert not [line for line in readme if "ALFWorld's games" in line]  # data_dir is set
    # Without data_dir, each node reads the games from its own $ALFWORLD_DATA.
    assert main(["export", "verl", spec, str(tmp_path / "unset"), "--no-data"]) == 0
    readme = (tmp_path / "unset" / "README.md").read_text().splitlines()
    assert "- ALFWorld's games at `$ALFWORLD_DATA` (data_dir is unset)." in readme
    assert "a C/C++ toolchain on every node" in (out / "launch.sh").read_text()


def test_the_cluster_writes_the_task_rows_of_a_no_data_bundle(tmp_path, capsys):
    import pyarrow.parquet as pq

    out = tmp_path / "twx"
    export_verl(load_spec(twx_spec_file(tmp_path)), out, data=False)
    assert not (out / "train.parquet").exists()
    assert verl_data.main([str(out)]) == 0  # what launch.sh runs when the rows are missing
    train = pq.read_table(out / "train.parquet").to_pylist()
    assert [r["extra_info"]["task_id"] for r in train] == [f"twx:twc:train:{i}" for i in range(4)]
    assert len(pq.read_table(out / "val.parquet").to_pylist()) == 4  # 2 bare, 2 with the scaffold


def test_a_failed_export_leaves_nothing_and_never_touches_an_existing_folder(tmp_path, monkeypatch):
    spec = load_spec(twx_spec_file(tmp_path))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(PatsError, match="remove .* or choose another folder"):
        export_verl(spec, mine)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]

    def broken(spec, out):
        (out / "train.parquet").write_text("half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(verl_data, "write_task_data", broken)
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "fresh", empty):
        with pytest.raises(RuntimeError, match="disk full"):
            export_verl(spec, out)
        assert leftovers(tmp_path) == []
    assert not (tmp_path / "fresh").exists()
    assert empty.is_dir() and not any(empty.iterdir())  # the user's empty folder stays as it was

    monkeypatch.undo()
    done = export_verl(spec, empty)  # an empty folder is taken
    assert done.launch == empty / "launch.sh" and (empty / "train.parquet").is_file()


def test_launch_sh_leaves_the_skip_variable_to_the_preflight_it_always_runs(tmp_path):
    """PATS_SKIP_PREFLIGHT has one reader (pats.backends.verl.preflight.skipped): launch.sh runs the
    preflight module whatever its value, and the module skips or refuses (tests/test_verl_checks.py);
    pats.backends.verl.main, which checks every node unless it is `all`, runs next."""
    done = export_verl(load_spec(twx_spec_file(tmp_path)), tmp_path / "out")
    launch = done.launch.read_text()
    assert "$PATS_SKIP_PREFLIGHT" not in launch and "${PATS_SKIP_PREFLIGHT" not in launch
    for value in ("", "head", "all", "yes"):
        check, train = run_launch(done.launch, tmp_path / (value or "unset"), {"PATS_SKIP_PREFLIGHT": value})
        assert check[:2] == ["-m", "pats.backends.verl.preflight"]
        assert train[:2] == ["-m", "pats.backends.verl.main"] and train[2:] == check[2:]


def test_a_lora_spec_on_vllm_exports_where_vllm_does_not_import(tmp_path, capsys):
    """verl's validate_config imports vllm to check a LoRA rank (the WebShop and search-QA specs): on a
    machine without vllm the export runs every other check and says which one it left to the GPU node,
    instead of blaming the spec's trainer settings."""
    from pats.backends.verl.config import import_error

    if import_error("vllm") is None:
        pytest.skip("vllm imports here: verl runs its LoRA check")
    spec_file = twx_spec_file(tmp_path, "policy: {max_new_tokens: 24, lora: {rank: 16, alpha: 32}}")
    out = tmp_path / "out"
    assert main(["export", "verl", str(spec_file), str(out), "trainer.rollout_engine=vllm"]) == 0
    said = capsys.readouterr().out
    assert "not checked here: verl's check of lora_rank 16" in said and "No module named 'vllm'" in said
    [line] = [ln for ln in (out / "README.md").read_text().splitlines() if "lora_rank 16" in ln]
    assert line.startswith("- Not checked where the bundle was written: verl's check of lora_rank 16 ")
    assert line.endswith("; the GPU node runs it (launch.sh's preflight requires vllm).")
    # The rest of validate_config still runs: a config it refuses is still refused.
    with pytest.raises(SpecError, match="divisible"):
        export_verl(
            load_spec(spec_file, ["trainer.rollout_engine=vllm", "trainer.gpus_per_node=3"]), tmp_path / "x"
        )


def test_the_bundle_says_how_to_install_pats_and_what_the_nodes_need(tmp_path, monkeypatch):
    for name in ("ALFWORLD_DATA", "PATS_DATA"):  # no defaults for launch.sh
        monkeypatch.delenv(name, raising=False)
    spec = load_spec(twx_spec_file(tmp_path), ["trainer.rollout_engine=vllm"])
    done = export_verl(spec, tmp_path / "out")
    readme, launch = (done.out / "README.md").read_text(), done.launch.read_text()
    for text in (readme, launch):
        assert "pip install -e '/path/to/pats[verl]'" in text and "another project" in text
    assert 'pip install "verl[vllm]==0.9.1"' in readme
    # What launch.sh runs, and what skipping its check of the launching node leaves checked.
    assert (
        "then runs `python3 -m pats.backends.verl.main`" in readme and "verl.trainer.main_ppo" not in readme
    )
    assert "`PATS_SKIP_PREFLIGHT=head` skips the first alone" in readme
    assert "build-essential" not in readme  # no alfworld extra here
    # The attention is picked on the launching node: flash-attn if it imports there, else SDPA.
    assert "else PyTorch's SDPA (nothing to install)" in readme and "flash-attn==2.8.3" in readme
    assert not done.needs.flash_attn and done.needs.engine == "vllm"
    # ... said apart from what every node needs (issue 59, item 19: "every node needs the attention is picked").
    provide = readme.split("## What the cluster must provide\n\n", 1)[1].splitlines()
    assert provide[1:3] == [
        f"- On every node, {done.needs.lines()[0]}.",
        "- The attention is picked where the run launches: flash_attention_2 if flash_attn imports there, else "
        f"PyTorch's SDPA (nothing to install); {FLASH_ATTN_ON}.",
    ]
    assert (
        "- Variables the workers get through Ray's runtime env when set: ALFWORLD_DATA, PATS_DATA, PATS_CACHE; "
        "launch.sh's defaults (from the exporting machine; the launching shell's values win): none were set."
        in provide
    )


def test_a_search_qa_export_reads_its_data_under_the_data_root_of_the_node(
    tmp_path, monkeypatch, shared_data
):
    """The shipped search-QA spec names its QA sets and corpus as `${data:...}`; the bundle keeps them so,
    and a node whose data root is elsewhere (another $PATS_DATA) reads its own copies."""
    monkeypatch.setenv("PATS_DATA", str(shared_data))
    spec = load_spec(REPO / "experiments" / "search_qa" / "pats.yaml")
    done = export_verl(spec, tmp_path / "out")
    text = (tmp_path / "out" / "spec.yaml").read_text()
    assert str(shared_data) not in text, "no path of the exporting machine's data root"
    assert "- ${data:qa/graphrag_r2/popqa/train.parquet}" in text
    assert "corpus: ${data:corpus/flashrag_wiki18_sample_1000.jsonl}" in text
    assert ("environment.train_data.0", "${data:qa/graphrag_r2/popqa/train.parquet}") in done.data_refs
    assert not [path for _, path, _ in done.absolute if path.startswith(str(shared_data))]
    assert (
        "- `environment.eval_data.0`: `${data:qa/agentic_rag/nq/test.jsonl}`, under the data root of every node "
        "(`$PATS_DATA`, which the workers get through Ray's runtime env; default ~/.cache/pats/data)"
        in (tmp_path / "out" / "README.md").read_text().splitlines()
    )

    # Another node: the bundle moved, the data root elsewhere, its training set smaller than ours.
    import pyarrow.parquet as pq

    root = tmp_path / "cluster-data"
    for _, ref in done.data_refs:
        relative = ref[len("${data:") : -1]
        if (shared_data / relative).is_file():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shared_data / relative, root / relative)
    train = root / "qa/graphrag_r2/popqa/train.parquet"
    pq.write_table(pq.read_table(train).slice(0, 3), train)
    moved = tmp_path / "elsewhere"
    shutil.move(tmp_path / "out", moved)
    for rows in ("train.parquet", "val.parquet"):
        (moved / rows).unlink()
    monkeypatch.setenv("PATS_DATA", str(root))

    assert verl_data.main([str(moved)]) == 0
    assert load_spec(moved / "spec.yaml").environment.train_data == (str(train),)
    assert pq.read_table(moved / "train.parquet").num_rows == 3
