"""How a step's process runs: as a subprocess exactly as Argo runs it in a pod, or in-process.

Argo runs a script template by writing `source` to a file and appending that file's path to the
command (ARCHITECTURE section 1): `python -m steps on-admitted /argo/staging/script`. The
subprocess runner does exactly that with this machine's interpreter. The in-process runner calls
the same entry point without a fresh interpreter (the fast path for the demo and benchmarks); it
only accepts `python -m steps ...` commands and hands anything else to the subprocess runner.
"""

from __future__ import annotations

import importlib
import inspect
import io
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

PYTHON_NAMES = {"python", "python3", "python3.11"}


@dataclass(frozen=True)
class StepProcess:
    """What the step's process did: its exit code and its combined log (Argo keeps it as pod log)."""

    exit_code: int
    log: str


class StepRunner(Protocol):
    mode: str

    def run(self, argv: list[str], env: Mapping[str, str], workdir: Path) -> StepProcess: ...


class SubprocessStepRunner:
    """A fresh process per step, as a pod would run it (the interpreter is this venv's Python)."""

    mode = "subprocess"

    def __init__(self, timeout_seconds: float = 120.0) -> None:
        self.timeout_seconds = timeout_seconds

    def run(self, argv: list[str], env: Mapping[str, str], workdir: Path) -> StepProcess:
        if not argv:
            raise ValueError("step command: expected a command (container.command or script.command), found none")
        command = list(argv)
        if command[0] in PYTHON_NAMES:
            command[0] = sys.executable
        full_env = {**os.environ, **env}
        project_root = str(Path(__file__).resolve().parents[1])
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root, full_env.get("PYTHONPATH", "")) if p)
        try:
            done = subprocess.run(command, env=full_env, cwd=workdir, capture_output=True, text=True,
                                  timeout=self.timeout_seconds, check=False)
        except subprocess.TimeoutExpired as error:
            return StepProcess(exit_code=124, log=f"step timed out after {self.timeout_seconds}s: {error}")
        return StepProcess(exit_code=done.returncode, log=done.stdout + done.stderr)


class _PerThreadStream:
    """sys.stdout/sys.stderr stand-in: a thread running an in-process step writes into that step's
    log (as a pod's output goes to its log), every other thread writes to the real stream."""

    def __init__(self, real: TextIO, local: threading.local) -> None:
        self.real = real
        self.local = local

    def write(self, text: str) -> int:
        buffer = getattr(self.local, "buffer", None)
        return buffer.write(text) if buffer is not None else self.real.write(text)

    def flush(self) -> None:
        if getattr(self.local, "buffer", None) is None:
            self.real.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


_capture = threading.local()
_capture_lock = threading.Lock()


def _install_capture() -> None:
    with _capture_lock:
        if not isinstance(sys.stdout, _PerThreadStream):
            sys.stdout = _PerThreadStream(sys.stdout, _capture)  # type: ignore[assignment]
        if not isinstance(sys.stderr, _PerThreadStream):
            sys.stderr = _PerThreadStream(sys.stderr, _capture)  # type: ignore[assignment]


def _steps_entry_point() -> Callable[..., int | None]:
    """The importable twin of `python -m steps` (steps-core's entry point)."""
    for module_name in ("steps.entrypoint", "steps.__main__"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        main = getattr(module, "main", None)
        if callable(main):
            return main
    raise RuntimeError("in-process steps: neither steps.entrypoint.main nor steps.__main__.main exists; "
                       "use the subprocess runner (--steps subprocess)")


class InProcessStepRunner:
    """Calls the steps entry point in this process: same code, same files, no interpreter start.

    If the entry point accepts `outputs_dir`/`environ`, concurrent steps run concurrently;
    otherwise the environment is process-global and steps run one at a time under a lock.
    """

    mode = "in-process"
    _environment_lock = threading.Lock()

    def __init__(self) -> None:
        self._fallback = SubprocessStepRunner()
        self._main: Callable[..., int | None] | None = None
        self._keywords: set[str] = set()

    def _entry(self) -> Callable[..., int | None]:
        if self._main is None:
            self._main = _steps_entry_point()
            self._keywords = set(inspect.signature(self._main).parameters)
        return self._main

    def run(self, argv: list[str], env: Mapping[str, str], workdir: Path) -> StepProcess:
        if len(argv) < 3 or argv[0] not in PYTHON_NAMES or argv[1:3] != ["-m", "steps"]:
            return self._fallback.run(argv, env, workdir)
        main = self._entry()
        arguments = argv[3:]
        _install_capture()
        _capture.buffer = io.StringIO()
        try:
            code = self._call_entry(main, arguments, env)
            return StepProcess(exit_code=code, log=_capture.buffer.getvalue())
        finally:
            _capture.buffer = None

    def _call_entry(self, main: Callable[..., int | None], arguments: list[str], env: Mapping[str, str]) -> int:
        if {"outputs_dir", "environ"} <= self._keywords:
            return _call(main, arguments, outputs_dir=env.get("GPUAAS_OUTPUTS_DIR"), environ={**os.environ, **env})
        with self._environment_lock:
            saved = {key: os.environ.get(key) for key in env}
            os.environ.update(env)
            try:
                code = _call(main, arguments)
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
        return code


def _call(main: Callable[..., int | None], arguments: list[str], **keywords: object) -> int:
    """Run the entry point as `python -m` would: SystemExit becomes the exit code."""
    try:
        result = main(arguments, **keywords)
    except SystemExit as exit_:
        result = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except Exception as error:  # noqa: BLE001 - an uncaught exception exits the pod with code 1
        print(f"step raised {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return int(result or 0)


def runner_for(mode: str) -> StepRunner:
    if mode == "subprocess":
        return SubprocessStepRunner()
    if mode == "in-process":
        return InProcessStepRunner()
    raise ValueError(f"step mode: expected 'in-process' or 'subprocess', found {mode!r}")
