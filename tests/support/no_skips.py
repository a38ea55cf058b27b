"""CI never skips silently: a skipped test (a missing tool, a missing module) is reported as a FAILURE.

`tests/conftest.py` installs these two hooks for the whole suite. A test that needs a tool says what
to install when it is absent (`make setup` installs the Debian packages, `make cluster-build` the
pinned stack); the hooks catch any skip that still slips through, a library's or a fixture's.
Deselection (`-m "not realstack"`) is not a skip: it runs fewer tests on purpose and says so.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest


def _reason(longrepr: Any) -> str:
    # a skip's longrepr is (path, line, "Skipped: <reason>")
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def _as_failure(report: Any) -> None:
    report.outcome = "failed"
    report.longrepr = f"skipped, and the suite never skips (a missing tool is a failure): {_reason(report.longrepr)}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, Any]:
    report = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        _as_failure(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield
    if report.skipped:
        _as_failure(report)
    return report
