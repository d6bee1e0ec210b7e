"""How a command-line value splits into a sweep (pats.sweep.multirun), read whole, from the mutation run
of multirun.py: ranges of one, two and three numbers, refusals with the exact text, commas inside
nested brackets and quotes left alone, every problem of a command line reported at once."""

from __future__ import annotations

import dataclasses

import pytest

from pats.errors import SpecError
from pats.spec.issues import SpecIssue
from pats.sweep.multirun import split_multirun, sweep_values

HINT = "write range(start, stop) or range(start, stop, step) with whole numbers, e.g. range(0,4)"


def test_ranges_of_one_two_and_three_numbers():
    assert sweep_values("range(3)") == ("0", "1", "2")
    assert sweep_values("range(2,4)") == ("2", "3")
    assert sweep_values("range(0,10,4)") == ("0", "4", "8")
    assert sweep_values("range(4,0,-2)") == ("4", "2")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("range(0,4,0)", f"range(0,4,0): {HINT}"),
        ("range(0,4,1,2)", f"range(0,4,1,2): {HINT}"),
        ("range(a,4)", f"range(a,4): {HINT} (or list other values: KEY=1e-4,3e-4)"),
        ("range(4,2)", f"range(4,2) is empty (the stop is left out): {HINT}"),
        ("a,,b", "'a,,b' has an empty value between commas; write KEY=a,b,c"),
        ("a,b,a", "'a,b,a' repeats a value; give each once"),
    ],
)
def test_refusals_whole(value, message):
    with pytest.raises(ValueError) as err:
        sweep_values(value)
    assert str(err.value) == message


def test_commas_inside_nested_brackets_and_quotes_stay():
    assert sweep_values("[[a,b],[c]],[d]") == ("[[a,b],[c]]", "[d]")
    assert sweep_values("{a: [1,2]},x") == ("{a: [1,2]}", "x")
    assert sweep_values("'a,\"b' ,c") == ("'a,\"b'", "c")  # a double quote inside single quotes
    assert sweep_values("\"x,y\",'z'") == ('"x,y"', "'z'")  # the quote closes, the next comma splits
    assert sweep_values("[[a],b],c") == ("[[a],b]", "c")  # one level closed, one still open
    assert sweep_values("],a") == ("]", "a")  # a stray closer does not go below the top level
    assert sweep_values("[a,b]") is None
    assert sweep_values("X,Y") == ("X", "Y")  # only brackets and quotes group, no other character
    assert sweep_values("[aX,b],c") == ("[aX,b]", "c")  # and no other character closes a group


def test_every_problem_of_a_command_line_at_once():
    items = ["trainer.lr=1e-4,,3e-4", "seed=a,b", "trainer.lr=1,2", "x=range(9,1)", "trainer.lr=3,4", "y=1"]
    with pytest.raises(SpecError) as err:
        split_multirun(items)
    assert err.value.file == "pats sweep"
    assert err.value.issues == [
        SpecIssue("trainer.lr", "'1e-4,,3e-4' has an empty value between commas; write KEY=a,b,c",
                  "override 'trainer.lr=1e-4,,3e-4'"),
        SpecIssue("seed", "seeds are whole numbers: seed=0,1,2 or seed=range(0,4)", "override 'seed=a,b'"),
        SpecIssue("x", f"range(9,1) is empty (the stop is left out): {HINT}", "override 'x=range(9,1)'"),
        SpecIssue("trainer.lr", "is swept twice; give its values once: KEY=a,b,c", "override 'trainer.lr=3,4'"),
    ]  # fmt: skip


def test_the_split_is_frozen_and_seeds_unset_without_seed():
    got = split_multirun(["y=1"])
    assert (got.overrides, got.grid, got.seeds) == (("y=1",), {}, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.seeds = (1,)  # type: ignore[misc]
