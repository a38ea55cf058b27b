"""The processes running now, read from /proc: what a test that stops a command looks for afterwards."""

from __future__ import annotations

from pathlib import Path


def processes_naming(text: str) -> list[str]:
    """`pid: command line` of the live processes (zombies left out) whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline}")
    return found
