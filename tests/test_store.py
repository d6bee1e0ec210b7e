"""The scaffold store: versions and hashes, pinning, rollback, the view budget, refused edits, persistence."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from pats.errors import PatsError
from pats.scaffold import EditError, ScaffoldStore, content_hash, render_view, with_scaffold
from pats.types import EMPTY_VIEW, AddEdit, DeleteEdit, ScaffoldView, Task, UpdateEdit

TWC = Task(id="twx:twc:train:1", type="twc", split="train", env="twx")
TWC_2 = Task(id="twx:twc:train:2", type="twc", split="train", env="twx")
COIN = Task(id="twx:coin:train:1", type="coin", split="train", env="twx")


def add(text: str, scope: str = "general", kind: str = "skill", cites: tuple[str, ...] = ()) -> AddEdit:
    return AddEdit(kind=kind, scope=scope, text=text, cites=cites)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


@pytest.fixture
def store(count_tokens, tmp_path) -> ScaffoldStore:
    return ScaffoldStore(count_tokens, 256, tmp_path / "scaffold")


def test_version_zero_is_empty_with_the_hash_of_no_entries(store):
    assert store.current.number == 0
    assert store.current.entries == ()
    assert store.current.parent is None
    assert store.current.hash == hashlib.sha256(b"[]").hexdigest()[:12] == "4f53cda18c2b"
    assert store.versions() == [store.current]


def test_apply_adds_a_version_with_number_parent_ids_and_tokens(store, count_tokens):
    v1 = store.apply(
        [add("Take the item first."), add("Drop it in the fridge.", "type:twc", "mistake", ("c1", "c2"))], 3
    )
    assert (v1.number, v1.step, v1.parent) == (1, 3, store.version(0).hash)
    assert [e.id for e in v1.entries] == ["e1", "e2"]
    e2 = v1.entries[1]
    assert (e2.kind, e2.scope, e2.cites, e2.created_step, e2.updated_step) == (
        "mistake",
        "type:twc",
        ("c1", "c2"),
        3,
        3,
    )
    assert e2.tokens == count_tokens("Drop it in the fridge.") > 0

    v2 = store.apply(
        [UpdateEdit(entry_id="e1", text="  Take the apple first. "), DeleteEdit(entry_id="e2", reason="x")], 5
    )
    assert (v2.number, v2.parent) == (2, v1.hash)
    (e1,) = v2.entries
    assert (e1.id, e1.text, e1.created_step, e1.updated_step) == ("e1", "Take the apple first.", 3, 5)
    # Ids are never reused: e2 was deleted, the next entry is e3.
    assert store.apply([add("Open the door.")], 6).entries[-1].id == "e3"
    # An empty edit set makes no version.
    assert store.apply([], 7) is store.current
    assert len(store.versions()) == 4


def test_same_entries_give_the_same_hash_whatever_the_steps(count_tokens):
    one, two = ScaffoldStore(count_tokens, 256), ScaffoldStore(count_tokens, 256)
    edits = [add("Take the item first."), add("Look once.", "task:t1", "skill", ("c1",))]
    assert one.apply(edits, 1).hash == two.apply(edits, 40).hash
    assert one.apply([UpdateEdit(entry_id="e1", text="Take the item first!")], 2).hash != two.current.hash
    assert content_hash(one.current.entries) == one.current.hash
    assert content_hash(reversed(one.current.entries)) == one.current.hash  # order-free


def test_pin_is_stable_within_a_version_and_changes_after_apply(store):
    store.apply([add("Take the item first.", "type:twc")], 1)
    view = store.pin(TWC)
    assert store.pin(TWC) is view
    assert view.version == store.current.hash
    assert view.entry_ids == ("e1",)
    assert store.pin(COIN) is EMPTY_VIEW  # no entry applies to another type

    store.apply([add("Open the fridge.", "type:twc")], 2)
    after = store.pin(TWC)
    assert after.version == store.current.hash != view.version
    assert after.entry_ids == ("e1", "e2")
    assert store.pin(TWC) is after


def test_entries_for_a_task_and_for_a_type(store, count_tokens):
    store.apply(
        [
            add("General."),
            add("Twc type.", "type:twc"),
            add("Coin type.", "type:coin"),
            add("Own plan.", "task:" + TWC.id, "plan"),
        ],
        1,
    )
    assert [e.id for e in store.entries_for(TWC)] == ["e1", "e2", "e4"]
    assert [e.id for e in store.entries_for(TWC_2)] == ["e1", "e2"]
    assert [e.id for e in store.entries_for(COIN)] == ["e1", "e3"]
    # entries_for_type knows a task's type only once the task was seen (pinned or asked for).
    fresh = ScaffoldStore.open(store.directory, count_tokens, 256)
    assert [e.id for e in fresh.entries_for_type("twc")] == ["e1", "e2"]
    fresh.pin(TWC)
    assert [e.id for e in fresh.entries_for_type("twc")] == ["e1", "e2", "e4"]
    assert [e.id for e in fresh.entries_for_type("coin")] == ["e1", "e3"]


def test_rollback_makes_a_new_version_equal_to_the_old_one(store):
    v1 = store.apply([add("One."), add("Two.")], 1)
    v2 = store.apply([DeleteEdit(entry_id="e1", reason="redundant"), add("Three.")], 2)
    v3 = store.rollback(1, 3)
    assert (v3.number, v3.step, v3.parent) == (3, 3, v2.hash)
    assert v3.entries == v1.entries
    assert v3.hash == v1.hash
    assert store.version(v1.hash) is v3  # a repeated hash finds the newest version
    assert store.version(2) is v2
    assert store.version("2") is v2
    assert store.rollback(v2.hash, 4).entries == v2.entries
    with pytest.raises(PatsError, match=r"no scaffold version 99; known numbers are 0\.\.4"):
        store.version(99)
    with pytest.raises(PatsError, match="no scaffold version 'abc'"):
        store.rollback("abc", 5)


def test_view_renders_most_specific_first_with_an_exact_layout(count_tokens):
    store = ScaffoldStore(count_tokens, 1000)
    store.apply(
        [
            add("Use words.", "general", "mistake"),
            add("Read the task."),
            add("Guessing rooms.", "type:twc", "mistake"),
            add("Clothes go in the basket.", "type:twc"),
            add("Go east, take the sock, put it in the basket.", "task:" + TWC.id, "plan"),
            add("Coin only.", "type:coin"),
        ],
        1,
    )
    view = store.pin(TWC)
    assert view.text == (
        "Guidance for this task (from training):\n"
        "This task:\n"
        "- Plan: Go east, take the sock, put it in the basket.\n"
        "Tasks of this type:\n"
        "- Clothes go in the basket.\n"
        "- Avoid: Guessing rooms.\n"
        "All tasks:\n"
        "- Read the task.\n"
        "- Avoid: Use words."
    )
    assert view.entry_ids == ("e5", "e4", "e3", "e2", "e1")
    assert view.tokens == count_tokens(view.text)


def test_view_budget_keeps_the_highest_priority_entries(count_tokens):
    store = ScaffoldStore(count_tokens, 1000)
    v = store.apply(
        [
            add("General advice that is rather long and would not fit a small budget at all, " * 3),
            add("Short general."),
            add("Clothes go in the basket.", "type:twc"),
            add("Go east, then take the sock.", "task:" + TWC.id, "plan"),
        ],
        1,
    )
    plan_only = render_view([v.entries[3]], TWC, count_tokens, 1000, v.hash)
    budget = plan_only.tokens + 1  # room for the plan, not for one more line
    small = render_view(v.entries, TWC, count_tokens, budget, v.hash)
    assert small.entry_ids == ("e4",)
    assert small.text == plan_only.text
    assert small.tokens <= budget

    # A budget for the plan, the type skill and the short general one: the long entry is skipped,
    # the later short one still fits.
    three = render_view([v.entries[i] for i in (3, 2, 1)], TWC, count_tokens, 1000, v.hash)
    mid = render_view(v.entries, TWC, count_tokens, three.tokens, v.hash)
    assert mid.entry_ids == ("e4", "e3", "e2")
    assert mid.text == three.text
    # Nothing fits: the empty view, never a bare header.
    assert render_view(v.entries, TWC, count_tokens, 5, v.hash) is EMPTY_VIEW


def test_a_refused_edit_set_lists_every_problem_and_changes_nothing(store):
    store.apply([add("One."), add("Two.")], 1)
    before_version, before_files = store.current, snapshot(store.directory)
    view = store.pin(TWC)
    edits = [
        UpdateEdit(entry_id="e9", text="Nine."),
        DeleteEdit(entry_id="e1", reason="x"),
        UpdateEdit(entry_id="e1", text="One again."),
        add("Bad scope.", "types:twc"),
        add("   ", "type:twc"),
        add("A plan for everyone.", "general", "plan"),
        add("Fine on its own.", "task:t 1"),
    ]
    with pytest.raises(EditError) as caught:
        store.apply(edits, 2)
    problems = caught.value.problems
    assert problems == [
        "edit 0 (UPDATE e9): no entry 'e9' exists; UPDATE only ids of the current entries (e1, e2)",
        "edit 2 (UPDATE e1): entry 'e1' is already edited by edit 1; edit each entry at most once per set",
        "edit 3 (ADD skill types:twc): scope 'types:twc' is not 'general', 'type:<task type>' or "
        "'task:<task id>' (no spaces in the name)",
        "edit 4 (ADD skill type:twc): text is empty; write the guidance text, or DELETE instead",
        "edit 5 (ADD plan general): a plan belongs to one task; scope it 'task:<task id>', or make it "
        "kind 'skill' to guide every task in scope 'general'",
        "edit 6 (ADD skill task:t 1): scope 'task:t 1' is not 'general', 'type:<task type>' or "
        "'task:<task id>' (no spaces in the name)",
    ]
    assert store.check(edits) == problems  # what apply checks, without applying
    assert "6 problems" in str(caught.value)
    assert store.current is before_version
    assert snapshot(store.directory) == before_files
    assert store.pin(TWC) is view
    assert store.apply([add("Three.")], 2).entries[-1].id == "e3"  # no id was spent


def test_persistence_round_trip(store, count_tokens):
    store.apply([add("One.", cites=("c1", "c2")), add("Plan.", "task:" + TWC.id, "plan")], 1)
    store.pin(TWC)
    store.apply([UpdateEdit(entry_id="e1", text="One, better.")], 2)
    store.apply([DeleteEdit(entry_id="e2", reason="solved")], 3)
    store.rollback(1, 4)
    directory = store.directory
    assert sorted(p.name for p in (directory / "versions").iterdir()) == [
        f"{n:06d}.json" for n in range(1, 5)
    ]
    assert (
        (directory / "current.md")
        .read_text()
        .startswith(f"# Scaffold version 4\n\nhash `{store.current.hash}`")
    )

    reopened = ScaffoldStore.open(directory, count_tokens, 256)
    assert reopened.versions() == store.versions()
    assert reopened.pin(TWC) == store.pin(TWC)
    assert [e.id for e in reopened.entries_for_type("twc")] == ["e1", "e2"]  # task types were saved
    assert reopened.apply([add("Three.")], 5).entries[-1].id == "e3"
    with pytest.raises(PatsError, match="already holds scaffold versions"):
        ScaffoldStore(count_tokens, 256, directory)
    assert ScaffoldStore.open(directory.parent / "nothing", count_tokens, 256).current.number == 0


def test_a_crash_between_write_and_rename_leaves_the_last_good_version(store, count_tokens, monkeypatch):
    good = store.apply([add("One.")], 1)
    files = snapshot(store.directory)

    def crash(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        store.apply([add("Two.")], 2)
    monkeypatch.undo()
    assert store.current is good
    assert snapshot(store.directory) == files  # the temp file was cleaned up, nothing else changed
    # A temp file a killed process left behind is ignored.
    (store.directory / "versions" / ".000002.json.4242.tmp").write_text('{"number": 2, "ha')
    reopened = ScaffoldStore.open(store.directory, count_tokens, 256)
    assert reopened.current == good
    assert reopened.apply([add("Two.")], 2).number == 2


def test_open_refuses_a_gap_or_an_altered_version(store, count_tokens):
    store.apply([add("One.")], 1)
    store.apply([add("Two.")], 2)
    folder = store.directory / "versions"
    first = folder / "000001.json"
    first.write_text(first.read_text().replace("One.", "Uno."))
    with pytest.raises(PatsError, match="000001.json: its number or content hash does not match"):
        ScaffoldStore.open(store.directory, count_tokens, 256)
    first.unlink()
    with pytest.raises(PatsError, match="version 000001.json is missing before 000002.json"):
        ScaffoldStore.open(store.directory, count_tokens, 256)


def test_seed_makes_version_one_once(store, count_tokens):
    v1 = store.seed([add("One."), add("Two.", "type:twc", "mistake")])
    assert (v1.number, v1.step, len(v1.entries)) == (1, 0, 2)
    with pytest.raises(PatsError, match="already has versions up to 1"):
        store.seed([add("Three.")])
    with pytest.raises(EditError, match="a bank holds ADD edits only"):
        ScaffoldStore(count_tokens, 256).seed([DeleteEdit(entry_id="e1", reason="x")])


def test_the_empty_view_leaves_the_prompt_byte_identical():
    prompt = "You are an agent in a text game.\nAct with one command per turn."
    assert with_scaffold(prompt, EMPTY_VIEW) is prompt
    view = ScaffoldView(
        version="abc", text="Guidance for this task (from training):\n- Look.", entry_ids=("e1",), tokens=9
    )
    assert with_scaffold(prompt, view) == prompt + "\n\nGuidance for this task (from training):\n- Look."
