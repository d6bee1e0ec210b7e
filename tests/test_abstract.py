"""Family-level patterns from one game's actions: roles for one game's objects, the family's words kept."""

from pats.reviser.abstract import (
    abstract_action,
    family_pattern,
    family_vocabulary,
    game_words,
    pattern_text,
    split_action,
)


def test_split_action_by_prepositions():
    assert split_action("put black pepper in shelf") == ("put", [("", "black pepper"), ("in", "shelf")])
    assert split_action("go to countertop 1") == ("go", [("to", "countertop 1")])
    assert split_action("take apple 2 from countertop 1") == (
        "take",
        [("", "apple 2"), ("from", "countertop 1")],
    )
    assert split_action("open door to north") == ("open", [("", "door"), ("to", "north")])
    assert split_action("inventory") == ("inventory", [])


def test_roles_directions_and_particles():
    none = frozenset()
    assert abstract_action("put black pepper in shelf", none) == "put <object> in <place>"
    assert abstract_action("cool apple 2 with fridge 1", none) == "cool <object> with <tool>"
    assert abstract_action("move north", none) == "move <direction>"
    assert abstract_action("look around", none) == "look around"
    assert abstract_action("cook pork chop in toaster", frozenset({"toaster"})) == "cook <object> in toaster"


def test_vocabulary_is_what_several_tasks_share():
    traces = [
        ("a", ["take cookbook", "read cookbook", "take red apple", "prepare meal"]),
        ("b", ["take cookbook", "read cookbook", "take pork chop", "prepare meal"]),
        ("c", ["go to fridge 1", "open fridge 2"]),  # instance numbers do not make two fridges
    ]
    vocabulary = family_vocabulary(traces)
    assert vocabulary == {"cookbook", "meal"}
    assert family_vocabulary(traces + [("d", ["take fridge"])]) >= {"fridge"}
    assert pattern_text(traces[0][1], vocabulary) == (
        "take cookbook -> read cookbook -> take <object> -> prepare meal"
    )
    assert game_words(traces[0][1], vocabulary) == {"red apple"}


def test_pattern_folds_repeats_and_picks_the_common_one():
    moves = ["look around", "move north", "move south", "move north", "take coin"]
    assert (
        pattern_text(moves, frozenset({"coin"})) == "look around -> move <direction> (3 times) -> take coin"
    )
    twice = ["take a", "put a in b", "take c", "put c in b"]
    assert pattern_text(twice, frozenset()) == "take <object> -> put <object> in <place> (2 times)"
    retried = ["take shirt", "take shirt", "open washer"]  # a word-for-word retry counts once
    assert pattern_text(retried, frozenset()) == "take <object> -> open <object>"
    traces = [("a", ["take x", "put x in y"]), ("b", ["take z", "put z in w"]), ("c", ["look around"])]
    assert family_pattern(traces) == ("take <object> -> put <object> in <place>", 2)
    assert family_pattern([]) is None
