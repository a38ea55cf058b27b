"""Documented sample outputs, found in the docs and compared with what the commands print today.

A sample is a fenced block right after a marker comment:

    <!-- sample: audit-list any-order -->
    ```console
    $ gpuaas audit --archive demo-report/runs.db
    STARTED  REACTION ...
    ```

Lines starting with `$ ` are commands; the lines after one, up to the next command, are what it
prints. Both sides are normalized before comparing, so the facts must match and the accidents of a
run need not: generated names (`gpuaas-on-idle-wub47`), uids, times, ports, decimal figures and
column padding become placeholders, while reactions, tenants, workloads, outcomes, counts and
wording must be the same. In the documented output, a line `[...]` stands for any number of lines
and a line ending in `...` for any line that starts like it (the docs cut long lines so). Option
`any-order`: the lines may come in another order (rows that started in the same second).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"^<!-- sample: (?P<name>[\w.-]+)(?P<options>(?: [\w-]+)*) -->$")
SKIP = "[...]"
TEMPLATES = ("on-admitted", "on-finished", "on-idle", "release-workers", "resume-workers", "provision-quota", "sweep")
OWNER_KINDS = ("statefulset", "inferenceservice", "raycluster", "pytorchjob", "job", "deployment", "notebook")

NORMALIZE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uid>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<id>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?Z?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d(?::\d\d)?\b"), "<clock>"),
    (re.compile(rf"\b(gpuaas-(?:{'|'.join(TEMPLATES)}))-(?:[sw]-[0-9a-f]{{12}}|[a-z0-9]{{5}})\b"), r"\1-<name>"),
    (re.compile(rf"\b((?:{'|'.join(OWNER_KINDS)})-[a-z0-9-]+?)-[0-9a-f]{{5}}\b"), r"\1-<hash>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"(?<![\w.])\d+\.\d+(?:e-?\d+)?(?![.\d])"), "<n>"),  # 0.016s, 4.29, 1.4e-05
)


def normalize(line: str) -> str:
    for pattern, replacement in NORMALIZE:
        line = pattern.sub(replacement, line)
    return " ".join(line.split())


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Sample:
    name: str
    path: Path
    line: int  # 1-based line of the block's first command
    options: frozenset[str]
    steps: list[Step]
    body: tuple[int, int]  # 0-based [start, end) of the block's lines in the file

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line} (sample {self.name})"


def find_samples(path: Path) -> list[Sample]:
    lines = path.read_text(encoding="utf-8").splitlines()
    samples: list[Sample] = []
    index = 0
    while index < len(lines):
        marker = MARKER.match(lines[index].strip())
        if not marker:
            index += 1
            continue
        fence = index + 1
        if fence >= len(lines) or not lines[fence].startswith("```"):
            raise ValueError(f"{path}:{index + 1}: a sample marker must be followed by a fenced block")
        end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith("```"))
        steps: list[Step] = []
        for text in lines[fence + 1:end]:
            if text.startswith("$ "):
                steps.append(Step(text[2:].strip()))
            elif steps:
                steps[-1].expected.append(text)
            elif text.strip():
                raise ValueError(f"{path}:{fence + 2}: a sample starts with a `$ ` command line")
        samples.append(Sample(marker["name"], path, fence + 2, frozenset(marker["options"].split()), steps,
                              (fence + 1, end)))
        index = end + 1
    return samples


def _matches(expected: str, actual: str) -> bool:
    if expected.endswith("..."):
        return actual.startswith(expected[:-3].rstrip())
    return expected == actual


def mismatch(expected: list[str], actual: list[str], *, any_order: bool = False) -> str | None:
    """None when `actual` is what `expected` documents (both normalized here), else what differs."""
    want = [normalize(line) for line in expected]
    have = [normalize(line) for line in actual]
    while want and not want[-1]:
        want.pop()
    while have and not have[-1]:
        have.pop()
    if any_order and SKIP not in want:
        missing = [w for w in want if not any(_matches(w, h) for h in have)]
        extra = [h for h in have if not any(_matches(w, h) for w in want)]
        if len(want) != len(have) or missing or extra:
            return f"lines differ (any order): documented but not printed {missing}; printed but not documented {extra}"
        return None
    return _ordered_mismatch(want, have)


def _ordered_mismatch(want: list[str], have: list[str]) -> str | None:
    position = 0
    for index, line in enumerate(want):
        if line == SKIP:
            following = next((w for w in want[index + 1:] if w != SKIP), None)
            if following is None:
                return None  # a trailing [...] takes the rest
            while position < len(have) and not _matches(following, have[position]):
                position += 1
            continue
        if position >= len(have):
            return f"documented line {index + 1} {line!r}: the command printed nothing more"
        if not _matches(line, have[position]):
            return f"documented line {index + 1}:\n  documented: {line}\n  printed:    {have[position]}"
        position += 1
    if position < len(have):
        return f"the command printed more than documented, from: {have[position]!r}"
    return None


def rewrite(sample: Sample, outputs: list[list[str]]) -> None:
    """Replace the sample's documented output with what the commands printed (a regeneration)."""
    current = next(s for s in find_samples(sample.path) if s.name == sample.name)  # earlier rewrites moved it
    lines = sample.path.read_text(encoding="utf-8").splitlines()
    body: list[str] = []
    for step, output in zip(sample.steps, outputs, strict=True):
        if body:
            body.append("")
        body.append(f"$ {step.command}")
        body += [line.rstrip() for line in output]
        while body and not body[-1]:
            body.pop()
    start, end = current.body
    lines[start:end] = body
    sample.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
