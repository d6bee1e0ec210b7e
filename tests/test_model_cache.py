"""The embedded model's converted cache when two processes convert it at once (a run and the vLLM
server beside it, 2026-12-05): the second rename finds the first one's folder in place."""

from __future__ import annotations

import pytest

from pats.models.files import _convert_embedded


def test_a_conversion_that_loses_the_race_keeps_the_winners_folder(tmp_path):
    target = tmp_path / "smollm2-135m-instruct"
    target.mkdir()
    (target / "config.json").write_text('{"written": "by the other process"}')
    _convert_embedded(target)  # converts, then its rename meets the folder the other process wrote
    assert (target / "config.json").read_text() == '{"written": "by the other process"}'
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # its own temporary folder removed


def test_a_folder_in_the_way_that_holds_no_model_is_not_taken_for_one(tmp_path):
    target = tmp_path / "smollm2-135m-instruct"
    target.mkdir()
    (target / "stray.txt").write_text("not a model")
    with pytest.raises(OSError):
        _convert_embedded(target)
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
