"""What a wrong release costs, per kind, charged against what the releases reclaimed.

A release stops the workload's pods (docs/reactions.md "What a release does, per kind"): what lived
only in them is lost, and when its owner wants it back it must restart and be admitted again. For a
wrong release (definitions: wrongRelease) the replay charges, in GPU-hours of the released job:

- **lost progress**: the busy time since its last checkpoint. Jobs that checkpoint (training, Ray,
  batch) lose the material activity since the last multiple of `checkpoint_seconds` of it; a
  notebook keeps its state in the kernel's memory and loses all its material activity so far (the
  cells must run again); a server loses nothing but its start-up;
- **restart**: `restart_seconds` (pull, start, load data or weights) before it is back where it was;
- **wait to be admitted again**: `resume_seconds` until someone resumes it by hand (gpuaas does not
  yet bring a released workload back by itself), plus the queue's wait for its GPUs when the replay
  models the queue (gpuaas.simulate.demand).

The figures are assumptions, stated in docs/simulate.md ("What a release costs"); `--costs` is not an
option because a site's own figures are better read from its own incidents than guessed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuaas.simulate.definitions import IdleSamples
from steps.policy import KINDS, kind_of

ALL_OF_IT = -1.0
"""`checkpoint_seconds` of a kind that keeps its state in memory: every busy second so far is lost."""


@dataclass(frozen=True)
class KindCost:
    checkpoint_seconds: float
    """Busy time between checkpoints; 0: nothing to lose (stateless); ALL_OF_IT: no checkpoint."""
    restart_seconds: float
    resume_seconds: float = 1800.0


COSTS: dict[str, KindCost] = {
    "training": KindCost(checkpoint_seconds=3600.0, restart_seconds=600.0),
    "ray": KindCost(checkpoint_seconds=3600.0, restart_seconds=600.0),
    "batch": KindCost(checkpoint_seconds=3600.0, restart_seconds=300.0),
    "notebook": KindCost(checkpoint_seconds=ALL_OF_IT, restart_seconds=300.0),
    "serving": KindCost(checkpoint_seconds=0.0, restart_seconds=600.0),
}
"""The assumed cost of a wrong release per kind (module docstring; docs/simulate.md)."""
assert set(COSTS) == set(KINDS)


@dataclass
class ReleaseCosts:
    """Per release, GPU-seconds: lost progress, restart, and the wait to be admitted again."""

    lost: np.ndarray
    restart: np.ndarray
    wait: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.lost + self.restart + self.wait


def kinds_of(samples: IdleSamples) -> np.ndarray:
    """The policy kind of every workload of the history (from its `kind` column)."""
    names = samples.history.workloads.kind.tolist()
    cache: dict[str, str] = {}
    return np.asarray([cache.setdefault(str(n), kind_of(str(n))) for n in names], dtype=object)


def release_costs(samples: IdleSamples, workload: np.ndarray, row: np.ndarray, wrong: np.ndarray,
                  queue_wait: np.ndarray | None = None, costs: dict[str, KindCost] | None = None) -> ReleaseCosts:
    """What each release costs (zero for right releases), by its workload's kind."""
    costs = costs or COSTS
    count = len(workload)
    if count == 0:
        empty = np.zeros(0)
        return ReleaseCosts(empty, empty.copy(), empty.copy())
    kinds = kinds_of(samples)[workload]
    checkpoint = np.asarray([costs[k].checkpoint_seconds for k in kinds.tolist()])
    restart = np.asarray([costs[k].restart_seconds for k in kinds.tolist()])
    resume = np.asarray([costs[k].resume_seconds for k in kinds.tolist()])
    rows = samples.history.rows
    gpus = samples.history.workloads.gpus[workload].astype(np.float64)
    busy_so_far = samples.material_before[row] - samples.material_before[rows.start[workload]]
    lost = np.where(checkpoint == ALL_OF_IT, busy_so_far,
                    np.where(checkpoint > 0, np.mod(busy_so_far, np.where(checkpoint > 0, checkpoint, 1.0)), 0.0))
    wait = resume + (np.zeros(count) if queue_wait is None else queue_wait)
    charged = wrong.astype(np.float64) * gpus
    return ReleaseCosts(lost=lost * charged, restart=restart * charged, wait=wait * charged)
