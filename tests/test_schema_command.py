"""`pats schema` writes and checks both JSON Schemas (issue 59, item 21): what it says, read whole (the
files' contents are tests/test_spec_valid.py's)."""

from __future__ import annotations

from pats.cli.main import main


def test_pats_schema_says_each_file_it_writes_checks_or_finds_stale(tmp_path, capsys):
    experiment, sweep = tmp_path / "experiment.schema.json", tmp_path / "sweep.schema.json"
    assert main(["schema", "--check", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err == "".join(
        f"error: {p} is out of date with the spec models; run `pats schema` to rewrite it\n"
        for p in (experiment, sweep)
    )
    assert main(["schema", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"wrote {experiment}\nwrote {sweep}\n"
    assert main(["schema", "--check", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"ok: {experiment}, {sweep} match the spec models\n"
    experiment.write_text("{}\n")
    assert main(["schema", "--check", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"error: {experiment} is out of date with the spec models; run `pats schema` to rewrite it\n"
    )
    assert main(["schema", "--out", str(tmp_path / "new" / "dir")]) == 0, "the folder is made"
    assert (tmp_path / "new" / "dir" / "sweep.schema.json").read_text() == sweep.read_text()
