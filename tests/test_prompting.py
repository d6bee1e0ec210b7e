"""Prompt rendering and action parsing for text environments (no model, no JVM)."""

from __future__ import annotations

import pytest

from pats.envs.prompting import (
    MAX_ACTION_CHARS,
    PromptParts,
    instructions,
    parse_action,
    render_prompt,
)
from pats.spec.environments import TwxEnvSpec

TASK = "Your task is to pick up objects, then place them in their usual locations in the environment."
HISTORY = [
    ("look around", "You are in the bedroom. You see a wardrobe that is closed."),
    ("open wardrobe", "You open the wardrobe. It is empty."),
    ("take clean brown shirt", "You take the clean brown shirt."),
]
ADMISSIBLE = (
    "inventory",
    "look around",
    "open chest of drawers",
    "put clean brown shirt in wardrobe",
    "take clean blue T-shirt",
)


def render(window: int = 2, admissible=ADMISSIBLE, history=HISTORY) -> PromptParts:
    return render_prompt(
        instructions("twx", "generate"), TASK, history, "You see a bed.\n", admissible, window
    )


def test_window_keeps_only_the_last_pairs():
    user = render(window=2).user
    assert "open wardrobe" in user and "take clean brown shirt" in user
    assert "look around" not in user.split("Admissible actions:")[0]  # the oldest pair is cut
    assert user.index("open wardrobe") < user.index("take clean brown shirt") < user.index("You see a bed.")
    everything = render(window=10).user
    assert "You are in the bedroom." in everything
    nothing = render(window=0).user
    assert "history" not in nothing.lower() and "You take the clean brown shirt." not in nothing
    assert nothing.startswith("Observation: You see a bed.")


def test_admissible_actions_are_listed_when_given():
    user = render().user
    assert user.endswith("Admissible actions: " + ", ".join(ADMISSIBLE))
    assert "Admissible actions" not in render(admissible=None).user


def test_system_prompt_is_instructions_and_task_only():
    parts = render()
    assert parts.system == f"{instructions('twx', 'generate')}\n\nTask: {TASK}"
    assert TwxEnvSpec.INSTRUCTIONS in parts.system and "<action>" in parts.system
    for pair in HISTORY:  # no history and no observation in the system part
        assert pair[1] not in parts.system
    assert "You see a bed." not in parts.system
    # No scaffold: the system part is the same whatever the history, so guidance can only be added
    # by the caller, and the bare prompt is stable across turns.
    assert render(history=[]).system == parts.system
    assert "guidance" not in parts.system.lower() and "scaffold" not in parts.system.lower()
    assert render_prompt("Play.", "", [], "obs", None, 2) == PromptParts(
        system="Play.", user="Observation: obs"
    )


def test_instructions_per_mode_and_unknown_env():
    assert "<action>" not in instructions("twx", "score")
    with pytest.raises(KeyError, match="known: twx"):
        instructions("nethack", "generate")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<action>open chest of drawers</action>", "open chest of drawers"),
        ("I think I should look.\n<action> Look Around </action> because", "look around"),
        ("<ACTION>inventory", "inventory"),  # unclosed tag (generation stopped)
        ("open chest of drawers\nbecause it is closed", "open chest of drawers"),
        ("\n\n  inventory  \n", "inventory"),
        ('"take clean blue T-shirt".', "take clean blue T-shirt"),  # quotes, period; the game's spelling
        ("'inventory'", "inventory"),
        ("Action: look around", "look around"),
        ("> inventory!", "inventory"),
        ("put clean brown shirt in wardrob", "put clean brown shirt in wardrobe"),  # fuzzy
        ("take clean blue t shirt", "take clean blue T-shirt"),  # fuzzy
        ("open chest of", "open chest of drawers"),  # unique prefix
        ("look around the room carefully", "look around"),  # an action and extra words
    ],
)
def test_parse_action_finds_the_admissible_action(text, expected):
    assert parse_action(text, ADMISSIBLE) == (expected, True, "")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   \n\t ", "empty"),
        ("<action></action>", "no action"),
        ("?!... --- ...", "no action"),
        ("12345", "no action"),
        ("x" * (MAX_ACTION_CHARS + 1), "over-long"),
        ("<action>" + "take " * 60 + "</action>", "over-long"),
    ],
)
def test_parse_action_rejects_empty_garbage_and_over_long(text, reason):
    action, valid, why = parse_action(text, ADMISSIBLE)
    assert (action, valid) == ("", False) and reason in why


def test_parse_action_returns_readable_but_wrong_actions_as_invalid():
    assert parse_action("dance wildly", ADMISSIBLE) == (
        "dance wildly",
        False,
        "'dance wildly' is not an admissible action",
    )
    action, valid, reason = parse_action("o", ADMISSIBLE)  # a prefix too short to mean one action
    assert (action, valid) == ("o", False)
    action, valid, reason = parse_action("put clean", ("put clean shirt in box", "put clean sock in box"))
    assert not valid and "ambiguous" in reason
    close = ("open door to east", "open door to west")
    action, valid, reason = parse_action("open door to eas", close)
    assert (action, valid) == ("open door to east", True)  # a clear best match wins
    assert not parse_action("open door to", close)[1]  # equally close to both


def test_parse_action_without_admissible_accepts_any_clean_text():
    assert parse_action("<action>Go North.</action>", None) == ("Go North", True, "")
    assert parse_action("", None) == ("", False, "empty output")
    assert not parse_action("y" * 500, None)[1]
