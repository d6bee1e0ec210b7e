"""Bad specs: each is refused with every problem, its YAML path, the value and what to write."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pats.errors import SpecError
from pats.spec import load_spec

GOOD = "name: x\nenvironment: {kind: twx}\n"


def problems(path, overrides=()):
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    return {i.path: i for i in info.value.issues}


def one(path, overrides=()):
    found = problems(path, overrides)
    assert len(found) == 1, found
    return next(iter(found.values()))


def test_unknown_key(write):
    issue = one(write("s.yaml", GOOD + "colour: red\n"))
    assert issue.path == "colour"
    assert issue.message.startswith("unknown key 'colour'; keys allowed here: environment, eval, judge")


def test_a_key_in_the_wrong_section_names_the_section_it_belongs_to(write):
    issue = one(write("s.yaml", GOOD + "removal: false\n"))  # dedented out of scaffold:
    assert issue.path == "removal"
    assert "it belongs under scaffold:" in issue.message and "did you mean" not in issue.message
    issue = one(write("s.yaml", GOOD + "trainer:\n  api_base: http://x\n"))
    assert "under judge.llm: or under reviser.llm:" in issue.message


def test_misspelled_key_suggests_close_match(write):
    issue = one(write("s.yaml", GOOD + "trainer:\n  stpes: 3\n"))
    assert issue.path == "trainer.stpes"
    assert "did you mean 'steps'?" in issue.message
    assert issue.source.endswith("s.yaml:4")


def test_wrong_type(write):
    issue = one(write("s.yaml", GOOD + "trainer: {steps: many}\n"))
    assert (issue.path, issue.message) == (
        "trainer.steps",
        "'many' is not a whole number; write an integer such as 8",
    )


def test_out_of_range_number(write):
    issue = one(write("s.yaml", GOOD + "trainer: {group_size: 1}\n"))
    assert (issue.path, issue.message) == ("trainer.group_size", "1 is out of range; write a number >= 2")


def test_unknown_environment_kind_lists_known(write):
    issue = one(write("s.yaml", "name: x\nenvironment: {kind: minecraft}\n"))
    assert issue.path == "environment"
    assert issue.message == "unknown kind 'minecraft'; write one of: twx, alfworld, webshop, search_qa"


@pytest.mark.parametrize(
    ("section", "bad", "known"),
    [
        ("judge", "kind: oracle", "stats, llm"),
        ("reviser", "kind: human", "rules, llm"),
        ("trainer", "backend: jax", "local, verl"),
    ],
)
def test_unknown_component_kind_lists_known(write, section, bad, known):
    issue = one(write("s.yaml", GOOD + f"{section}: {{{bad}}}\n"))
    assert issue.path == section
    assert issue.message.endswith(f"write one of: {known}")


def test_missing_required_field(write):
    found = problems(write("s.yaml", "environment: {kind: twx}\n"))
    assert found["name"].message == "required but missing (Run name (folder-safe).); add name: <text>"


def test_missing_required_says_what_to_add(write):
    """Issue 25: not just 'add it' but the YAML to add, the kinds of a union among it."""
    found = problems(write("s.yaml", "name: x\nenvironment: {kind: search_qa}\njudge: {kind: llm}\n"))
    assert found["environment.eval_data"].message.endswith("add eval_data: [<text>, ...]")
    assert found["environment.retriever"].message.endswith(
        "add retriever: {kind: bm25, corpus: <text>} (kind one of: bm25, http)"
    )
    assert found["judge.llm"].message == "required but missing; add llm: {model: <text>}"
    assert one(write("t.yaml", "name: x\n")).message.endswith(
        "add environment: {kind: twx} (kind one of: twx, alfworld, webshop, search_qa)"
    )


def test_missing_required_in_nested_kind(write):
    found = problems(write("s.yaml", "name: x\nenvironment: {kind: search_qa, train_data: [a.jsonl]}\n"))
    assert set(found) == {"environment.eval_data", "environment.retriever"}


def test_literal_value_lists_allowed(write):
    issue = one(write("s.yaml", GOOD + "scaffold: {mode: always}\n"))
    assert (issue.path, issue.message) == (
        "scaffold.mode",
        "'always' is not allowed; write one of: none, static, grow or pats",
    )


def test_bad_override_syntax(write):
    with pytest.raises(SpecError) as info:
        load_spec(write("s.yaml", GOOD), ["trainer.steps"])
    assert (
        info.value.issues[0].message
        == "override 'trainer.steps' is not key=value; write e.g. trainer.steps=10"
    )


def test_override_of_missing_key_names_the_override(write):
    issue = one(write("s.yaml", GOOD), ["trainer.stepps=3"])
    assert issue.path == "trainer.stepps" and "did you mean 'steps'?" in issue.message
    assert issue.source == "override 'trainer.stepps=3'"


def test_a_problem_names_the_override_that_set_the_value_last(write):
    """Two overrides touch logging.root; the one given last set what is wrong, in either order."""
    path = write("s.yaml", GOOD)
    assert one(path, ["logging=y", "logging.root.x=1"]).source == "override 'logging.root.x=1'"
    assert one(path, ["logging.root.x=1", "logging=y"]).source == "override 'logging=y'"
    again = ["logging.root.x=1", "logging=y", "logging.root.x=2"]
    assert one(path, again).source == "override 'logging.root.x=2'"


def test_override_with_bad_value(write):
    issue = one(write("s.yaml", GOOD), ["policy.temperature=0"])
    assert (issue.path, issue.source) == ("policy.temperature", "override 'policy.temperature=0'")


def test_broken_defaults_reference(write):
    issue = one(write("s.yaml", "# a base\ndefaults: [missing.yaml]\n" + GOOD))
    assert issue.path == "defaults.0" and issue.source.endswith("s.yaml:2")
    assert issue.message.startswith("base spec 'missing.yaml' not found")


def test_cyclic_defaults(write):
    write("a.yaml", "defaults: [b.yaml]\nname: a\n")
    path = write("b.yaml", "defaults: [a.yaml]\nname: b\n")
    issue = one(path)
    assert issue.path == "defaults.0" and issue.message.startswith("cyclic defaults:")
    assert "a.yaml -> " in issue.message and issue.message.count("b.yaml") == 3
    assert issue.message.endswith("remove 'b.yaml' here") and issue.source.endswith("a.yaml:1")


def test_contradictions_reported_together(write):
    found = problems(write("s.yaml", GOOD + "scaffold: {mode: none, cards: [outcome], privileged: true}\n"))
    assert set(found) == {"scaffold.cards", "scaffold.privileged"}
    assert "mode 'none' builds no scaffold" in found["scaffold.cards"].message


def test_probe_fraction_needs_rollouts_on_both_sides(write):
    issue = one(write("s.yaml", GOOD + "trainer: {group_size: 2}\nscaffold: {probe_fraction: 0.2}\n"))
    assert issue.path == "scaffold.probe_fraction"
    # A group of two leaves one fraction, said as one value (issue 59, item 5: it read "between 0.5 and 0.5").
    assert issue.message == (
        "0.2 of trainer.group_size 2 gives 0 probe rollouts; it must leave at least one rollout with and one "
        "without the scaffold: use 0.5, or 0 to turn probes off"
    )
    for group, fraction, probes, between in ((3, 0.1, 0, "0.333 and 0.667"), (8, 0.95, 8, "0.125 and 0.875")):
        spec = GOOD + f"trainer: {{group_size: {group}}}\nscaffold: {{probe_fraction: {fraction}}}\n"
        assert one(write("s.yaml", spec)).message == (
            f"{fraction} of trainer.group_size {group} gives {probes} probe rollouts; it must leave at least one "
            f"rollout with and one without the scaffold: use a fraction between {between}, or 0 to turn probes off"
        )


def test_static_needs_a_bank_and_expert_needs_privilege(write):
    found = problems(write("s.yaml", GOOD + "scaffold: {mode: static, cards: [outcome, expert]}\n"))
    assert set(found) == {"scaffold.initial_bank", "scaffold.cards"}


def test_llm_model_needs_provider_prefix(write):
    issue = one(write("s.yaml", GOOD + "reviser: {kind: llm, llm: {model: gpt-4o}}\n"))
    assert issue.path == "reviser.llm.model" and "no provider prefix" in issue.message


def test_empty_file(write):
    issue = one(write("s.yaml", "# nothing here\n"))
    assert issue.message.startswith("the file is empty")


def test_yaml_syntax_error_reports_line(write):
    issue = one(write("s.yaml", "name: x\nenvironment:\n  kind: twx\n   bad: [1, 2\n"))
    assert issue.message.startswith("YAML syntax error at line 4")


def test_non_mapping_top_level(write):
    issue = one(write("s.yaml", "- name: x\n- environment: twx\n"))
    assert issue.message.startswith("the top level is a list, not a mapping")


def test_unresolvable_interpolation(write):
    issue = one(write("s.yaml", GOOD + "eval: {num_tasks: '${environment.nope}'}\n"))
    assert issue.message.startswith("cannot resolve ${environment.nope}: Interpolation key")
    assert "${oc.env:NAME,default}" in issue.message and issue.source.endswith("s.yaml:3")


def test_every_bad_interpolation_is_reported_with_its_line(write, monkeypatch):
    monkeypatch.delenv("PATS_NOT_SET", raising=False)
    found = problems(
        write(
            "s.yaml",
            GOOD + "trainer:\n  steps: ${nope.a}\n  group_size: ${oc.env:PATS_NOT_SET}\n  seed_offset: 3\n",
        ),
        ["eval.num_tasks=${trainer.nothing}"],
    )
    assert {p: i.source.rsplit("/", 1)[-1] for p, i in found.items()} == {
        "trainer.steps": "s.yaml:4",
        "trainer.group_size": "s.yaml:5",
        "eval.num_tasks": "override 'eval.num_tasks=${trainer.nothing}'",
    }
    assert "PATS_NOT_SET" in found["trainer.group_size"].message


def test_yaml_cannot_construct_python_objects(write):
    issue = one(write("s.yaml", "name: !!python/object/apply:os.system ['echo hi']\n"))
    assert issue.message.startswith("YAML syntax error") or "cannot read YAML" in issue.message


def test_all_problems_reported_at_once(write):
    found = problems(
        write(
            "s.yaml",
            "name: 'bad name'\nenvironment: {kind: twx, game: zork}\n"
            "trainer: {steps: 0, lr: abc}\nlogging: {wandb: maybe}\n",
        )
    )
    assert set(found) == {"name", "environment.game", "trainer.steps", "trainer.lr", "logging.wandb"}


def test_cli_exit_code_2_and_no_traceback(write):
    path = write("s.yaml", GOOD + "trainer: {stpes: 3, group_size: 1}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pats", "validate", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert (
        "trainer.stpes: unknown key" in proc.stderr and "trainer.group_size: 1 is out of range" in proc.stderr
    )


@pytest.mark.parametrize("kind", ["webshop", "search_qa"])
def test_free_text_environments_refuse_score_mode(write, kind):
    env = (
        "{kind: webshop}"
        if kind == "webshop"
        else (
            "{kind: search_qa, train_data: [a.jsonl], eval_data: [b.jsonl], retriever: {kind: bm25, corpus: c.jsonl}}"
        )
    )
    issue = one(write("s.yaml", f"name: x\nenvironment: {env}\npolicy: {{action: score}}\n"))
    assert issue.path == "policy.action" and "use action: generate" in issue.message


def test_an_override_that_changes_a_sections_kind_says_what_it_drops(repo):
    import pytest

    from pats.errors import SpecNotice
    from pats.spec import load_spec

    with pytest.warns(SpecNotice, match=r"trainer: backend verl -> local \(override\).*steps=150.*lr=1e-06"):
        spec = load_spec(repo / "experiments/alfworld/pats.yaml", ["trainer.backend=local"])
    assert spec.trainer.steps != 150  # dropped, as announced


def test_a_setting_of_another_kind_says_which_kind_uses_it(write):
    verl = GOOD + "trainer: {backend: verl, on_env_fault: train}\n"
    issue = one(write("s.yaml", verl))
    assert issue.path == "trainer.on_env_fault"
    assert "applies to trainer backend local only" in issue.message and "remove it" in issue.message
    issue = one(write("j.yaml", GOOD + "judge: {kind: stats, rubric: judges/twx.yaml}\n"))
    assert "applies to judge kind llm only" in issue.message


def test_verl_refuses_the_local_update_speed_option(write):
    spec = (
        "name: x\nenvironment: {kind: twx, max_turns: 2}\n"
        "policy: {action: generate, lora: {top_layers: 4}}\ntrainer: {backend: verl}\n"
    )
    issue = one(write("s.yaml", spec))
    assert issue.path == "policy.lora.top_layers" and "every layer" in issue.message


def test_an_override_whose_value_names_a_yaml_file_is_an_override(write, capsys, repo):
    from pats.cli.main import main

    llm = "judge.llm.model=openai/gpt-4o-mini"
    assert main(["show", str(repo / "experiments/quickstart.yaml"), "judge.kind=llm", llm,
                 f"judge.rubric={repo / 'judges/twx.yaml'}"]) == 0  # fmt: skip
    assert f"rubric: {repo / 'judges/twx.yaml'}" in capsys.readouterr().out


def test_a_verl_episode_that_cannot_fit_its_response_budget_is_refused_with_the_numbers(write):
    spec = (
        "name: x\nenvironment: {kind: alfworld, max_turns: 50}\n"
        "policy: {action: generate, max_new_tokens: 256}\ntrainer: {backend: verl, max_response_tokens: 16384}\n"
    )
    issue = one(write("s.yaml", spec))
    assert issue.path == "trainer.max_response_tokens"
    # The policy's outputs count: 50 x (256 + 1) + 49 x 248 = 25002; observations alone (12400) fit.
    assert "50 turns of alfworld" in issue.message and "25002" in issue.message and "16384" in issue.message
    assert "raise trainer.max_response_tokens to at least 25002" in issue.message
    assert "lower policy.max_new_tokens to 83" in issue.message  # 50 x 84 + 49 x 248 = 16352 fits
    assert "lower environment.max_turns to 32" in issue.message  # 32 x 257 + 31 x 248 = 15912 fits
    assert load_spec(write("r.yaml", spec.replace("16384", "25002"))).trainer.max_response_tokens == 25002
    assert load_spec(write("n.yaml", spec.replace("256", "83"))).policy.max_new_tokens == 83
    short = load_spec(write("t.yaml", spec.replace("max_turns: 50", "max_turns: 32")))
    assert short.environment.max_turns == 32
    too_long = spec.replace("max_turns: 50", "max_turns: 33")
    assert one(write("u.yaml", too_long)).path == "trainer.max_response_tokens"


def test_a_scaffold_placed_in_every_turn_counts_in_every_turn_of_a_verl_budget(write):
    spec = (
        "name: x\nenvironment: {kind: twx, max_turns: 4}\nscaffold: {budget: {view_tokens: 100}}\n"
        "policy: {action: generate, max_new_tokens: 16}\ntrainer: {backend: verl, max_response_tokens: 700}\n"
    )
    assert load_spec(write("s.yaml", spec)).scaffold.placement == "system"  # 4 x 17 + 3 x 180 = 608
    turn = spec.replace("budget:", "placement: turn, budget:")
    issue = one(write("t.yaml", turn))  # 4 x 17 + 3 x (180 + 100) = 908
    assert issue.path == "trainer.max_response_tokens" and "908 tokens" in issue.message
    assert "scaffold.placement turn" in issue.message


def test_a_verl_prompt_that_cannot_hold_the_scaffold_view_and_first_observation_is_refused(write):
    spec = (
        "name: x\nenvironment: {kind: twx, max_turns: 2}\nscaffold: {budget: {view_tokens: 400}}\n"
        "policy: {action: generate, max_new_tokens: 16}\ntrainer: {backend: verl, max_prompt_tokens: 512}\n"
    )
    issue = one(write("s.yaml", spec))
    assert issue.path == "trainer.max_prompt_tokens" and "580 tokens" in issue.message  # 400 + 180
    assert "cuts a longer prompt from the left" in issue.message and "at least 836" in issue.message
    no_scaffold = spec.replace("scaffold: {budget: {view_tokens: 400}}", "scaffold: {mode: none}")
    assert load_spec(write("none.yaml", no_scaffold)).scaffold.mode == "none"  # no view to hold


def test_verl_refuses_a_history_window_and_local_leaves_it_to_the_environment(write):
    verl = "name: x\nenvironment: {kind: twx, max_turns: 2, history_window: 2}\npolicy: {action: generate}\n"
    issue = one(write("s.yaml", verl + "trainer: {backend: verl}\n"))
    assert issue.path == "environment.history_window"
    assert "one growing chat" in issue.message and "remove history_window" in issue.message
    unset = load_spec(write("u.yaml", verl.replace(", history_window: 2", "") + "trainer: {backend: verl}\n"))
    assert unset.environment.history_window is None
    local = load_spec(write("l.yaml", verl.replace(", history_window: 2", "")))
    assert local.environment.window == 2  # the environment's own default on the local backend
    assert load_spec(write("w.yaml", verl)).environment.window == 2


def test_the_verl_token_budgets_are_trainer_settings_and_the_old_place_says_so(write):
    import pytest

    from pats.errors import SpecNotice

    old = "name: x\nenvironment: {kind: twx, max_turns: 2}\npolicy: {action: generate, max_response_tokens: 2048}\n"
    with pytest.warns(SpecNotice, match=r"policy.max_response_tokens \(.*s.yaml:3\) is now trainer.*moved"):
        spec = load_spec(write("s.yaml", old + "trainer: {backend: verl}\n"))
    assert spec.trainer.max_response_tokens == 2048  # nothing lost
    with pytest.warns(SpecNotice, match="only the verl backend reads it, so it is dropped"):
        assert load_spec(write("o.yaml", old)).trainer.backend == "local"
    local = "trainer: {backend: local, max_prompt_tokens: 512}\n"
    issue = one(write("l.yaml", GOOD + local))
    assert issue.path == "trainer.max_prompt_tokens" and "backend verl only" in issue.message


def test_a_malformed_interpolation_is_reported_with_its_line(write):
    found = problems(write("s.yaml", GOOD + "trainer: {steps: '${trainer.'}\neval: {num_tasks: '${a b}'}\n"))
    assert {p: i.source.rsplit("/", 1)[-1] for p, i in found.items()} == {
        "trainer.steps": "s.yaml:3",
        "eval.num_tasks": "s.yaml:4",
    }
