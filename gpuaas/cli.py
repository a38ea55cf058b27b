"""The `gpuaas` command line.

Subcommands are imported only when chosen, so `gpuaas route` does not pay for matplotlib and
`gpuaas audit` does not pay for hera.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

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


class CommandLine(argparse.ArgumentParser):
    """argparse with one-line errors: what was wrong, and where the usage is (not the usage itself)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}; see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandLine(prog="gpuaas", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in SUBCOMMANDS.items():
        module = importlib.import_module(f"gpuaas.commands.{name}")
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module.configure(sub)
        sub.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
