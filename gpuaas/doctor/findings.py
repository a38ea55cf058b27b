"""What the doctor reports: findings (ok, warn, blocks), each with the fix, and the report's exit code."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    """Degraded: the product reacts, but something it reports or decides on is missing or weaker."""
    BLOCKS = "blocks"
    """The product cannot react: a component or grant is missing, or an alert cannot fire or reach the webhook."""


SEVERITY = {Status.OK: 0, Status.WARN: 1, Status.BLOCKS: 2}


@dataclass(frozen=True)
class Finding:
    """One checked prerequisite: what was found and, unless ok, the exact change that fixes it."""

    check: str
    """Stable id (`kueue.namespaces`, `tenant:team-a`): what tests and scripts select on."""
    status: Status
    summary: str
    """What was found, one sentence."""
    fix: str = ""
    """The exact change (commands, a patch) that makes the finding ok; empty when ok."""
    details: tuple[str, ...] = ()
    """The evidence, one line each."""

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "status": str(self.status), "summary": self.summary, "fix": self.fix,
                "details": list(self.details)}


@dataclass(frozen=True)
class Skipped:
    """A check that could not judge: its input was not readable (why names it)."""

    check: str
    why: str


def ok(check: str, summary: str, *details: str) -> Finding:
    return Finding(check, Status.OK, summary, "", tuple(details))


def warn(check: str, summary: str, fix: str, *details: str) -> Finding:
    return Finding(check, Status.WARN, summary, fix, tuple(details))


def blocks(check: str, summary: str, fix: str, *details: str) -> Finding:
    return Finding(check, Status.BLOCKS, summary, fix, tuple(details))


@dataclass
class Report:
    """Every finding, what could not be checked (and why), and the probe's outcome if it ran."""

    findings: list[Finding] = field(default_factory=list)
    not_checked: dict[str, str] = field(default_factory=dict)
    """check id -> why it was not judged (its input could not be read: the reason is in `unreadable`)."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """what -> why it could not be read (permissions, an API that is not there, a URL that does not answer)."""
    probe_requested: bool = False

    @property
    def worst(self) -> Status:
        return max((f.status for f in self.findings), key=SEVERITY.__getitem__, default=Status.OK)

    @property
    def exit_code(self) -> int:
        """0 only when nothing blocks (warnings do not fail the command)."""
        return 1 if self.worst == Status.BLOCKS else 0

    def by_id(self) -> dict[str, Finding]:
        return {f.check: f for f in self.findings}

    def not_ok(self) -> dict[str, Status]:
        return {f.check: f.status for f in self.findings if f.status != Status.OK}

    def to_dict(self) -> dict[str, Any]:
        counts = {str(s): sum(1 for f in self.findings if f.status == s) for s in Status}
        return {"status": str(self.worst), "exitCode": self.exit_code, "counts": counts,
                "findings": [f.to_dict() for f in self.findings], "notChecked": dict(self.not_checked),
                "unreadable": dict(self.unreadable), "probe": "run" if self.probe_requested else "not run"}
