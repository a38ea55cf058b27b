"""The first download of a pinned upstream module (gpuaas/upstream.py: `go mod download`) says what it
is fetching, so `make setup`, `gpuaas render` or the first test run do not sit silent for minutes.

Offline and repeatable: a fresh module cache (GOMODCACHE) fed from the machine's own module cache,
whose `cache/download` folder is a valid GOPROXY (file://), exactly what the module proxy would serve.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuaas import upstream
from gpuaas.manifests.validation import PROMETHEUS_OPERATOR


@pytest.fixture
def fresh_module_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    served = upstream.module_dir(PROMETHEUS_OPERATOR)  # in the machine's cache: the proxy below can serve it
    real_cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    assert Path(served).is_relative_to(real_cache)
    fresh = tmp_path / "mod"
    monkeypatch.setenv("GOMODCACHE", str(fresh))
    monkeypatch.setenv("GOPROXY", f"file://{real_cache}/cache/download")
    monkeypatch.setenv("GOSUMDB", "off")  # stack/crds/go.sum still verifies the module
    monkeypatch.setenv("GOTOOLCHAIN", "local")
    yield fresh
    subprocess.run(["go", "clean", "-modcache"], env=dict(os.environ), check=False, capture_output=True)


def test_the_first_download_says_what_it_fetches_and_a_cached_one_says_nothing(
        fresh_module_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    version = upstream.pin(PROMETHEUS_OPERATOR).version
    first = upstream.module_dir.__wrapped__(PROMETHEUS_OPERATOR)
    assert first.is_relative_to(fresh_module_cache) and (first / "example" / "prometheus-operator-crd").is_dir()
    said = capsys.readouterr().err
    assert f"downloading {PROMETHEUS_OPERATOR} {version} (pinned in stack/prometheus-operator/go.mod)" in said, said
    assert upstream.module_dir.__wrapped__(PROMETHEUS_OPERATOR) == first
    assert capsys.readouterr().err == ""
