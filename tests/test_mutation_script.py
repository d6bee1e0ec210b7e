"""scripts/mutation (a developer's tool, not run in CI) runs each mutant's tests in a work copy under
$TMPDIR: what it passes those runs that the copy cannot find for itself."""

from __future__ import annotations

from pathlib import Path

from pats.testing.scripts import load_script

mutation = load_script(Path(__file__).resolve().parents[1] / "scripts" / "mutation", "mutation_script")


def test_the_mutants_tests_find_the_shared_data_the_work_copy_has_not(tmp_path):
    environ: dict[str, str] = {}
    mutation.default_data_root(environ, tmp_path)
    assert environ == {"PATS_DATA": str(tmp_path)}
    mine = {"PATS_DATA": "/elsewhere"}
    mutation.default_data_root(mine, tmp_path)
    assert mine == {"PATS_DATA": "/elsewhere"}  # one the user set is kept
    none: dict[str, str] = {}
    mutation.default_data_root(none, tmp_path / "missing")
    assert none == {}  # no shared data beside the checkout: the tests skip as on a user's clone
