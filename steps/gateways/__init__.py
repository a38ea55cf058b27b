"""Edges of a step: the Kubernetes API (`kubernetes`), Prometheus (`metrics`).

Nothing is imported here on purpose: a step process pays for every import, and a reaction that
never queries Prometheus must not load its client.
"""
