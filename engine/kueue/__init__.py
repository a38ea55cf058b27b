"""Kueue emulation for the local engine: admission, eviction, queue status and job integration.

`KueueController(cluster).reconcile()` is one deterministic pass; `start()` runs passes on a
thread. See `controller` for what a pass does and what is simplified.
"""

from engine.kueue.controller import KueueController, Transition
from engine.kueue.integration import workload_for, workload_name

__all__ = ["KueueController", "Transition", "workload_for", "workload_name"]
