"""`gpuaas quota advise` on a real Prometheus holding 12 hours of backfilled Kueue history whose right
answer is known, with the ClusterQueues read through the official client from the local API server.

Needs a change (cohort gpu-pool, 16 GPUs of nominal quota):
  research  nominal 4: busy hours (40 of every 60 min) run 6 GPUs (2 borrowed) with 2 more waiting,
            admission wait 30 min -> demand p95 8, short 4
  vision    nominal 8: holds 1 GPU, 2 for 10 of every 120 min -> demand p95 2, keeps 3, can give 5
  serving   nominal 4: holds 3, never waits -> no change
  => vision 8 -> 4 first, then research 4 -> 8; serving unchanged; the cohort stays at 16.

Balanced: three tenants at 2-3 of 4, nothing waits => "no change" for each, nothing to submit.

The pure rules get their own table tests below (borrowing and lending limits, a shortfall no one
can cover, idle quota with no taker, a tenant with several flavors).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from io import StringIO
from typing import Any

import pytest

from engine.backfill import BackfilledPrometheus, OpenMetricsHistory
from gpuaas import cli
from gpuaas.manifests import observability as obs
from gpuaas.quota.advice import AdviceSettings, TenantUsage, advise, submission
from steps.gateways import resources as R
from tests.quota import kueue_objects as K
from tests.support.apiserver import running_apiserver
from tests.support.cluster_history import KueueHistory, QueueTimeline
from tests.support.prometheus import require_monitoring

HOURS = 12
MINUTES = HOURS * 60
COHORT = "gpu-pool"


def _queue(name: str, gpus: int, in_use: int) -> dict[str, Any]:
    cq = K.cluster_queue(name, gpus, cohort=COHORT)
    cq["status"] = {"flavorsUsage": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": str(in_use),
                                                                      "borrowed": "0"}]}]}
    return cq


@contextmanager
def advised_cluster(queues: list[QueueTimeline], cluster_queues: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    require_monitoring()
    end = float(int(time.time()) - 20)
    start = end - MINUTES * 60
    history = OpenMetricsHistory()
    KueueHistory(queues).write(history, start, MINUTES)
    with BackfilledPrometheus(history, obs.rule_groups(), start=start, end=end) as prometheus, \
            running_apiserver() as api:
        for cq in cluster_queues:
            api.store.create(R.CLUSTER_QUEUE, cq)
        yield prometheus.url, api.url


def run_advise(prometheus: str, kube: str, *extra: str) -> tuple[int, str]:
    out = StringIO()
    with redirect_stdout(out):
        code = cli.main(["quota", "advise", "--prometheus", prometheus, "--since", f"{HOURS}h", "--kube-url", kube,
                         *extra])
    return code, out.getvalue()


def busy(period: int, busy_minutes: int, high: float, low: float) -> Callable[[int], float]:
    return lambda m: high if m % period < busy_minutes else low


NEEDS_CHANGE = [
    QueueTimeline("research", COHORT, 4, usage=busy(60, 40, 6, 4), pending=busy(60, 40, 2, 0),
                  waits=lambda m: [1800.0] if m % 10 == 0 else []),
    QueueTimeline("vision", COHORT, 8, usage=busy(120, 10, 2, 1), waits=lambda m: [3.0] if m % 30 == 0 else []),
    QueueTimeline("serving", COHORT, 4, usage=lambda m: 3, waits=lambda m: [8.0] if m % 30 == 0 else []),
]
BALANCED = [
    QueueTimeline("research", COHORT, 4, usage=busy(60, 30, 3, 2), waits=lambda m: [20.0] if m % 10 == 0 else []),
    QueueTimeline("vision", COHORT, 4, usage=busy(90, 45, 3, 2), waits=lambda m: [5.0] if m % 20 == 0 else []),
    QueueTimeline("serving", COHORT, 4, usage=lambda m: 3, waits=lambda m: [2.0] if m % 30 == 0 else []),
]


def test_a_history_that_needs_a_change() -> None:
    with advised_cluster(NEEDS_CHANGE, [_queue("research", 4, 6), _queue("vision", 8, 1), _queue("serving", 4, 3)]) \
            as (prometheus, kube):
        code, out = run_advise(prometheus, kube, "--output", "json")
        table_code, table = run_advise(prometheus, kube)
    assert code == 0 and table_code == 0
    advice = json.loads(out)
    tenants = {t["tenant"]: t for t in advice["tenants"]}
    research, vision, serving = tenants["research"], tenants["vision"], tenants["serving"]
    assert (research["verdict"], research["newNominal"]) == ("raise", 8)
    assert (vision["verdict"], vision["newNominal"]) == ("lower", 4)
    assert (serving["verdict"], serving["newNominal"]) == ("no change", None)
    # the figures behind it
    assert research["usage"]["demand_p95"] == pytest.approx(8)
    assert research["usage"]["borrowed_p95"] == pytest.approx(2)
    assert research["usage"]["queued_fraction"] == pytest.approx(40 / 60, abs=0.02)
    # every wait is 1800 s, in Kueue's 1280-2560 s bucket; histogram_quantile interpolates inside it: 2432 s
    assert research["usage"]["wait_p90_seconds"] == pytest.approx(1280 + 0.9 * 1280)
    assert vision["usage"]["allocated_p95"] == pytest.approx(2) and vision["usage"]["lent_mean"] > 1
    assert serving["usage"]["allocated_mean"] == pytest.approx(3)
    assert any("queues while others lend" in r for r in research["reasons"])
    assert any("quota sits idle" in r and "gives 4 GPUs to research" in r for r in vision["reasons"])
    # the hand submissions, lowered quota first so the cohort never grows
    submit = "argo submit -n gpuaas --from workflowtemplate/gpuaas-provision-quota -p mode=hand"
    assert [s["command"] for s in advice["submissions"]] == [
        f"{submit} -p tenant=vision -p flavor=a100 -p gpus=4", f"{submit} -p tenant=research -p flavor=a100 -p gpus=8"]
    assert advice["change"] is True
    assert "research  " in table and "4 -> 8" in table and "8 -> 4" in table
    assert "Argo UI: Workflow Templates > gpuaas-provision-quota > Submit, parameters: mode=hand, tenant=vision" in table


def test_a_balanced_history_needs_no_change() -> None:
    with advised_cluster(BALANCED, [_queue("research", 4, 2), _queue("vision", 4, 3), _queue("serving", 4, 3)]) \
            as (prometheus, kube):
        code, out = run_advise(prometheus, kube, "--output", "json")
        _, table = run_advise(prometheus, kube)
    assert code == 0
    advice = json.loads(out)
    assert advice["change"] is False and advice["submissions"] == []
    assert {t["tenant"]: t["verdict"] for t in advice["tenants"]} == {
        "research": "no change", "serving": "no change", "vision": "no change"}
    assert all(t["usage"]["samples"] > 100 for t in advice["tenants"])
    assert "No change recommended: nothing to submit." in table


def test_unreachable_prometheus_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with running_apiserver() as api:
        api.store.create(R.CLUSTER_QUEUE, _queue("research", 4, 0))
        code = cli.main(["quota", "advise", "--prometheus", "http://127.0.0.1:9", "--since", "1h", "--kube-url", api.url])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "Prometheus at http://127.0.0.1:9 did not answer" in err and "check --prometheus" in err


def test_no_cluster_queues_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with running_apiserver() as api:
        code = cli.main(["quota", "advise", "--prometheus", "http://127.0.0.1:9", "--since", "1h", "--kube-url", api.url])
    assert code == 1 and "no ClusterQueues found" in capsys.readouterr().err


# -- the pure rules ------------------------------------------------------------------------------

def usage(tenant: str, nominal: int, **fields: Any) -> TenantUsage:
    base: dict[str, Any] = {"cohort": COHORT, "flavor": "a100", "in_use_now": 0, "samples": 100}
    return TenantUsage(tenant=tenant, nominal=nominal, **{**base, **fields})


def test_a_borrower_gets_a_borrowing_limit_while_others_queue() -> None:
    result = advise([usage("a", 4, demand_p95=6, queued_fraction=0.5, allocated_p95=4),
                     usage("b", 4, demand_p95=6, borrowed_p95=2, borrowed_mean=2, allocated_p95=6)])
    b = next(t for t in result.tenants if t.usage.tenant == "b")
    assert b.borrowing_limit == 0 and b.verdict == "limits" and b.new_nominal is None
    assert submission(b)["parameters"] == {"mode": "hand", "tenant": "b", "flavor": "a100", "gpus": "4",
                                           "borrowing-limit": "0"}
    a = next(t for t in result.tenants if t.usage.tenant == "a")
    assert a.new_nominal is None and any("2 more GPUs needed" in r for r in a.reasons)
    assert any("needs 2 more GPUs" in n for n in result.notes)


def test_a_tenant_that_lends_and_then_queues_keeps_its_demand_home() -> None:
    result = advise([usage("a", 6, demand_p95=5, queued_fraction=0.3, lent_mean=2)])
    (a,) = result.tenants
    assert a.lending_limit == 1 and a.new_nominal is None


def test_idle_quota_without_a_taker_stays() -> None:
    result = advise([usage("a", 8, demand_p95=1, allocated_p95=1), usage("b", 4, demand_p95=3)])
    assert not result.changes
    assert any("a: quota sits idle" in n and "no change" in n for n in result.notes)


def test_never_lowered_below_what_is_in_use() -> None:
    result = advise([usage("idle", 8, demand_p95=1, in_use_now=6), usage("short", 2, demand_p95=8, queued_fraction=1)])
    idle = next(t for t in result.tenants if t.usage.tenant == "idle")
    assert idle.new_nominal == 6


def test_several_flavors_name_no_submission() -> None:
    result = advise([usage("a", 8, flavor=None, demand_p95=1), usage("b", 2, demand_p95=6, queued_fraction=1)])
    a = next(t for t in result.tenants if t.usage.tenant == "a")
    assert a.verdict == "lower" and submission(a) is None
    assert any("several GPU flavors" in r for r in a.reasons)


def test_no_samples_is_said_not_guessed() -> None:
    result = advise([usage("a", 4, samples=0)], AdviceSettings())
    (a,) = result.tenants
    assert not a.changes and "no Kueue samples" in a.reasons[0]


def test_a_lowered_quota_takes_its_lending_limit_down_with_it() -> None:
    """Kueue rejects lendingLimit > nominalQuota: lowering 8 -> 4 a queue that has lendingLimit 6 must
    submit lending-limit 4 too, or provision-quota (and Kueue's webhook) would refuse the submission."""
    result = advise([usage("idle", 8, demand_p95=1, lending_limit=6),
                     usage("short", 2, demand_p95=6, queued_fraction=1)])
    idle = next(t for t in result.tenants if t.usage.tenant == "idle")
    assert (idle.new_nominal, idle.lending_limit) == (4, 4)
    assert submission(idle)["parameters"] == {"mode": "hand", "tenant": "idle", "flavor": "a100", "gpus": "4",
                                              "lending-limit": "4"}
    assert any("lendingLimit 6" in r for r in idle.reasons)
    kept = advise([usage("idle", 8, demand_p95=1, lending_limit=3), usage("short", 2, demand_p95=6, queued_fraction=1)])
    assert next(t for t in kept.tenants if t.usage.tenant == "idle").lending_limit is None, "3 <= 4: nothing to change"
