"""One Alertmanager aggregation group, as Alertmanager 0.25 runs it (dispatch/dispatch.go,
notify/notify.go `DedupStage.needsUpdate`, nflog/nflog.go), for the route gpuaas renders:
group_by `[alertname, namespace]`, `send_resolved: false`.

- The group is created by its first alert and flushed `group_wait` later, then every
  `group_interval` (the timer is reset at each flush, so flushes are `group_interval` apart).
- A flush notifies when the notification log has no entry for the group and something fires; when
  a firing alert is not in the log's last notification (a new alert, or one that fired again after
  the log last changed); when nothing fires any more but the log still lists firing alerts (that
  notification carries no firing alert, so with `send_resolved: false` the webhook receives
  nothing: only the log is cleared); or when the last notification is more than
  `repeat_interval` old. The log's timestamp is written after the webhook answers, a little after
  the flush that sent it, so a flush exactly `repeat_interval` later finds it too recent: with
  repeat 1h and group_interval 5m, a still-firing group is re-sent every 65 minutes.
- Resolved alerts leave the group at the next flush; a group with no alert left is deleted (the
  dispatcher's cleanup runs every 30 s; here it is immediate). A later alert creates a new group,
  which waits `group_wait` again.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NotificationTimings:
    """The route's timings (from the rendered AlertmanagerConfig)."""

    group_wait: float
    group_interval: float
    repeat_interval: float
    group_by: str = "namespace"
    """How alerts are grouped: "namespace" (the rendered route), "pod" or "all"."""


@dataclass
class AlertGroup:
    """The alerts of one `(alertname, namespace)` group and its notification log entry."""

    key: str
    timings: NotificationTimings
    firing: set[int] = field(default_factory=set)
    resolved: int = 0
    exists: bool = False
    generation: int = 0
    logged_at: float | None = None
    logged_firing: frozenset[int] | None = None
    """The firing alerts of the last notification (None: no log entry yet)."""

    def fire(self, alert: int, when: float) -> float | None:
        """An alert starts firing; returns the time of the group's first flush if this creates it."""
        self.firing.add(alert)
        if self.exists:
            return None
        self.exists = True
        self.generation += 1
        return when + self.timings.group_wait

    def resolve(self, alert: int) -> None:
        if alert in self.firing:
            self.firing.discard(alert)
            self.resolved += 1

    def needs_update(self, now: float) -> bool:
        """DedupStage.needsUpdate for this group at a flush."""
        if self.logged_firing is None:
            return bool(self.firing)
        if not self.firing <= self.logged_firing:
            return True
        if not self.firing:
            return bool(self.logged_firing)
        return self.logged_at is not None and now - self.logged_at > self.timings.repeat_interval

    def flush(self, now: float) -> tuple[frozenset[int], float | None]:
        """Flush at `now`: (the firing alerts delivered to the webhook, possibly none; the next flush
        time, or None when the group is deleted)."""
        delivered: frozenset[int] = frozenset()
        if self.needs_update(now):
            self.logged_firing = frozenset(self.firing)
            self.logged_at = now
            delivered = self.logged_firing
        self.resolved = 0
        if not self.firing:
            self.exists = False
            return delivered, None
        return delivered, now + self.timings.group_interval
