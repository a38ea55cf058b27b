"""Readiness probes: when each component may be called ready, and waiting for it with a deadline.

Why probes rather than sleeps: each component has a check that proves it serves (apiserver
`/readyz`, controller `/healthz`, CRDs Established, a webhook that answers a dry-run, an
APIService Available, nodes Ready). Waiting fails fast when the process died, and the error
carries its last log lines.
"""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from gpuaas.cluster import processes
from gpuaas.cluster.certificates import KeyPair
from gpuaas.cluster.state import ProcessRecord


class NotReady(RuntimeError):
    """A component did not become ready (or exited); the message carries its last log lines."""


def http_status(url: str, *, ca: Path | None = None, client: KeyPair | None = None, timeout: float = 2.0,
                verify: bool = True, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """GET `url`; (status, body). TLS with the cluster CA and an optional client certificate."""
    context = None
    if url.startswith("https"):
        context = ssl.create_default_context(cafile=str(ca) if ca and verify else None)
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if client:
            context.load_cert_chain(str(client.cert), str(client.key))
    try:
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def http_ok(url: str, **kwargs: object) -> Callable[[], str | None]:
    """A check: None when GET `url` answers 200, else what it answered."""
    def check() -> str | None:
        try:
            status, body = http_status(url, **kwargs)  # type: ignore[arg-type]
        except (OSError, ssl.SSLError) as error:
            return f"GET {url}: {error}"
        return None if status == 200 else f"GET {url}: HTTP {status} {body[:200]}"
    return check


def wait(name: str, check: Callable[[], str | None], *, timeout_s: float, record: ProcessRecord | None = None,
         poll_s: float = 0.2) -> float:
    """Poll `check` until it returns None; seconds waited. Raise NotReady on timeout or process exit."""
    started = time.monotonic()
    last = "not checked yet"
    while time.monotonic() - started < timeout_s:
        if record is not None and not processes.alive(record):
            raise NotReady(f"{name} exited during start-up; last log lines ({record.log}):\n"
                           f"{processes.log_tail(record.log)}")
        try:
            last = check() or ""
        except Exception as error:  # noqa: BLE001 - any failure of a probe means "not yet"
            last = f"{type(error).__name__}: {error}"
        if not last:
            return time.monotonic() - started
        time.sleep(poll_s)
    tail = f"; last log lines ({record.log}):\n{processes.log_tail(record.log)}" if record else ""
    raise NotReady(f"expected {name} to be ready within {timeout_s:g}s, last check said: {last}{tail}")
