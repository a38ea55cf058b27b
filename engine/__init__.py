"""The local engine: the product's rendered manifests running on one machine.

Reading order follows the data path (see docs/local-engine.md):
`apiserver` (Kubernetes API) and `kueue` (admission) hold the cluster; `resource_watcher` and
`webhook` are the event sources, emitting `events` envelopes; `sensors` evaluates the rendered
Sensors with routing; `executor` runs the rendered WorkflowTemplates (`expressions` for
Argo's tags and expressions, `step_runner` for the step processes) and writes the `archive`;
`exporter`, `monitoring` and `idle_rule` are the metrics side; `runtime.LocalEngine` assembles it
all; `demo`, `demo_cluster`, `workload_pods`, `timeline` and `report` are the demo on top.
"""
