"""`gpuaas doctor`: check every prerequisite of the product on a live cluster, and say how to fix each.

    gpuaas doctor --prometheus URL [--alertmanager URL] [--probe] [--output json]
    gpuaas doctor --print-role          # the ClusterRole the doctor needs (least privilege)

The cluster is $KUBECONFIG's (or --kubeconfig/--context). Each finding is ok, warn (degraded) or blocks
(the product cannot react), with the exact change that fixes it. `--probe` sends a harmless test alert
through Alertmanager's real routing and waits to see it arrive as a gpuaas-on-idle run that releases
nothing. Exit codes: 0 nothing blocks, 1 something blocks, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from urllib.parse import urlparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prometheus", metavar="URL", default=None,
                        help="the Prometheus (or thanos-querier) that evaluates the product's rules, e.g. "
                             "http://localhost:9090 after a port-forward")
    parser.add_argument("--alertmanager", metavar="URL", default=None,
                        help="the Alertmanager that routes the alerts (default: the first one Prometheus reports, "
                             "if it answers from here)")
    parser.add_argument("--bearer-token-file", metavar="FILE", type=Path, default=None,
                        help="a token for Prometheus and Alertmanager behind a proxy (OpenShift: a ServiceAccount's "
                             "token with cluster-monitoring-view)")
    parser.add_argument("--ca-file", metavar="FILE", type=Path, default=None,
                        help="the CA that signed their serving certificates (OpenShift: service-ca.crt)")
    parser.add_argument("--namespace", default="gpuaas", help="the product's namespace (default gpuaas)")
    parser.add_argument("--kubeconfig", metavar="FILE", default=None, help="default: $KUBECONFIG or ~/.kube/config")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument("--kube-url", metavar="URL", default=None,
                        help="a Kubernetes API without auth (the local engine, tests); overrides the kubeconfig")
    parser.add_argument("--probe", action="store_true",
                        help="also send a harmless test alert through the real routing and wait for its run")
    parser.add_argument("--probe-timeout", metavar="SECONDS", type=float, default=180.0,
                        help="how long --probe waits for the run (default 180; add the route's group_wait)")
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.add_argument("--verbose", "-v", action="store_true", help="print the evidence of ok findings too")
    parser.add_argument("--print-role", action="store_true",
                        help="print the ClusterRole the doctor needs as YAML and exit")


def _url(value: str | None, option: str) -> str | None:
    if value is None:
        return None
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{option}: expected an http(s) URL such as http://localhost:9090, found {value!r}")
    return value.rstrip("/")


def _progress(line: str) -> None:
    print(f"gpuaas doctor: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if args.print_role:
        import yaml

        from gpuaas.doctor.permissions import OUTSIDE_KUBERNETES, cluster_role

        print("# What `gpuaas doctor` reads (and the two dry runs it sends). Outside Kubernetes:")
        for line in OUTSIDE_KUBERNETES:
            print(f"#   {line}")
        print(yaml.safe_dump(cluster_role(), sort_keys=False), end="")
        return 0
    try:
        prometheus_url = _url(args.prometheus, "--prometheus")
        alertmanager_url = _url(args.alertmanager, "--alertmanager")
        token = None
        if args.bearer_token_file is not None:
            if not args.bearer_token_file.is_file():
                raise ValueError(f"--bearer-token-file: expected a file holding a token, found no file at "
                                 f"{args.bearer_token_file}")
            token = args.bearer_token_file.read_text(errors="replace").strip()
            if not token:
                raise ValueError(f"--bearer-token-file: expected a token, found an empty file {args.bearer_token_file}")
        if args.ca_file is not None and not args.ca_file.is_file():
            raise ValueError(f"--ca-file: expected a PEM file, found no file at {args.ca_file}")
        if args.probe_timeout <= 0:
            raise ValueError(f"--probe-timeout: expected a positive number of seconds, found {args.probe_timeout:g}")
        from steps.names import is_dns_label

        if not is_dns_label(args.namespace):
            raise ValueError(f"--namespace: expected a namespace name (DNS label), found {args.namespace!r}")
    except (ValueError, OSError) as error:
        print(f"gpuaas doctor: {error}", file=sys.stderr)
        return 2
    if args.probe and prometheus_url is None and alertmanager_url is None:
        print("gpuaas doctor: --probe: expected --alertmanager URL (or --prometheus URL to find it), found neither",
              file=sys.stderr)
        return 2

    from gpuaas.doctor import checks
    from gpuaas.doctor import probe as probe_module
    from gpuaas.doctor.clients import Http, Kube
    from gpuaas.doctor.gather import Gatherer

    ca = str(args.ca_file) if args.ca_file else None
    try:
        kube = Kube.connect(args.kubeconfig, args.context, args.kube_url)
    except Exception as error:  # noqa: BLE001 - ConfigException and friends: one line for the admin
        print(f"gpuaas doctor: expected a cluster to check ($KUBECONFIG, --kubeconfig or --kube-url), found none "
              f"usable: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    from gpuaas.doctor.clients import Unreadable

    try:
        kube.get("/version")
    except Unreadable as error:
        print(f"gpuaas doctor: the Kubernetes API did not answer ({error}); check $KUBECONFIG, --kubeconfig, "
              "--context or --kube-url", file=sys.stderr)
        return 2
    gatherer = Gatherer(
        kube, args.namespace, progress=_progress,
        prometheus=Http.connect(prometheus_url, token=token, ca_file=ca) if prometheus_url else None,
        alertmanager=Http.connect(alertmanager_url, token=token, ca_file=ca) if alertmanager_url else None,
        discover_alertmanager=lambda url: Http.connect(url, token=token, ca_file=ca))
    facts = gatherer.gather()
    if args.probe:
        if gatherer.alertmanager_http is None:
            print("gpuaas doctor: --probe: no Alertmanager to send the test alert to (Prometheus reports none "
                  "reachable from here); pass --alertmanager URL", file=sys.stderr)
            return 2
        facts.probe = probe_module.run(kube, gatherer.alertmanager_http, args.namespace, timeout_s=args.probe_timeout,
                                       progress=_progress)
    report = checks.run(facts, probe_requested=args.probe)
    if args.output == "json":
        print(json.dumps(report.to_dict(), indent=2))
    else:
        from gpuaas.doctor.report import render_table

        print(render_table(report, verbose=args.verbose))
    return report.exit_code
