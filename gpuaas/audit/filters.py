"""Which runs an auditor asked for, and which part of that the history source can answer itself.

Only `--reaction` is pushed down as a label selector (`gpuaas.io/reaction=X`): the templates set
that label statically, so the server's answer is exact. The tenant and workload labels are copied
from the Sensor's parameters (the step resolves the tenant itself and never trusts the hint, and
the on-idle template leaves both empty because one alert group spans workloads), so filtering on
them server-side would silently drop runs. Those filters, the namespace, the outcome and the time
window are applied to the parsed runs, where the audit record is the authority.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuaas.audit.run import REACTION_LABEL, Run, parse_time

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_AGE = timedelta(days=36500)
"""The oldest age `--since`/`--until` take: 100 years (a larger one overflowed datetime arithmetic)."""
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


class FilterError(ValueError):
    """A filter value the user must correct (the message names the option)."""


def parse_moment(option: str, value: str, now: datetime | None = None) -> datetime:
    """`--since/--until` value: RFC 3339 ('2026-12-01T08:00:00Z') or an age ('24h', '7d', '90m')."""
    now = now or datetime.now(UTC)
    if not value.strip():
        raise FilterError(f"{option}: expected RFC 3339 (2026-12-01T08:00:00Z) or an age such as 90m, 24h, 7d; "
                          "found an empty value")
    relative = _RELATIVE.match(value)
    if relative:
        seconds = float(relative.group(1)) * _SECONDS[relative.group(2)]
        if not 0 < seconds <= MAX_AGE.total_seconds():
            raise FilterError(f"{option}: expected an age above 0 and at most {MAX_AGE.days}d (100 years), "
                              f"found {value!r}")
        return now - timedelta(seconds=seconds)
    parsed = parse_time(value.strip())
    if parsed is None:
        raise FilterError(f"{option}: expected RFC 3339 (2026-12-01T08:00:00Z) or an age such as 90m, 24h, 7d; "
                          f"found {value!r}")
    return parsed


@dataclass(frozen=True)
class RunFilter:
    since: datetime | None = None
    until: datetime | None = None
    tenant: str | None = None
    namespace: str | None = None
    workload: str | None = None
    reaction: str | None = None
    outcome: str | None = None

    def label_selector(self) -> str | None:
        """The part the history source answers itself (see module docstring)."""
        if self.reaction is None:
            return None
        if not _LABEL_VALUE.match(self.reaction) or len(self.reaction) > 63:
            raise FilterError(f"--reaction: expected a label value (letters, digits, '-', '_', '.'), "
                              f"found {self.reaction!r}")
        return f"{REACTION_LABEL}={self.reaction}"

    def matches(self, run: Run) -> bool:
        """Whether a parsed run is wanted. A run without a start time is kept by time filters:
        an auditor must see a run whose timing is broken rather than lose it."""
        started = run.started_at
        if self.since and started and started < self.since:
            return False
        if self.until and started and started > self.until:
            return False
        if self.reaction and run.reaction != self.reaction:
            return False
        if run.reaction == "sweep" and run.outcome == "no-op" and self.reaction != "sweep":
            # A catch-up pass that found nothing to do (one every 2 minutes): listed with --reaction sweep only.
            return False
        if self.outcome and self.outcome != run.outcome and self.outcome not in {s.outcome for s in run.children}:
            return False
        if self.tenant and self.tenant not in run.tenants:
            return False
        if self.namespace and self.namespace not in run.namespaces:
            return False
        return not (self.workload and self.workload not in run.workloads)
