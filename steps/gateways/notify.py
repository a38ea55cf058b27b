"""A tenant's notification webhook (idle.warnWebhook): one JSON POST per idle warning or cancel (steps.warning).

urllib3, which the Kubernetes client brings (as steps.gateways.workload_apis reads the kinds' APIs); no retry
here: the step tells the webhook once, after the warning's annotation and Event exist, and records a failure."""

from __future__ import annotations

import json
from typing import Any


def post_json(url: str, body: Any, timeout_seconds: float = 5.0) -> int:
    """POST `body` as JSON; the HTTP status, or OSError saying what failed (a status >= 300 is a failure)."""
    import urllib3

    pool = urllib3.PoolManager(timeout=urllib3.Timeout(total=timeout_seconds), retries=False)
    try:
        response = pool.request("POST", url, body=json.dumps(body, separators=(",", ":")).encode(),
                                headers={"Content-Type": "application/json"})
    except urllib3.exceptions.HTTPError as error:
        raise OSError(f"POST {url} failed: {error}") from error
    finally:
        pool.clear()
    if response.status >= 300:
        raise OSError(f"POST {url} answered HTTP {response.status}")
    return int(response.status)
