"""Audit of reaction runs: parse Argo Workflows into runs, read them from an archive or an Argo
Server, list, show, chart and resubmit them (`gpuaas audit`, docs/audit.md)."""
