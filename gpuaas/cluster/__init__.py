"""The real components on one machine: built from the pinned Go modules, started on loopback.

The control plane (`gpuaas cluster`, docs/real-stack.md), in reading order: `binaries` (build and
find programs), `certificates` and `kubeconfig` (identities), `state` (the state dir), `processes`
and `readiness` (starting and waiting), `objects`, `crds` and `kwok` (what is installed), `stack`
(the order everything starts in), `gpu_exporter` (the stand-in for dcgm-exporter). The CLI is
gpuaas/commands/cluster.py.

The real node for step pods (docs/real-stack-pods.md): `debian` (the node's Debian programs), `oci`,
`images`, `node`. Argo on the stack (`gpuaas cluster up --with argo,events`): `postgres` (the
archive), `argo_workflows`, `argo_events`, `services` (fixed ClusterIPs for loopback programs),
`argo_ui` (the UI built from the pinned module's source, on request).
"""
