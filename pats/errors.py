"""The error tree of pats. Every message says what went wrong and what to write or do instead.

The CLI prints these without a traceback (exit code 2 for spec problems, 3 for missing
prerequisites, 1 for everything else); anything outside this tree is a bug and keeps its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


class PatsError(Exception):
    """Base of every error pats raises on purpose."""

    exit_code = 1


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec: where (dotted YAML path), what, and what to write instead."""

    path: str
    message: str
    source: str = ""  # file (and line) or "override 'a.b=c'" the problem came from

    def render(self) -> str:
        where = self.path or "<top level>"
        origin = f" [{self.source}]" if self.source else ""
        return f"{where}: {self.message}{origin}"


class SpecError(PatsError):
    """A spec that cannot be loaded or validated. Holds every problem found, not just the first."""

    exit_code = 2

    def __init__(self, issues: list[SpecIssue] | SpecIssue | str, *, file: str = ""):
        if isinstance(issues, str):
            issues = [SpecIssue("", issues)]
        elif isinstance(issues, SpecIssue):
            issues = [issues]
        self.issues = list(issues)
        self.file = file
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.issues)
        head = f"{self.file}: " if self.file else ""
        head += f"{n} problem{'s' if n != 1 else ''} in the spec"
        return head + "\n" + "\n".join("  " + issue.render() for issue in self.issues)


class UsageError(PatsError):
    """A command's flags that cannot run (they conflict, or name nothing to run), where no spec is
    involved: printed as it is, with the exit code of a spec problem."""

    exit_code = 2


def install_hint(extras: str) -> str:
    """How to install an extra of pats: from a clone, since the package named `pats` on the package index
    is an unrelated project (installing an extra by that name would install the other one)."""
    return f"`pip install -e '.[{extras}]'` in a clone of pats (the `pats` on PyPI is another project)"


class PrerequisiteError(PatsError):
    """Something the run needs is not installed or not present (a package, data, Java, a GPU)."""

    exit_code = 3


class BackendError(PatsError):
    """The policy backend failed (model load, rollout, update)."""


class JudgeError(PatsError):
    """A judge or reviser could not produce a usable answer (after its retries)."""


class EnvironmentFault(PatsError):
    """An environment failed while playing an episode (e.g. its process died)."""


class TrainingError(PatsError):
    """Training cannot go on (non-finite updates k in a row, a full disk); the last checkpoint is intact."""


class RunInterrupted(PatsError):
    """A signal asked the run to stop: it stopped at a step boundary, checkpointed and resumable."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum  # the shell's convention for a process ended by a signal

    def __reduce__(self):
        # pickled as (message, signum): a cell stopped in a Ray worker reaches the sweep as itself, where
        # the default (the message alone) could not be unpickled and the cell was recorded as failed
        return (type(self), (str(self), self.signum))


class SpecNotice(UserWarning):
    """Something in a spec that loads but may not be what its author meant (e.g. an override that
    changes a section's kind and so drops that section's other settings)."""
