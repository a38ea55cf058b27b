"""`gpuaas simulate`: replay GPU history through the idle policy, with the production decision.

It lives in the admin CLI's package because it is an admin's tool (like `gpuaas audit`): it may
import numpy and pyarrow (the `cli` extra) and the steps' code, while `steps/` must stay light for
the step image and never imports it back. The engine does not use it.

Reading order:

1. `history`       the data model: workloads, pods, GPU activity on a regular grid (numpy)
2. `trace`, `cluster_history`, `synthesis`   where a history comes from: a trace directory,
                   a Prometheus, or the seeded generator on the Microsoft ITP job trace
3. `definitions`   idle samples, idle stretches and what the report counts (docs/simulate.md)
4. `product`       the policy and the alert / Alertmanager timings, read from the rendered YAML
5. `alert_rule`, `alertmanager`, `step_window`   the deployed pipeline, modelled: when
                   GPUWorkloadIdle fires, when Alertmanager delivers, what the on-idle step reads
6. `replay`        the event loop that calls the production judgement (steps.reactions.on_idle.judge)
7. `baselines`     no automation, KEDA only, the Kubeflow notebook culler
8. `scorecard`, `comparison`, `report`   scoring, the policy sweep, table / JSON / HTML
"""
