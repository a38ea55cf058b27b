"""GPU quota advice from usage: `gpuaas quota advise`.

`usage` reads the ClusterQueues and Prometheus history into TenantUsage; `advice` decides (pure);
`gpuaas.commands.quota` prints the table, JSON and the hand submissions. Nothing here writes to
the cluster: a change is applied only by submitting gpuaas-provision-quota, which audits it.
"""
