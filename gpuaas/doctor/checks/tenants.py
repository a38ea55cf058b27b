"""Tenants: each GPU ClusterQueue active, reachable through a LocalQueue, its namespaces labelled with it."""

from __future__ import annotations

from gpuaas.doctor.facts import Facts
from gpuaas.doctor.findings import Finding, Skipped, blocks, ok, warn
from gpuaas.manifests.observability import TENANT_NAMESPACE_LABEL


def tenant_findings(facts: Facts) -> list[Finding | Skipped]:
    from gpuaas.doctor.checks.components import not_installed

    if not_installed(facts, "clusterqueues.kueue.x-k8s.io"):
        return [Skipped("tenants", not_installed(facts, "clusterqueues.kueue.x-k8s.io") or "")]
    if "tenants" in facts.unreadable:
        return [Skipped("tenants", facts.unreadable["tenants"])]
    gpu_queues = [cq for cq in facts.tenants.cluster_queues if cq.gpu_quota > 0]
    out: list[Finding | Skipped] = []
    if not gpu_queues:
        return [warn("tenants", "no ClusterQueue has nvidia.com/gpu quota: there is no tenant to react for",
                     "create a tenant: argo -n " + facts.namespace + " submit --from "
                     "workflowtemplate/gpuaas-provision-quota -p mode=hand -p tenant=team-a -p namespace=team-a "
                     "-p flavor=<ResourceFlavor> -p gpus=4  (docs/quota.md)")]
    unknown = sorted(set(facts.tenants.policy_tenants) - {cq.name for cq in facts.tenants.cluster_queues})
    if unknown:
        out.append(warn("tenants", f"the idle policy names tenant(s) with no ClusterQueue: {', '.join(unknown)} (their "
                                   "settings apply to nothing)",
                        f"kubectl -n {facts.namespace} edit configmap gpuaas-policy  (tenant names are ClusterQueue names)"))
    for cq in gpu_queues:
        check = f"tenant:{cq.name}"
        queues = [lq for lq in facts.tenants.local_queues if lq.cluster_queue == cq.name]
        details = [f"ClusterQueue {cq.name}: {cq.gpu_quota:g} GPU(s) nominal",
                   f"LocalQueues: {', '.join(f'{q.namespace}/{q.name}' for q in queues) or 'none'}"]
        if cq.terminating:
            # An admin's delete, not a defect: Kueue keeps the queue (Active False, reason Terminating; kueue
            # pkg/controller/core/clusterqueue_controller.go) until no admitted Workload reserves its quota.
            out.append(warn(check, f"ClusterQueue {cq.name} is being deleted: it admits nothing new, and Kueue "
                                   "removes it once no admitted Workload holds its quota",
                            "kubectl get workloads -A -o custom-columns=NAMESPACE:.metadata.namespace,"
                            f"NAME:.metadata.name,QUEUE:.status.admission.clusterQueue | grep -w {cq.name}  "
                            "(the Workloads that hold it; they go when they finish or their namespace is deleted)",
                            *details))
            continue
        if not cq.active:
            out.append(blocks(check, f"ClusterQueue {cq.name} is not active: {cq.message}",
                              f"kubectl describe clusterqueue {cq.name}  (a ResourceFlavor or Cohort it names is "
                              "missing, or it is stopped: spec.stopPolicy)", *details))
            continue
        if not queues:
            out.append(warn(check, f"no LocalQueue points at ClusterQueue {cq.name}: its tenant cannot submit anything",
                            f"kubectl apply -f - <<EOF\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:"
                            f"\n  name: {cq.name}\n  namespace: <the tenant's namespace>\nspec:\n  clusterQueue: {cq.name}"
                            "\nEOF", *details))
            continue
        unlabelled = sorted({q.namespace for q in queues
                             if facts.tenants.namespaces.get(q.namespace, {}).get(TENANT_NAMESPACE_LABEL) != cq.name})
        if unlabelled:
            out.append(warn(check, f"namespace(s) {', '.join(unlabelled)} of tenant {cq.name} lack the label "
                                   f"{TENANT_NAMESPACE_LABEL}={cq.name}: GPU utilization per tenant misses them",
                            "\n".join(f"kubectl label namespace {ns} {TENANT_NAMESPACE_LABEL}={cq.name} --overwrite"
                                      for ns in unlabelled), *details))
            continue
        out.append(ok(check, f"tenant {cq.name} is active, queued and labelled", *details))
    return out
