"""The reviser benchmark's tables: one contender's rows, or two side by side on the same bundles.

Per bundle: valid at the first answer (`ok`, `refused`, or `unparsed`) and after the retry, edits valid
of proposed, the kinds of edit (A/U/D for ADD/UPDATE/DELETE) beside the rules reviser's and their
agreement for an accepted set, prompt and completion tokens, seconds, USD, and the rules that refused
the set (or why the answer could not be read). Then the totals of each contender (two lines).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pats.reviser.bench import summarize
from pats.reviser.score import BundleScore

NAME = 46  # characters of a bundle's name shown


def usd_of(row: BundleScore, model: str | None) -> float | None:
    """The row's tokens in USD by LiteLLM's offline cost map (0 without calls; None: not priced)."""
    if not row.calls:
        return 0.0
    if model is None or row.llm_tokens != row.prompt_tokens + row.completion_tokens:
        return None
    from pats.lm.caller import usd_cost

    return usd_cost(model, row.prompt_tokens, row.completion_tokens)


def first(row: BundleScore) -> str:
    return "unparsed" if not row.parsed else ("ok" if row.set_valid else "refused")


def kinds(row: BundleScore) -> str:
    """`AA/AD 0.50`: its kinds of edit, the rules reviser's, and their agreement (accepted sets only)."""
    ours = "".join(op[0] for op in row.ops) or "-"
    theirs = "".join(op[0] for op in row.rules_ops) or "-"
    agreement = f" {row.kinds_as_rules:.2f}" if row.kinds_as_rules is not None else ""
    return f"{ours}/{theirs}{agreement}"


def money(usd: float | None) -> str:
    return "-" if usd is None else f"{usd:.4f}"


def refused_by(row: BundleScore) -> str:
    if not row.parsed:
        return row.error[:60]
    return ",".join(sorted(set(row.rules)))


def table(label: str, rows: Sequence[BundleScore], model: str | None) -> str:
    """One contender: a line per bundle, then its totals."""
    head = (
        f"{'bundle':{NAME}} {'mode':8} {'first':8} {'retry':5} {'edits':>5} {'kinds/rules':>14} "
        f"{'prompt':>7} {'compl':>6} {'s':>6} {'USD':>7}  refused by"
    )
    lines = [f"== {label}", head]
    for r in rows:
        lines.append(
            f"{r.bundle[:NAME]:{NAME}} {r.mode:8} {first(r):8} {'ok' if r.valid_after_retry else '-':5} "
            f"{f'{r.valid_edits}/{r.proposed}':>5} {kinds(r):>14} {r.prompt_tokens:7} {r.completion_tokens:6} "
            f"{r.seconds:6.1f} {money(usd_of(r, model)):>7}  {refused_by(r)}"
        )
    lines.append(totals(label, rows, model))
    return "\n".join(lines)


def side_by_side(
    a: tuple[str, Sequence[BundleScore], str | None], b: tuple[str, Sequence[BundleScore], str | None]
) -> str:
    """Two contenders (label, rows, model) on the same bundles: a line per bundle, then their totals."""
    (a_label, a_rows, a_model), (b_label, b_rows, b_model) = a, b
    if [r.bundle for r in a_rows] != [r.bundle for r in b_rows]:
        raise ValueError("side_by_side compares rows of the same bundles, in the same order")

    def cell(r: BundleScore, model: str | None) -> str:
        retry = "ok" if r.valid_after_retry else "-"
        tokens = f"{r.prompt_tokens}+{r.completion_tokens}"
        return f"{first(r):8} {retry:5} {kinds(r):>14} {tokens:>10} {r.seconds:6.1f} {money(usd_of(r, model)):>7}"

    width = len(cell(a_rows[0], a_model)) if a_rows else 40
    lines = [
        f"{'':{NAME}} {'':8} | A: {a_label[: width - 3]:{width - 3}} | B: {b_label[: width - 3]}",
        f"{'bundle':{NAME}} {'mode':8} | "
        + " | ".join(
            f"{'first':8} {'retry':5} {'kinds/rules':>14} {'tokens':>10} {'s':>6} {'USD':>7}" for _ in "ab"
        ),
    ]
    for ra, rb in zip(a_rows, b_rows, strict=True):
        lines.append(f"{ra.bundle[:NAME]:{NAME}} {ra.mode:8} | {cell(ra, a_model)} | {cell(rb, b_model)}")
    lines.append("A " + totals(a_label, a_rows, a_model))
    lines.append("B " + totals(b_label, b_rows, b_model))
    return "\n".join(lines)


def totals(label: str, rows: Sequence[BundleScore], model: str | None) -> str:
    s = summarize(rows, model)
    n = s.bundles
    refusals = Counter(rule for r in rows for rule in r.rules)
    refused = ", ".join(f"{rule} x{k}" for rule, k in sorted(refusals.items(), key=lambda x: (-x[1], x[0])))
    usd = f"USD {s.usd:.4f}" if s.usd is not None else f"USD unknown ({s.usd_note})"
    kinds_text = (
        f"kinds of edit as the rules' {s.kinds_as_rules:.2f} over {s.kinds_as_rules_sets} accepted sets"
        if s.kinds_as_rules is not None
        else "no accepted set to compare kinds of edit"
    )
    return (
        f"{label}: valid at the first answer {s.sets_valid}/{n}, after the retry {s.sets_valid_after_retry}/{n} "
        f"(parsed {s.parsed}/{n}, edits valid {s.edits_valid}/{s.edits_proposed}); "
        f"refused by {refused or 'no rule'}; {kinds_text};\n  scaffold tokens {s.tokens_before} -> {s.tokens_after}; "
        f"{s.prompt_tokens} prompt + {s.completion_tokens} completion tokens over {s.calls} calls, "
        f"{s.seconds_per_call:.1f} s per {'call' if s.calls else 'bundle'}; {usd}"
    )
