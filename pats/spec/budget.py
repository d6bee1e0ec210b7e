"""Token budgets of a verl spec: what one episode puts into verl's prompt and response.

verl trains one token sequence per episode, so pats' verl loop plays an episode as one growing chat:
the first prompt (system: instructions, task, scaffold view; user: the first observation) must fit
`trainer.max_prompt_tokens`, and everything after it fits `trainer.max_response_tokens`: per turn the
policy's output (up to `policy.max_new_tokens`, plus the one end-of-turn token the loop adds to a turn
cut at that limit) and, between turns, the next observation (`TURN_TOKENS` of the environment: the
90th percentile along expert episodes plus the chat markers, bench/perf/turn_tokens.py), with the scaffold
view again in every turn under `scaffold.placement: turn`. A policy that
writes its whole allowance every turn must still fit: otherwise the loop ends the episode early
(truncated) and its reward is lost. No history window applies (verl refuses `history_window`); the
local backend cuts nothing, so it has no token budget to check.

The prompt check is a lower bound: the scaffold view and the first observation are counted, the
instructions and task text (a few hundred tokens at most) are not.

The spec's models build the `EpisodeBudget` (pats.spec.models.episode_budget) and call `budget_issues`
while they validate, so this module takes plain values and imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

CLOSE_TOKENS = 1  # the end-of-turn token the verl loop appends to a turn cut at max_new_tokens


@dataclass(frozen=True)
class EpisodeBudget:
    """The most tokens one verl episode of a spec can take, by part."""

    environment: str  # environment.kind, named in the messages
    turns: int
    action_tokens: int  # per turn: policy.max_new_tokens + CLOSE_TOKENS
    observation_tokens: int  # per observation after the first prompt: TURN_TOKENS (+ the view per turn)
    view_tokens: int  # the scaffold view in the first prompt (0 without a scaffold)
    first_observation_tokens: int  # the first observation (in the prompt): the environment's TURN_TOKENS

    @property
    def response(self) -> int:
        """max_turns outputs and the max_turns - 1 observations between them."""
        return self.turns * self.action_tokens + (self.turns - 1) * self.observation_tokens

    @property
    def prompt(self) -> int:
        """The scaffold view and the first observation (instructions and task come on top)."""
        return self.view_tokens + self.first_observation_tokens

    def max_new_tokens_within(self, response_tokens: int) -> int:
        """The largest policy.max_new_tokens whose episodes fit `response_tokens` (0: none does)."""
        room = response_tokens - (self.turns - 1) * self.observation_tokens
        return max(0, room // self.turns - CLOSE_TOKENS)

    def turns_within(self, response_tokens: int) -> int:
        """The most turns that fit `response_tokens` at this spec's output length (at least 1)."""
        per_turn = self.action_tokens + self.observation_tokens  # the last turn has no observation after it
        return max(1, (response_tokens + self.observation_tokens) // per_turn)


def budget_issues(
    b: EpisodeBudget, max_prompt_tokens: int, max_response_tokens: int
) -> list[tuple[str, str]]:
    """(YAML path, message) for each verl token budget (trainer.max_prompt_tokens,
    trainer.max_response_tokens) that episodes of budget `b` can overrun."""
    out = []
    per_turn_view = (
        ", each with the scaffold view: scaffold.placement turn"
        if b.observation_tokens > b.first_observation_tokens
        else ""
    )
    if b.response > max_response_tokens:
        fixes = [f"raise trainer.max_response_tokens to at least {b.response}"]
        if b.max_new_tokens_within(max_response_tokens) >= 1:
            fixes.append(f"lower policy.max_new_tokens to {b.max_new_tokens_within(max_response_tokens)}")
        fixes.append(f"lower environment.max_turns to {b.turns_within(max_response_tokens)}")
        out.append(
            (
                "trainer.max_response_tokens",
                f"verl keeps an episode as one chat: {b.turns} turns of {b.environment} take up to "
                f"{b.action_tokens} tokens of the policy's output each (policy.max_new_tokens "
                f"{b.action_tokens - CLOSE_TOKENS}, plus the token that closes a cut turn) and "
                f"{b.turns - 1} observations of about {b.observation_tokens} tokens between them "
                f"(bench/perf/turn_tokens.py{per_turn_view}): {b.response} tokens, more than max_response_tokens "
                f"{max_response_tokens}, so a policy that writes long outputs is cut mid-episode "
                f"and loses its reward; {', '.join(fixes[:-1])} or {fixes[-1]}",
            )
        )
    if b.prompt > max_prompt_tokens:
        out.append(
            (
                "trainer.max_prompt_tokens",
                f"the first prompt holds the scaffold view (scaffold.budget.view_tokens {b.view_tokens}) "
                f"and the first {b.environment} observation (about {b.first_observation_tokens} tokens) before the "
                f"instructions and the task: {b.prompt} tokens, more than max_prompt_tokens "
                f"{max_prompt_tokens}, and verl cuts a longer prompt from the left (the scaffold "
                f"first); raise trainer.max_prompt_tokens to at least {b.prompt + 256} or lower "
                "scaffold.budget.view_tokens",
            )
        )
    return out
