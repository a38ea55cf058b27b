"""The real control plane on one machine: built from the pinned Go modules, started on loopback.

Reading order: `binaries` (build and find programs), `certificates` and `kubeconfig` (identities),
`state` (the state dir), `processes` and `readiness` (starting and waiting), `objects`, `crds` and
`kwok` (what is installed), `stack` (the order everything starts in), `gpu_exporter` (the one
stand-in process). The CLI is `gpuaas cluster` (gpuaas/commands/cluster.py).
"""
