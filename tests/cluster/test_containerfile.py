"""The step image builder reads the project's Containerfile (gpuaas.cluster.images)."""

from __future__ import annotations

from pathlib import Path

from gpuaas.cluster.images import parse_containerfile

REPOSITORY = Path(__file__).resolve().parents[2]
KNOWN = {"ARG", "FROM", "LABEL", "ENV", "USER", "WORKDIR", "COPY", "RUN", "ENTRYPOINT", "CMD"}


def test_every_containerfile_instruction_is_one_the_builder_runs() -> None:
    instructions = parse_containerfile((REPOSITORY / "Containerfile").read_text())

    assert {i.keyword for i in instructions} <= KNOWN
    assert [i.keyword for i in instructions][:2] == ["ARG", "FROM"]
    run = next(i for i in instructions if i.keyword == "RUN")
    assert run.argument.startswith("pip install .") and "compileall" in run.argument  # continuations joined


def test_continuations_and_comments() -> None:
    text = "# c\nENV A=1 \\\n    B=2\n\nRUN echo a \\\n # inside\n && echo b\nCMD [\"x\"]\n"

    parsed = [(i.keyword, i.argument, i.line) for i in parse_containerfile(text)]

    assert parsed == [("ENV", "A=1 B=2", 2), ("RUN", "echo a && echo b", 5), ("CMD", '["x"]', 8)]
