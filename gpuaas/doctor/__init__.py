"""`gpuaas doctor`: is every prerequisite the product depends on in place, and if not, what fixes it.

The first thing an admin runs after `kubectl apply -k`. Three layers, so every judgement is a pure
function over plain data and testable with hand-made facts:

- `gather` (thin edges): reads the cluster with the official `kubernetes` client, Prometheus with
  `prometheus-api-client` (and its session for `/api/v1/rules`), Alertmanager's `/api/v2/status`;
  every read that fails is recorded in `Facts.unreadable` with the reason, never raised.
- `checks` (pure): `Facts -> [Finding]`, one module per area. A finding is `ok`, `warn` (the product
  works, degraded) or `blocks` (the product cannot react: a component or grant missing, an alert
  that cannot fire or cannot reach the webhook), and says what is wrong and the exact change that
  fixes it. A check whose input could not be read adds nothing but a line to `Report.not_checked`.
- `probe` (optional, `--probe`): a harmless test alert sent through the real routing, seen arriving
  as a `gpuaas-on-idle` run that releases nothing (its pod does not exist).
"""
