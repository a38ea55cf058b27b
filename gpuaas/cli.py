"""The `gpuaas` command line.

Subcommands are imported only when chosen, so `gpuaas route` does not pay for matplotlib and
`gpuaas audit` does not pay for hera.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from typing import Any, NoReturn

SUBCOMMANDS: dict[str, str] = {
    "render": "Render every manifest (Argo templates, sensors, RBAC, rules, examples) into YAML.",
    "route": "Evaluate the rendered Sensors on events: which workflows would they submit, and why not.",
    "demo": "Run the demo scenario (local engine, or --stack real) and write demo-report/.",
    "audit": "Review run history: what the automation did, when, why, and what changed.",
    "quota": "GPU quota advice from usage: `gpuaas quota advise --prometheus URL --since 7d` (applies nothing).",
    "simulate": "Replay GPU history through the idle policy: what it would have reclaimed, whom it would have interrupted.",
    "cluster": "Build and run the real control plane (Kubernetes, Kueue, KEDA, KWOK) on this machine.",
    "doctor": "Check every prerequisite on a live cluster and its Prometheus; say what blocks and how to fix it.",
}
EXIT_DEFECT = 70
"""EX_SOFTWARE: the command failed on a defect of its own (one line; GPUAAS_TRACEBACK=1 shows where)."""
EXIT_SETUP = 78
"""EX_CONFIG: the environment lacks a package the command needs (`make demo`'s set-up, not `make setup`'s)."""

_INVALID_CHOICE = re.compile(r"^argument (?P<argument>[^:]+): invalid choice: '(?P<found>[^']*)' \(choose from (?P<choices>.*)\)$")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def closest(word: str, candidates: list[str]) -> str | None:
    """The candidate a misspelt `word` most likely meant, if any is close enough (case aside: -P means -p)."""
    by_lower = {candidate.lower(): candidate for candidate in reversed(candidates)}
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[found[0]] if found else None


class CommandLine(argparse.ArgumentParser):
    """argparse with one-line errors: what was wrong, the closest valid word for a misspelt one, and where the
    usage is (not the usage itself)."""

    def help_hint(self) -> str:
        from gpuaas.invocation import command

        return f"`{command()}{self.prog.removeprefix('gpuaas')} --help`"

    def error(self, message: str) -> NoReturn:
        invalid = _INVALID_CHOICE.match(message)
        if invalid:
            choices = [choice.strip().strip("'") for choice in invalid["choices"].split(",")]
            argument, found = invalid["argument"], invalid["found"]
            what = f"unknown {argument.lower()}" if argument.isupper() else f"{argument}: unknown value"
            guess = closest(found, choices)
            message = f"{what} {found!r}; " + (f"did you mean {guess}?" if guess else f"expected one of {', '.join(choices)}")
        separator = " " if message.endswith("?") else "; "
        self.exit(2, f"{self.prog}: {message}{separator}see {self.help_hint()}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandLine(prog="gpuaas", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in SUBCOMMANDS.items():
        module = importlib.import_module(f"gpuaas.commands.{name}")
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module.configure(sub)
        sub.set_defaults(_module=module)
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    """The parser's subcommand action when that is its only positional (gpuaas, audit, cluster, quota)."""
    positionals = [action for action in parser._actions if not action.option_strings]
    if len(positionals) == 1 and isinstance(positionals[0], argparse._SubParsersAction):
        return positionals[0]
    return None


def _values_taken(action: argparse.Action, following: list[str]) -> int:
    """How many of the words after an option argparse gives it (the option's value)."""
    nargs = action.nargs
    if nargs is None:
        return 1
    if isinstance(nargs, int):
        return nargs
    if nargs == "?":
        return 1 if following and not following[0].startswith("-") else 0
    if nargs in ("*", "+"):
        return next((i for i, word in enumerate(following) if word.startswith("-")), len(following))
    return 0


def check_spelling(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Name a misspelt option with the closest valid one, before argparse reads the words after it as something
    else (`gpuaas audit --archvie runs.db` said "argument ACTION: invalid choice: 'runs.db'").

    Walks the words as argparse does: an option's value is skipped, a subcommand's name moves on to its parser
    (whose options are the ones valid after it); unique prefixes are argparse's abbreviations. An empty value
    (`--output-dir ""`, which Path reads as the current folder) is refused unless its option says it means
    something (`empty_allowed`, e.g. `simulate --windows ""`: no sweep)."""
    current: Any = parser
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return
        if word.startswith("-") and word != "-" and not _NEGATIVE_NUMBER.match(word):
            name, _, attached = word.partition("=")
            options = current._option_string_actions
            if name in options:
                action = options[name]
            elif name.startswith("--") and (prefixed := [o for o in options if o.startswith(name)]):
                if len(prefixed) > 1:
                    return  # argparse says which options an ambiguous prefix could be
                action = options[prefixed[0]]
            elif not name.startswith("--") and name[:2] in options:
                index += 1  # a short option with its value attached (-pdry-run=true)
                continue
            else:
                guess = closest(name, [o for o in options if o.startswith("--") == name.startswith("--")])
                current.error(f"unknown option {name}" + (f"; did you mean {guess}?" if guess else ""))
            taken = [attached] if "=" in word else argv[index + 1:index + 1 + _values_taken(action, argv[index + 1:])]
            if "" in taken and not getattr(action, "empty_allowed", False):
                current.error(f"{name}: expected a value, found an empty one")
            index += 1 + (0 if "=" in word else len(taken))
            continue
        subcommands = _subcommands(current)
        if subcommands is not None:
            if word not in subcommands.choices:
                return  # argparse's invalid choice, with CommandLine.error's suggestion
            current = subcommands.choices[word]
        elif word == "":
            current.error("expected a value for each argument, found an empty one")
        index += 1


def main(argv: list[str] | None = None) -> int:
    from gpuaas.stops import Stopped, show_tracebacks, stoppable

    parser = build_parser()
    words = sys.argv[1:] if argv is None else list(argv)
    check_spelling(parser, words)
    args = parser.parse_args(words)
    name = "gpuaas " + args.command
    try:
        with stoppable():
            return int(args._module.run(args) or 0)
    except Stopped as stop:  # a command with something to stop says what itself (demo, cluster up)
        print(f"{name}: stopped by {stop}", file=sys.stderr)
        return stop.exit_code
    except ModuleNotFoundError as error:
        # `make demo`'s venv has the demo's packages only (pyproject.toml's `demo` extra); the other commands need
        # the `cli` extra: a set-up to run, not a defect. Only a package of an optional extra counts: any other
        # missing module (one of gpuaas' own, the standard library's) is a defect, reported as one below.
        if show_tracebacks():
            raise
        if (error.name or "").split(".")[0] not in _extra_modules():
            return _defect(name, error)
        print(f"{name}: needs Python package {error.name!r}, which this environment lacks (`make demo` installs the "
              "demo's packages only): run `make setup` (or `pip install -e '.[cli]'`), then again",
              file=sys.stderr)
        return EXIT_SETUP
    except Exception as error:
        if show_tracebacks():
            raise
        return _defect(name, error)


def _defect(name: str, error: Exception) -> int:
    """One line for a failure that is gpuaas' own (EX_SOFTWARE)."""
    lines = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
    print(f"{name}: failed (a defect of gpuaas): {type(error).__name__}: {lines}; GPUAAS_TRACEBACK=1 shows where",
          file=sys.stderr)
    return EXIT_DEFECT


def _extra_modules() -> frozenset[str]:
    """The import names of the packages pyproject.toml's optional extras add (from the installed metadata: each
    of them imports under its distribution name, normalised), or none when gpuaas is not installed."""
    from importlib import metadata

    try:
        requirements = metadata.requires("gpuaas") or []
    except metadata.PackageNotFoundError:
        return frozenset()
    return frozenset(re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower().replace("-", "_").replace(".", "_")
                     for r in requirements if "extra ==" in r) - {"gpuaas"}  # `cli` pulls in gpuaas[demo]


if __name__ == "__main__":
    sys.exit(main())
