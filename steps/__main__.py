"""`python -m steps <reaction> PARAMS_FILE` (see steps.entrypoint).

A wrong command line is not a reaction run: `--help`, no arguments, an unknown reaction, a
wrong number of arguments or a PARAMS_FILE that does not exist print one line (or the usage with
the reactions this image knows) and exit 2, writing no outputs and no record; Argo never calls it
so. Everything else, including a bad parameter value, is the step contract of steps.entrypoint
(ARCHITECTURE section 1): a recorded outcome, `rejected-input` exiting 0 so Argo does not retry.
"""

import os
import sys

from steps.entrypoint import USAGE, main
from steps.reactions import available

EX_USAGE = 2


def usage_problem(argv: list[str]) -> str | None:
    """What is wrong with the command line itself, or None when it names a reaction and a file."""
    if not argv or argv[0] in ("-h", "--help"):
        return ""
    if argv[0] not in available():
        return (f"expected a reaction ({', '.join(available())}), found {argv[0]!r}; "
                "see `python -m steps --help`")
    if len(argv) != 2:
        return (f"expected {argv[0]} PARAMS_FILE (a JSON list of {{name, value}}), found "
                f"{len(argv) - 1} argument(s) after the reaction")
    if not os.path.isfile(argv[1]):
        return (f"PARAMS_FILE: expected a file holding the step parameters (a JSON list of {{name, value}}), "
                f"found {'a folder' if os.path.isdir(argv[1]) else 'nothing'} at {argv[1]}")
    return None


def help_text() -> str:
    return (f"{USAGE}\n\nRuns one gpuaas reaction, as an Argo script template does: PARAMS_FILE holds the\n"
            "parameters as a JSON list of {\"name\": ..., \"value\": ...} (or one JSON object). Outputs go to\n"
            "$GPUAAS_OUTPUTS_DIR (default /tmp/gpuaas/outputs); the audit record is also printed.\n"
            "The Kubernetes API: $GPUAAS_KUBE_URL, else the in-cluster service account, else $KUBECONFIG.\n\n"
            "reactions:\n" + "".join(f"  {name}\n" for name in available()))


def run(argv: list[str]) -> int:
    problem = usage_problem(argv)
    if problem is None:
        return main(argv)
    if argv and argv[0] in ("-h", "--help"):
        print(help_text(), end="")
        return 0
    print(f"python -m steps: {problem or USAGE + ' (see --help for the reactions)'}", file=sys.stderr)
    return EX_USAGE


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
