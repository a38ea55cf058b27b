"""gpuaas.cluster.argo_ui and GPUAAS_ARGO_UI_GIT: a clone without the commit ui/yarn.lock pins is named as
such before yarn runs (yarn's own error comes minutes later and names neither the clone nor the commit);
a git bundle (what CI has in ../shared/mirrors) is cloned once into the per-user UI cache and used as a clone."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuaas.cluster import argo_ui

COMMIT = "54f36c723d9a0e5d3386689298cbb9c27767fa00"
LOCK = f'''"argo-ui@git+https://github.com/argoproj/argo-ui.git#{COMMIT}":
  version "1.0.0"
  resolved "git+https://github.com/argoproj/argo-ui.git#{COMMIT}"
'''


def _module(tmp_path: Path) -> Path:
    root = tmp_path / "module"
    (root / "ui").mkdir(parents=True)
    (root / "api").mkdir()
    (root / "ui" / "yarn.lock").write_text(LOCK)
    (root / "ui" / "package.json").write_text('{"name": "argo-workflows-ui"}\n')
    return root


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def _clone(tmp_path: Path, message: str) -> Path:
    """A git repository with one empty commit (not the pinned one)."""
    clone = tmp_path / "argo-ui"
    clone.mkdir()
    _git("init", "-q", cwd=clone)
    _git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", message,
         cwd=clone)
    return clone


def test_the_pinned_argo_ui_commit_is_read_from_the_lockfile(tmp_path: Path) -> None:
    assert argo_ui.pinned_argo_ui_commit(_module(tmp_path)) == COMMIT


def test_a_clone_without_the_pinned_commit_fails_before_yarn_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clone = _clone(tmp_path, "other")
    monkeypatch.setenv(argo_ui.MIRROR_ENV, str(clone))
    ran: list[list[str]] = []
    monkeypatch.setattr(argo_ui, "_run", lambda command, *a, **k: ran.append(command))
    monkeypatch.setattr(argo_ui, "yarn", lambda cache: tmp_path / "yarn")
    with pytest.raises(argo_ui.UiBuildFailed) as failed:
        argo_ui.build_ui(tmp_path / "cache", _module(tmp_path), "v4.0.5")
    assert COMMIT in str(failed.value) and str(clone) in str(failed.value)
    assert ran == []


def test_a_clone_with_the_pinned_commit_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clone = _clone(tmp_path, "pinned")
    head = _git("rev-parse", "HEAD", cwd=clone)
    module = _module(tmp_path)
    for name in ("yarn.lock",):
        path = module / "ui" / name
        path.write_text(path.read_text().replace(COMMIT, head))
    monkeypatch.setenv(argo_ui.MIRROR_ENV, str(clone))
    argo_ui.check_mirror(module, argo_ui.mirror(tmp_path / "cache"))  # no exception


def test_a_bundle_is_cloned_once_into_the_cache_and_checked_like_a_clone(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    clone = _clone(tmp_path, "pinned")
    head = _git("rev-parse", "HEAD", cwd=clone)
    bundle = tmp_path / "argo-ui.bundle"
    _git("bundle", "create", str(bundle), "--all", cwd=clone)
    module = _module(tmp_path)
    (module / "ui" / "yarn.lock").write_text(LOCK.replace(COMMIT, head))
    monkeypatch.setenv(argo_ui.MIRROR_ENV, str(bundle))
    cache = tmp_path / "cache"
    source = argo_ui.mirror(cache)
    assert source is not None and Path(source).is_relative_to(cache / "mirrors")
    assert _git("--git-dir", source, "rev-parse", "HEAD", cwd=tmp_path) == head
    argo_ui.check_mirror(module, source)  # the pinned commit is there: no exception
    assert argo_ui.mirror(cache) == source  # the second time: the same clone, not cloned again
    (module / "ui" / "yarn.lock").write_text(LOCK)  # a commit the bundle lacks
    with pytest.raises(argo_ui.UiBuildFailed) as failed:
        argo_ui.check_mirror(module, source)
    assert COMMIT in str(failed.value) and str(bundle) in str(failed.value)


def test_a_file_that_is_not_a_bundle_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    junk = tmp_path / "argo-ui.bundle"
    junk.write_text("not a bundle\n")
    monkeypatch.setenv(argo_ui.MIRROR_ENV, str(junk))
    with pytest.raises(argo_ui.UiBuildFailed) as failed:
        argo_ui.mirror(tmp_path / "cache")
    assert str(junk) in str(failed.value) and "bundle" in str(failed.value)


def test_the_ui_cache_is_per_user_unless_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(argo_ui.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert argo_ui.ui_cache() == tmp_path / "xdg" / "gpuaas" / "argo-ui"
    monkeypatch.setenv(argo_ui.CACHE_ENV, str(tmp_path / "mine"))
    assert argo_ui.ui_cache() == tmp_path / "mine"
