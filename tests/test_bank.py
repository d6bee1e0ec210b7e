"""Initial banks: SkillRL's published banks, the shipped twc bank, pats' format, and bad inputs."""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest

from pats.errors import PatsError, PrerequisiteError
from pats.scaffold import ScaffoldStore, load_bank
from pats.spec.environments import ALFWORLD_TASK_TYPES
from pats.types import AddEdit, Task

ALFWORLD_TYPES = list(ALFWORLD_TASK_TYPES)


def kinds(edits: list[AddEdit]) -> Counter:
    """(kind, scope) -> count, with every type scope counted as 'type'."""
    return Counter((e.kind, e.scope.split(":")[0]) for e in edits)


@pytest.mark.parametrize(
    ("name", "general", "typed", "mistakes", "types"),
    [
        (
            "alfworld",
            12,
            32,
            11,
            {"pick_and_place", "look_at_obj_in_light", "clean", "heat", "cool", "examine"},
        ),
        (
            "webshop",
            15,
            39,
            12,
            {"apparel", "footwear", "home_decor", "electronics", "accessories", "beauty_health", "other"},
        ),
        (
            "search",
            10,
            20,
            11,
            {"direct_retrieval", "multi_hop_reasoning", "entity_attribute_lookup", "comparison"},
        ),
    ],
)
def test_skillrl_banks_load_with_exact_counts(shared_data, name, general, typed, mistakes, types):
    edits = load_bank(shared_data / "skill_banks" / "skillrl" / f"{name}.json")
    assert kinds(edits) == {
        ("skill", "general"): general,
        ("skill", "type"): typed,
        ("mistake", "general"): mistakes,
    }
    assert {e.scope for e in edits if e.scope.startswith("type:")} == {f"type:{t}" for t in types}
    assert all(e.text.strip() == e.text and "\n" not in e.text and e.cites == () for e in edits)
    # Skills first, then mistakes, each in the file's order.
    assert [e.kind for e in edits] == ["skill"] * (general + typed) + ["mistake"] * mistakes


def test_skillrl_texts_are_title_principle_when(shared_data):
    edits = load_bank(shared_data / "skill_banks" / "skillrl" / "alfworld.json")
    assert edits[0].text == (
        "Systematic Exploration: Search every plausible surface or container exactly once before revisiting; "
        "prioritize unopened or unseen locations to cover the whole room methodically. "
        "(when: Anytime the goal object count is not yet met and unexplored locations remain.)"
    )
    assert edits[12].scope == "type:pick_and_place"
    assert edits[-11].text.startswith(
        "Agent repeatedly revisits the same already-searched locations or containers instead of exploring new ones. "
        "Instead: Maintain an exploration map"
    )


def test_skillrl_alfworld_types_map_onto_alfworld_task_types(shared_data):
    edits = load_bank(shared_data / "skill_banks" / "skillrl" / "alfworld.json", task_types=ALFWORLD_TYPES)
    assert Counter(e.scope for e in edits) == {
        "general": 23,
        "type:look_at_obj_in_light": 11,  # SkillRL's look_at_obj_in_light (5) and examine (6)
        "type:pick_clean_then_place_in_recep": 6,
        "type:pick_and_place_simple": 5,
        "type:pick_two_obj_and_place": 5,  # SkillRL files "put two X" under pick_and_place
        "type:pick_heat_then_place_in_recep": 5,
        "type:pick_cool_then_place_in_recep": 5,
    }


def test_unmatched_bank_types_are_dropped_with_a_warning_or_mapped(shared_data, caplog):
    path = shared_data / "skill_banks" / "skillrl" / "search.json"
    with caplog.at_level(logging.WARNING, logger="pats.scaffold.bank"):
        edits = load_bank(path, task_types=["nq", "hotpotqa"])
    assert kinds(edits) == {("skill", "general"): 10, ("mistake", "general"): 11}
    assert "direct_retrieval, multi_hop_reasoning, entity_attribute_lookup, comparison dropped" in caplog.text

    mapped = load_bank(path, task_types=["nq", "hotpotqa"], type_map={"multi_hop_reasoning": "hotpotqa"})
    assert Counter(e.scope for e in mapped)["type:hotpotqa"] == 5
    renamed = load_bank(path, type_map={"comparison": ["nq", "hotpotqa"]})
    assert Counter(e.scope for e in renamed)["type:nq"] == 5
    assert Counter(e.scope for e in renamed)["type:direct_retrieval"] == 5  # kept as given
    with pytest.raises(
        PatsError, match=r"type_map sends 'comparison' to unknown task types \['trivia'\]; known: nq"
    ):
        load_bank(path, task_types=["nq"], type_map={"comparison": "trivia"})


def test_the_shipped_twc_bank_loads_and_seeds_a_store(repo, count_tokens):
    edits = load_bank(repo / "experiments" / "banks" / "twc.json")
    assert kinds(edits) == {("skill", "general"): 2, ("skill", "type"): 1, ("mistake", "general"): 1}
    assert edits[2].scope == "type:twc"
    assert edits[3].text == (
        "Repeating 'look around' or 'inventory' without acting. "
        "Instead: After looking once, take an item that is out of place."
    )
    store = ScaffoldStore(count_tokens, 256)
    store.seed(edits)
    view = store.pin(Task(id="twx:twc:train:0", type="twc", split="train", env="twx"))
    assert view.entry_ids == ("e3", "e1", "e2", "e4")
    assert view.tokens <= 256


def test_pats_format_bank(write):
    entries = [
        {"kind": "skill", "scope": "general", "text": "Read the task."},
        {"kind": "mistake", "scope": "type:twc", "text": "Looping on look.", "cites": ["c1"]},
        {"kind": "plan", "scope": "task:twx:twc:train:0", "text": "Go east."},
    ]
    path = write("bank.json", json.dumps({"entries": entries, "metadata": {"source": "hand-written"}}))
    assert load_bank(path) == [AddEdit.model_validate(e) for e in entries]

    bad = write(
        "bad.json",
        json.dumps(
            {"entries": [{"scope": "general", "text": "x"}, {"kind": "skill", "scope": "room", "text": "y"}]}
        ),
    )
    with pytest.raises(PatsError, match="2 bad entries") as caught:
        load_bank(bad)
    assert "entries[0]: kind: Field required" in str(caught.value)
    assert "entries[1]: scope 'room' is not 'general'" in str(caught.value)


def test_a_missing_bank_names_the_path_and_the_fix(tmp_path):
    with pytest.raises(PrerequisiteError) as caught:
        load_bank(tmp_path / "nowhere" / "alfworld.json")
    assert str(caught.value) == (
        f"scaffold bank {tmp_path / 'nowhere' / 'alfworld.json'} not found; check scaffold.initial_bank in "
        "the spec. SkillRL's banks come with `pats data fetch skillrl` (into $PATS_DATA/skill_banks/skillrl; "
        "PATS_DATA defaults to ~/.cache/pats/data)"
    )
    assert "shared" not in str(caught.value)  # ../shared/data is our mirror, not a user's


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"general_skills": [', "not a readable JSON file"),
        ("[1, 2]", "found a JSON list; expected a JSON object"),
        ('{"skills": []}', r"found an object with keys \['skills'\]; expected"),
        ('{"general_skills": [], "extra": 1}', r"unknown keys \['extra'\] in a SkillRL bank"),
        ('{"task_specific_skills": []}', "task_specific_skills should be a JSON object, found list"),
        ('{"task_specific_skills": {"twc": {}}}', "task-specific skills of 'twc' should be a list"),
        (
            '{"general_skills": [{"title": "No principle"}]}',
            r"general_skills\[0\] needs a non-empty text field 'principle'",
        ),
        ('{"common_mistakes": ["just text"]}', r"common_mistakes\[0\] should be an object, found str"),
        ('{"entries": {"kind": "skill"}}', 'a pats bank is {"entries": \\[...\\]}'),
    ],
)
def test_bad_banks_say_what_is_expected(write, text, message):
    path = write("bank.json", text)
    with pytest.raises(PatsError, match=message) as caught:
        load_bank(path)
    assert str(path) in str(caught.value)
