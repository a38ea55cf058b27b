"""A cluster's state dir: where its files are, which ports it took, which processes it started.

Why a directory and a JSON file: `gpuaas cluster up` returns while the components keep running,
so `status` and `down` (a different process, maybe after a crash) must find them again. The state
dir holds everything one cluster owns (PKI, kubeconfigs, etcd data, logs, configs) so two
clusters run side by side with `--state-dir`, and `down` can stop every pid it recorded.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine import ports
from gpuaas.cluster.binaries import cache_dir

STATE_FILE = "state.json"


def default_state_dir() -> Path:
    return cache_dir() / "cluster"


port_free = ports.bindable
"""Whether a server could listen on a port now (a port recorded by a previous run may have been taken since)."""


@dataclass
class ProcessRecord:
    """One started process, as `status` reports it."""

    name: str
    pid: int
    argv: list[str]
    log: str
    endpoint: str = ""
    state: str = "starting"
    """starting | ready | failed | stopped"""
    started_at: float = 0.0
    ready_seconds: float | None = None
    stop_signal: int = 15
    """SIGTERM, or what the program treats as "stop now" (PostgreSQL: SIGINT, its fast shutdown)."""
    stop_seconds: float = 10.0
    """How long `down` waits after the signal before SIGKILL (the node cleans up its pods, mounts, bridge)."""
    env: dict[str, str] = field(default_factory=dict)
    """The environment `up` added (what `Cluster.restart` starts the process with again)."""
    user: str | None = None
    """The system user it runs as (PostgreSQL), or None for root."""


@dataclass
class ClusterState:
    """What `up` recorded; `status` and `down` read it back."""

    state_dir: str
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    kubeconfig: str = ""
    phase: str = "starting"
    """starting | ready | failed | stopped"""
    started_at: float = 0.0
    ready_seconds: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    parts: list[str] = field(default_factory=list)
    """The optional parts started besides the control plane (`up --with`): node, argo, events."""
    endpoints: dict[str, str] = field(default_factory=dict)
    """What users and tests reach the cluster's services at (Argo Server, the UI, ...), by name."""
    idle_rule: dict[str, str] = field(default_factory=dict)
    """With the events part: the window and `for` of the stack's GPUWorkloadIdle rule (gpuaas.cluster.alerting)."""
    monitoring: str = "plain"
    """The monitoring profile (`up --monitoring`, gpuaas.cluster.profiles)."""
    service_range: str = ""
    """The API server's Service range its etcd holds Services of ("": an earlier version's, 10.96.0.0/16)."""

    @property
    def directory(self) -> Path:
        return Path(self.state_dir)

    def port(self, name: str) -> int:
        """The port recorded under `name`, choosing a free one the first time."""
        if name not in self.ports:
            taken = set(self.ports.values())
            port = ports.free_port()
            while port in taken:
                port = ports.free_port()
            self.ports[name] = port
        return self.ports[name]

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        body = asdict(self)
        temporary = self.directory / f".{STATE_FILE}.{os.getpid()}"
        temporary.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
        temporary.replace(self.directory / STATE_FILE)

    @classmethod
    def load(cls, state_dir: Path) -> ClusterState | None:
        path = state_dir / STATE_FILE
        if not path.is_file():
            return None
        body: dict[str, Any] = json.loads(path.read_text())
        processes = {name: ProcessRecord(**record) for name, record in body.pop("processes", {}).items()}
        return cls(**body, processes=processes)
