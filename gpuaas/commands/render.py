"""`gpuaas render [--out DIR] [--check]`: write every manifest as YAML (default: manifests/) and the Helm chart.

The rendered YAML is committed: reviewers see the YAML diff of every Python change, the local engine
and `gpuaas route` read exactly these files, and `kubectl apply -k manifests/overlays/<name>` applies
them. The Helm chart (charts/gpuaas, beside the manifests folder: `--chart-out`) is written from the
same builders (gpuaas/manifests/chart.py). `--check` writes nothing and exits 1 when a render would
change the files (CI).

Exit codes (each means one thing, so CI can tell "stale" from "could not check"):

    0  written, or (--check) up to date
    1  (--check) a render would change or remove files: run `gpuaas render` and commit
    2  bad command line: unknown option, or --out is not a folder this user can write
    3  the upstream schemas could not be had (no Go toolchain, module proxy unreachable)
    4  the rendered objects are not valid against the upstream schemas (nothing written)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_STALE = 1
EXIT_USAGE = 2
EXIT_NO_SCHEMAS = 3
EXIT_INVALID = 4

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "manifests"
MANAGED = ("base", "examples", "overlays")
"""Subfolders of --out that render owns: stale *.yaml there is removed."""
CHART_MANAGED = ("templates",)
"""Subfolders of the chart that render owns: stale files there are removed."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help="folder to write (default: the repository's manifests/)")
    parser.add_argument("--chart-out", type=Path, default=None, metavar="DIR",
                        help="folder of the Helm chart to write (default: charts/gpuaas beside --out's folder)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and list the files a render would change")
    parser.add_argument("--workload-version", default="v1beta2", choices=["v1beta2", "v1beta1"],
                        help="Kueue Workload API version the EventSource watches (default v1beta2)")
    parser.add_argument("--no-validate", action="store_true",
                        help="skip strict schema validation (it reads the upstream schemas with the Go toolchain)")


def run(args: argparse.Namespace) -> int:
    from gpuaas.upstream import UpstreamUnavailable

    if args.out.exists() and not args.out.is_dir():
        print(f"gpuaas render: --out {args.out}: expected a folder for the manifests, found a file; "
              "pass a folder (default: the repository's manifests/)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _render(args)
    except OSError as error:
        print(f"gpuaas render: --out {args.out}: expected a folder this user can write, found "
              f"{(error.strerror or str(error)).lower()} ({error.filename}); pass another folder", file=sys.stderr)
        return EXIT_USAGE
    except UpstreamUnavailable as error:
        print(f"gpuaas render: cannot validate against the upstream schemas: {error}; "
              "or pass --no-validate to render without validating", file=sys.stderr)
        return EXIT_NO_SCHEMAS


def _render(args: argparse.Namespace) -> int:
    from gpuaas.manifests import chart
    from gpuaas.manifests.files import render_files
    from gpuaas.manifests.site import SiteError

    try:
        files = render_files(args.workload_version)
        chart_files = {path.removeprefix(chart.CHART + "/"): text for path, text in chart.files().items()}
    except SiteError as error:
        print(f"gpuaas render: {error}", file=sys.stderr)
        return EXIT_INVALID
    if not args.no_validate:
        from gpuaas.manifests import OVERLAYS, SITE_EXAMPLE, SITE_EXAMPLE_NAMESPACE, objects, site
        from gpuaas.manifests.validation import validate_all

        problems = validate_all(objects(args.workload_version))
        # What the chart installs for each example values file (manifests/examples/site's objects among them).
        for name in (*OVERLAYS, SITE_EXAMPLE):
            namespace = SITE_EXAMPLE_NAMESPACE if name == SITE_EXAMPLE else "gpuaas"
            problems += [f"examples/values/{name}.yaml: {problem}" for problem in
                         validate_all(site.objects(site.example_values(name), namespace))]
        if problems:
            print("gpuaas render: the rendered objects are not valid; nothing written:", file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return EXIT_INVALID
    chart_out: Path = args.chart_out or args.out.resolve().parent / "charts" / "gpuaas"
    trees = [(args.out, files, MANAGED, "*.yaml"), (chart_out, chart_files, CHART_MANAGED, "*")]
    plans = []
    for out, wanted, managed, pattern in trees:
        # Compare bytes: a committed file that is not UTF-8 (a bad merge, an editor) is just stale.
        changed = [path for path, text in wanted.items()
                   if not (out / path).is_file() or (out / path).read_bytes() != text.encode("utf-8")]
        stale = [str(p.relative_to(out)) for sub in managed if (out / sub).is_dir()
                 for p in sorted((out / sub).rglob(pattern)) if p.is_file() and str(p.relative_to(out)) not in wanted]
        plans.append((out, wanted, changed, stale))
    if args.check:
        for out, _wanted, changed, stale in plans:
            for path in changed:
                print(f"would change: {out / path}")
            for path in stale:
                print(f"would remove: {out / path}")
        return EXIT_STALE if any(changed or stale for _o, _w, changed, stale in plans) else 0
    for out, wanted, changed, stale in plans:
        for path in changed:
            target = out / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(wanted[path], encoding="utf-8")
        for path in stale:
            (out / path).unlink()
        print(f"gpuaas render: {len(wanted)} files in {out} ({len(changed)} written, {len(stale)} removed)")
    return 0
