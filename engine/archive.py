"""The run archive: every finished Workflow, stored as Argo's workflow archive stores it.

Argo keeps archived workflows in `argo_archived_workflows` (the full Workflow JSON) plus a labels
table so history can be searched by label. The local engine writes the same two tables
(ARCHITECTURE section 6) into SQLite, so `gpuaas audit --archive FILE` reads the demo's history the
same way it reads a cluster's.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS archived_workflows (
  uid TEXT PRIMARY KEY, name TEXT, namespace TEXT, phase TEXT,
  started_at TEXT, finished_at TEXT, workflow TEXT
);
CREATE TABLE IF NOT EXISTS archived_workflows_labels (
  uid TEXT, key TEXT, value TEXT, PRIMARY KEY (uid, key)
);
CREATE INDEX IF NOT EXISTS archived_workflows_started ON archived_workflows (started_at);
CREATE INDEX IF NOT EXISTS archived_workflows_labels_kv ON archived_workflows_labels (key, value);
"""


class RunArchive:
    """SQLite archive of finished Workflows; safe to share between executor threads."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)
        self._db.executescript(SCHEMA)
        self._db.commit()

    def store(self, workflow: dict[str, Any]) -> None:
        """Archive one Workflow (insert or replace by uid), with its labels."""
        metadata = workflow.get("metadata") or {}
        status = workflow.get("status") or {}
        uid = metadata.get("uid")
        if not uid:
            raise ValueError("workflow.metadata.uid: expected the Workflow's uid, found none; "
                             "only submitted workflows can be archived")
        labels = metadata.get("labels") or {}
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO archived_workflows VALUES (?, ?, ?, ?, ?, ?, ?)",
                (uid, metadata.get("name"), metadata.get("namespace"), status.get("phase"),
                 status.get("startedAt"), status.get("finishedAt"), json.dumps(workflow, sort_keys=True)),
            )
            self._db.execute("DELETE FROM archived_workflows_labels WHERE uid = ?", (uid,))
            self._db.executemany(
                "INSERT INTO archived_workflows_labels VALUES (?, ?, ?)",
                [(uid, key, str(value)) for key, value in labels.items()],
            )
            self._db.commit()

    def get(self, uid: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT workflow FROM archived_workflows WHERE uid = ?", (uid,)).fetchone()
        return json.loads(row[0]) if row else None

    def find(self, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Workflows whose labels include every given key=value, oldest first."""
        query = "SELECT workflow FROM archived_workflows w"
        args: list[str] = []
        for index, (key, value) in enumerate((labels or {}).items()):
            query += (f" JOIN archived_workflows_labels l{index} ON l{index}.uid = w.uid"
                      f" AND l{index}.key = ? AND l{index}.value = ?")
            args += [key, value]
        query += " ORDER BY w.started_at, w.name"
        with self._lock:
            rows = self._db.execute(query, args).fetchall()
        return [json.loads(row[0]) for row in rows]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.find())

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM archived_workflows").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
