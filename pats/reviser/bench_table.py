"""The reviser benchmark's tables: one contender's rows, or two side by side on the same bundles.

Per bundle: valid at the first answer (`ok`, `refused`, or `fault`: no answer could be used) and after
the retry, edits valid of proposed, the kinds of edit (A/U/D for ADD/UPDATE/DELETE) beside the rules
reviser's and their agreement for an accepted set ("-" for the rules reviser, the reference itself),
prompt and completion tokens, seconds, USD, the fault's kind (timeout, connection, server_error,
malformed, rate_limit, other; its whole text is the row's `error` in the result file) and the rules
that refused the set. Then the totals of each contender (two lines). A `model` of None is the rules
reviser's.

`pats reviser bench` prints the head first and each bundle's line as it is scored (`head`, `line`,
`pair`), after a `k/N` column of fixed width; `table` and `side_by_side` are the same lines at once.
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
    return "fault" if not row.parsed else ("ok" if row.set_valid else "refused")


def kinds(row: BundleScore, model: str | None) -> str:
    """`AA/AD 0.50`: its kinds of edit, the rules reviser's, and their agreement (accepted sets only);
    "-" for the rules reviser (model None), whose kinds are the reference."""
    if model is None:
        return "-"
    ours = "".join(op[0] for op in row.ops) or "-"
    theirs = "".join(op[0] for op in row.rules_ops) or "-"
    agreement = f" {row.kinds_as_rules:.2f}" if row.kinds_as_rules is not None else ""
    return f"{ours}/{theirs}{agreement}"


def money(usd: float | None) -> str:
    return "-" if usd is None else f"{usd:.4f}"


def fault(row: BundleScore) -> str:
    return row.fault or ("other" if not row.parsed else "-")  # a row written before `fault`: "other"


HEAD = (
    f"{'bundle':{NAME}} {'mode':8} {'first':8} {'retry':5} {'edits':>5} {'kinds/rules':>14} "
    f"{'prompt':>7} {'compl':>6} {'s':>6} {'USD':>7} {'fault':12}  refused by"
)


def head(label: str, progress: int = 0) -> str:
    """The title and column names of one contender's table; `progress`: the width of a `k/N` column."""
    return f"== {label}\n{'':{progress + 1}}{HEAD}" if progress else f"== {label}\n{HEAD}"


def line(r: BundleScore, model: str | None) -> str:
    """One bundle's row of one contender's table."""
    return (
        f"{r.bundle[:NAME]:{NAME}} {r.mode:8} {first(r):8} {'ok' if r.valid_after_retry else '-':5} "
        f"{f'{r.valid_edits}/{r.proposed}':>5} {kinds(r, model):>14} {r.prompt_tokens:7} {r.completion_tokens:6} "
        f"{r.seconds:6.1f} {money(usd_of(r, model)):>7} {fault(r):12}  {','.join(sorted(set(r.rules)))}"
    ).rstrip()


def table(label: str, rows: Sequence[BundleScore], model: str | None) -> str:
    """One contender: a line per bundle, then its totals."""
    return "\n".join([head(label), *(line(r, model) for r in rows), totals(label, rows, model)])


def cell(r: BundleScore, model: str | None) -> str:
    """One contender's part of a side-by-side row."""
    retry = "ok" if r.valid_after_retry else "-"
    tokens = f"{r.prompt_tokens}+{r.completion_tokens}"
    return (
        f"{first(r):8} {retry:5} {kinds(r, model):>14} {tokens:>10} {r.seconds:6.1f} "
        f"{money(usd_of(r, model)):>7} {fault(r):12}"
    )


CELL_HEAD = f"{'first':8} {'retry':5} {'kinds/rules':>14} {'tokens':>10} {'s':>6} {'USD':>7} {'fault':12}"


def pair_head(a_label: str, b_label: str, progress: int = 0) -> str:
    """The two title lines of a side-by-side table; `progress`: the width of a `k/N` column."""
    width = len(CELL_HEAD)
    indent = f"{'':{progress + 1}}" if progress else ""
    return (
        f"{indent}{'':{NAME}} {'':8} | A: {a_label[: width - 3]:{width - 3}} | B: {b_label[: width - 3]}\n"
        f"{indent}{'bundle':{NAME}} {'mode':8} | {CELL_HEAD} | {CELL_HEAD.rstrip()}"
    )


def pair(ra: BundleScore, rb: BundleScore, a_model: str | None, b_model: str | None) -> str:
    """One bundle's row of a side-by-side table."""
    return f"{ra.bundle[:NAME]:{NAME}} {ra.mode:8} | {cell(ra, a_model)} | {cell(rb, b_model)}".rstrip()


def side_by_side(
    a: tuple[str, Sequence[BundleScore], str | None], b: tuple[str, Sequence[BundleScore], str | None]
) -> str:
    """Two contenders (label, rows, model) on the same bundles: a line per bundle, then their totals."""
    (a_label, a_rows, a_model), (b_label, b_rows, b_model) = a, b
    if [r.bundle for r in a_rows] != [r.bundle for r in b_rows]:
        raise ValueError("side_by_side compares rows of the same bundles, in the same order")
    lines = [pair_head(a_label, b_label)]
    lines += [pair(ra, rb, a_model, b_model) for ra, rb in zip(a_rows, b_rows, strict=True)]
    lines.append("A " + totals(a_label, a_rows, a_model))
    lines.append("B " + totals(b_label, b_rows, b_model))
    return "\n".join(lines)


def counted(things: Counter[str]) -> str:
    """`a x2, b x1`: most first, then by name."""
    return ", ".join(f"{name} x{k}" for name, k in sorted(things.items(), key=lambda x: (-x[1], x[0])))


def totals(label: str, rows: Sequence[BundleScore], model: str | None) -> str:
    s = summarize(rows, model)
    n = s.bundles
    refused = counted(Counter(rule for r in rows for rule in r.rules))
    faults = Counter(fault(r) for r in rows if not r.parsed)
    usd = f"USD {s.usd:.4f}" if s.usd is not None else f"USD unknown ({s.usd_note})"
    if model is None:
        kinds_text = "the reference of the kinds of edit"
    elif s.kinds_as_rules is not None:
        kinds_text = (
            f"kinds of edit as the rules' {s.kinds_as_rules:.2f} over {s.kinds_as_rules_sets} accepted sets"
        )
    else:
        kinds_text = "no accepted set to compare kinds of edit"
    return (
        f"{label}: valid at the first answer {s.sets_valid}/{n}, after the retry {s.sets_valid_after_retry}/{n} "
        f"(parsed {s.parsed}/{n}, edits valid {s.edits_valid}/{s.edits_proposed}); "
        f"faults {n - s.parsed}/{n}{f' ({counted(faults)})' if faults else ''}; "
        f"refused by {refused or 'no rule'}; {kinds_text};\n  scaffold tokens, summed over the {n} bundles, "
        f"{s.tokens_before} -> {s.tokens_after}; "
        f"{s.prompt_tokens} prompt + {s.completion_tokens} completion tokens over {s.calls} calls, "
        f"{s.seconds_per_call:.1f} s per {'call' if s.calls else 'bundle'}; {usd}"
    )
