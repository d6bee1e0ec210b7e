"""The embedded model's converted cache when two callers want it at once (a run and the vLLM server
beside it, 2026-12-05; pytest-xdist's workers): one converts under a file lock while the other waits,
and a conversion that loses a race anyway (another machine on a shared cache) finds the winner's
folder in place."""

from __future__ import annotations

import pytest

from pats.models.files import _convert_embedded


@pytest.mark.slow  # converts the real model (about 25 s alone, minutes beside other work)
def test_a_conversion_that_loses_the_race_keeps_the_winners_folder(tmp_path):
    target = tmp_path / "smollm2-135m-instruct"
    target.mkdir()
    (target / "config.json").write_text('{"written": "by the other process"}')
    _convert_embedded(target)  # converts, then its rename meets the folder the other process wrote
    assert (target / "config.json").read_text() == '{"written": "by the other process"}'
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # its own temporary folder removed


@pytest.mark.slow  # converts the real model, as above
def test_a_folder_in_the_way_that_holds_no_model_is_not_taken_for_one(tmp_path):
    target = tmp_path / "smollm2-135m-instruct"
    target.mkdir()
    (target / "stray.txt").write_text("not a model")
    with pytest.raises(OSError):
        _convert_embedded(target)
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_two_callers_at_once_convert_the_model_once(tmp_path, monkeypatch):
    """pytest-xdist's workers (or a run and a server beside it) asking for the model at once: one
    converts, the other waits on the lock and finds the folder (before, each converted it)."""
    import threading
    import time

    from pats.models import files
    from pats.spec.models import EMBEDDED_POLICY

    calls = []

    def convert(target):
        calls.append(target)
        time.sleep(0.5)  # the other caller arrives while this one converts
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setenv("PATS_CACHE", str(tmp_path))
    monkeypatch.setattr(files, "_convert_embedded", convert)
    found = []
    callers = [
        threading.Thread(target=lambda: found.append(files.resolve_model_dir(EMBEDDED_POLICY)))
        for _ in range(2)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert found == [tmp_path / EMBEDDED_POLICY] * 2 and calls == [tmp_path / EMBEDDED_POLICY]
