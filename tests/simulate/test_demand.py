"""The cohort's queue during a replay (gpuaas.simulate.demand.QueueModel), by hand.

Capacity 8 GPUs. Job A (8 GPUs) runs 0-1000 s; job B (4 GPUs) is submitted at 100 and admitted at 1000,
when A ends; job C (8 GPUs) is submitted at 150 and admitted at 1500 (B ran 1000-1500)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuaas.simulate.demand import Queue, QueueModel
from steps import demand as demand_model


def queue() -> Queue:
    return Queue(capacity=8, submitted=np.array([0.0, 100.0, 150.0]), admitted=np.array([0.0, 1000.0, 1500.0]),
                 gpus=np.array([8, 4, 8]), duration=np.array([1000.0, 500.0, 600.0]), workload=np.array([0, 1, 2]))


def test_a_right_release_hands_its_gpus_to_the_first_waiting_job_that_fits() -> None:
    model = QueueModel(queue())
    waiting, free = model.waiting(180.0)
    assert waiting == [(1, 4), (2, 8)] and free == 0
    assert demand_model.verdict(demand_model.Demand("c", tuple((f"job {j}", g) for j, g in waiting), free), 8).helps
    model.release(200.0, 8, 1000.0)  # A released at 200, its lease lasts until its end
    # B fits and starts at 200 (saving 800 s); C does not fit into the 4 left; B ran 500 s on the freed GPUs
    assert model.started_early == 1 and model.saved_seconds == pytest.approx(800.0)
    assert model.handed_gpu_seconds == pytest.approx(4 * 500)
    # B leaves at 700: C (8) still does not fit into the 8 of A's lease? it does: 8 free from 700 until 1000
    model.advance(2000.0)
    assert model.started_early == 2 and model.saved_seconds == pytest.approx(800.0 + 800.0)  # C from 700, not 1500
    assert model.handed_gpu_seconds == pytest.approx(4 * 500 + 8 * 600)


def test_a_wrong_release_waits_for_the_job_started_on_its_gpus() -> None:
    model = QueueModel(queue())
    model.release(200.0, 8, 400.0)  # A wants its GPUs back at 400 (activity back, then resumed)
    model.advance(2000.0)
    # B started at 200 runs until 700 on A's GPUs: A waits 300 s
    assert model.readmission_wait(400.0) == pytest.approx(300.0)


def test_nothing_waits_nothing_is_handed() -> None:
    q = queue()
    q.submitted, q.admitted = np.array([0.0, 1000.0, 1500.0]), np.array([0.0, 1000.0, 1500.0])
    model = QueueModel(q)
    model.release(200.0, 8, 1000.0)
    assert model.waiting(300.0) == ([], 8)  # A's 8 GPUs are free and nobody waits
    model.advance(2000.0)
    assert model.started_early == 0 and model.handed_gpu_seconds == 0.0
