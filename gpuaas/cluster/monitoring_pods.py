"""One pod of a StatefulSet the Prometheus Operator made, run on this machine: the kubelet's part, done here.

The operator reconciles a `Prometheus` or `Alertmanager` into a StatefulSet, a config Secret (gzipped),
rule ConfigMaps, TLS and web-config Secrets; its pods land on KWOK nodes and run nothing. This program
runs pod `<statefulset>-0`'s containers that judge on the machine, from the operator's own pod template:

- every volume of the template is kept as a folder under `<dir>/volumes/<volume>/` (Secret and ConfigMap
  keys as files, rewritten in place when the object changes, checked every SYNC_SECONDS; emptyDir
  empty), and the pod's ServiceAccount token, CA and namespace under `<dir>/serviceaccount/`;
- each container it runs gets a private mount namespace (`unshare --mount`) where each volumeMount's
  mountPath is that folder, bind-mounted: `/etc/prometheus/...` (a tmpfs over Debian's own
  /etc/prometheus, inside the namespace only), `/var/run/secrets/kubernetes.io/serviceaccount`, and an
  `/etc/hosts` with the names a pod would resolve through cluster DNS (`--host NAME=IP`). So the
  configuration the operator generated is used unchanged, paths included;
- containers, in the template's order: `init-config-reloader` to completion, then `config-reloader`
  (the operator's prometheus-config-reloader, built from the pinned module: it decompresses the config
  Secret, expands $(POD_NAME), and reloads on any change) and the main program: Debian's `prometheus` or
  `prometheus-alertmanager` (the operator's `spec.version` pins their versions). Other containers of a
  platform's template (kube-rbac-proxy sidecars, thanos-sidecar) are not run: they are listed in the log.
- a pod has its own network namespace and IP; here it gets its own loopback address instead (`--ip`,
  127.77.x.y: `pod_ip`), and every `host:port` argument whose port is a containerPort of the pod
  (`:9090`, `localhost:9090`, `127.0.0.1:9093`) is moved to that address, the port unchanged. The data
  folder (`--storage.tsdb.path`, `--storage.path`) is the pod's emptyDir volume folder.

    python -m gpuaas.cluster.monitoring_pods --kubeconfig ADMIN --namespace monitoring --statefulset \\
        prometheus-main --dir STATE/pods/prometheus-main-0 --ip 127.77.3.4 \\
        --apiserver 127.0.0.1:6443 --host gpuaas-alertmanager-eventsource-svc.gpuaas.svc=127.77.9.1

Needs root (mount namespaces). SIGTERM stops the containers, then the program.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]
SYNC_SECONDS = 2.0
TOKEN_SECONDS = 3600
SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
RELOADER = "prometheus-config-reloader"
MAIN_PROGRAMS = {"prometheus": "prometheus", "alertmanager": "prometheus-alertmanager", "thanos-ruler": "prometheus"}
"""Container name -> the Debian program that runs it (Thanos Ruler: a STAND-IN, `thanos_ruler_argv`)."""
RELOADER_CONTAINERS = ("init-config-reloader", "config-reloader")
TMPFS_ROOTS = ("/etc/prometheus", "/etc/alertmanager")
"""Pod paths whose host folder is hidden by a tmpfs inside the container's namespace (Debian keeps its own
files in /etc/prometheus); mount points under them are made there. Others are created on the host, empty."""
DATA_FLAGS = ("--storage.tsdb.path=", "--storage.path=", "--data-dir=")


@dataclass
class Pod:
    """What this program needs of the pod template, resolved against the machine."""

    name: str
    namespace: str
    service_account: str
    volumes: list[JSON]
    init_containers: list[JSON]
    containers: list[JSON]
    ip: str = "127.0.0.1"


def _container_ports(pod: Pod) -> set[int]:
    return {p["containerPort"] for c in pod.containers + pod.init_containers for p in c.get("ports") or []}


def pod_ip(state_dir: Path | str, name: str) -> str:
    """The loopback address standing in for pod `name`'s IP in this cluster (127.77.x.y from a digest of
    both: clusters and pods beside each other on one machine get different ones)."""
    import hashlib

    digest = hashlib.sha256(f"{state_dir}/{name}".encode()).digest()
    return f"127.77.{digest[0]}.{max(2, digest[1])}"


def with_hosts(argv: list[str], hosts: Path) -> list[str]:
    """`argv` in a private mount namespace whose /etc/hosts is `hosts`: a program on this machine resolves
    Service names as a pod would through cluster DNS (KEDA's operator, querying the URL a ScaledObject names)."""
    script = 'mount --bind "$0" /etc/hosts && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(hosts), *argv]


def hosts_file(path: Path, names: dict[str, str]) -> Path:
    """An /etc/hosts with localhost and `names` (name -> address)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in sorted(names.items())))
    return path


def rewrite_args(args: list[str], ports: set[int], ip: str, data_dirs: dict[str, str]) -> list[str]:
    """The container's args as this machine runs them: a pod port's address -> the pod's loopback address,
    the data folder -> its host folder."""
    out = []
    for arg in args:
        for flag in DATA_FLAGS:
            if arg.startswith(flag) and arg[len(flag):] in data_dirs:
                arg = flag + data_dirs[arg[len(flag):]]

        def moved(match: re.Match[str]) -> str:
            port = int(match.group(2))
            return f"{ip}:{port}" if port in ports else match.group(0)
        arg = re.sub(r"(\[[^\]]*\]|[A-Za-z0-9.\-]*):(\d{2,5})\b", moved, arg)
        out.append(arg)
    return out


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=args.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.dir = Path(args.dir)
        self.args = args
        self.children: list[subprocess.Popen[bytes]] = []
        self.stopping = threading.Event()
        self.token_at = 0.0

    # -- the pod template ------------------------------------------------------------------------
    def pod(self) -> Pod:
        """The pod template of the StatefulSet, waiting for the operator to make it (a resource another
        controller creates later, e.g. OpenShift's user-workload Alertmanager, is waited for)."""
        from kubernetes.client import ApiException

        said = False
        while True:
            try:
                found = self.apps.read_namespaced_stateful_set(self.args.statefulset, self.args.namespace)
                break
            except ApiException as error:
                if error.status != 404:
                    raise
            if not said:
                print(f"waiting for StatefulSet {self.args.namespace}/{self.args.statefulset}", flush=True)
                said = True
            if self.stopping.wait(SYNC_SECONDS):
                raise SystemExit(0)
        sts = self.api.sanitize_for_serialization(found)
        spec = sts["spec"]["template"]["spec"]
        pod = Pod(f"{self.args.statefulset}-0", self.args.namespace, spec.get("serviceAccountName") or "default",
                  spec.get("volumes") or [], spec.get("initContainers") or [], spec.get("containers") or [])
        pod.ip = self.args.ip
        return pod

    # -- volumes (the kubelet's part) --------------------------------------------------------------
    def sync(self, pod: Pod) -> None:
        for volume in pod.volumes:
            folder = self.dir / "volumes" / volume["name"]
            folder.mkdir(parents=True, exist_ok=True)
            files: dict[str, bytes] | None = None
            if "secret" in volume:
                files = self._secret(pod.namespace, volume["secret"]["secretName"], volume["secret"].get("items"))
            elif "configMap" in volume:
                files = self._config_map(pod.namespace, volume["configMap"]["name"], volume["configMap"].get("items"))
            elif "projected" in volume:
                files = {}
                for source in volume["projected"].get("sources") or []:
                    if "secret" in source:
                        files.update(self._secret(pod.namespace, source["secret"]["name"],
                                                  source["secret"].get("items")) or {})
                    elif "configMap" in source:
                        files.update(self._config_map(pod.namespace, source["configMap"]["name"],
                                                      source["configMap"].get("items")) or {})
            if files is not None:
                _write_files(folder, files)
        self._service_account(pod)

    def _secret(self, namespace: str, name: str, items: list[JSON] | None) -> dict[str, bytes] | None:
        from kubernetes.client import ApiException

        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        return _items(data, items)

    def _config_map(self, namespace: str, name: str, items: list[JSON] | None) -> dict[str, bytes] | None:
        from kubernetes.client import ApiException

        try:
            found = self.core.read_namespaced_config_map(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        data = {k: v.encode() for k, v in (found.data or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (found.binary_data or {}).items()})
        return _items(data, items)

    def _service_account(self, pod: Pod) -> None:
        from kubernetes import client

        if time.monotonic() - self.token_at < TOKEN_SECONDS / 2:
            return
        request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=TOKEN_SECONDS))
        token = self.core.create_namespaced_service_account_token(pod.service_account, pod.namespace, request)
        folder = self.dir / "serviceaccount"
        folder.mkdir(parents=True, exist_ok=True)
        _write_files(folder, {"token": token.status.token.encode(), "namespace": pod.namespace.encode(),
                              "ca.crt": Path(self.args.ca).read_bytes()})
        self.token_at = time.monotonic()

    # -- containers ----------------------------------------------------------------------------------
    def mounts(self, pod: Pod, container: JSON) -> list[tuple[str, Path]]:
        """(pod path, host folder or file) for the container: its volumeMounts, the token, /etc/hosts."""
        out = [(m["mountPath"], self.dir / "volumes" / m["name"] / (m.get("subPath") or ""))
               for m in container.get("volumeMounts") or [] if m["mountPath"] != SERVICE_ACCOUNT_PATH]
        out.append((SERVICE_ACCOUNT_PATH, self.dir / "serviceaccount"))
        out.append(("/etc/hosts", hosts_file(self.dir / "etc-hosts", dict(self.args.host))))
        return out

    def thanos_ruler_argv(self, pod: Pod, args: list[str], container: JSON | None = None) -> list[str]:
        """Thanos Ruler's args as a Debian Prometheus that does its job here (a STAND-IN): the same rule files
        (the operator's, as mounted), evaluated every `--eval-interval` over the series `--thanos-query`
        serves through remote read (what thanos-querier gives Thanos Ruler: the platform's series), alerts
        sent to `--thanos-alertmanager`, its HTTP API on `--http-address`."""
        def value(flag: str) -> list[str]:
            return [a.split("=", 1)[1] for a in args if a.startswith(f"--{flag}=")]
        # Thanos globs folders too (`/etc/thanos/rules/*/*.yaml`); Prometheus only the file name: one entry per
        # mounted folder the pattern names
        import fnmatch
        import posixpath

        mounts = [m["mountPath"] for m in (container or {}).get("volumeMounts") or []]
        rule_files = []
        for pattern in value("rule-file"):
            folder, name = posixpath.split(pattern)
            rule_files += ([f"{m}/{name}" for m in mounts if fnmatch.fnmatch(m, folder)] if "*" in folder else [pattern])
        config = {"global": {"evaluation_interval": (value("eval-interval") or ["15s"])[0]},
                  "rule_files": rule_files,
                  "remote_read": [{"url": f"{self.args.thanos_query}/api/v1/read", "read_recent": True}],
                  "alerting": {"alertmanagers": [{"api_version": "v2",
                                                  "static_configs": [{"targets": [self.args.thanos_alertmanager]}]}]}}
        path = self.dir / "thanos-ruler-stand-in.yml"
        import yaml

        path.write_text(yaml.safe_dump(config, sort_keys=False))
        data = (value("data-dir") or [str(self.dir / "data")])[0]
        return [f"--config.file={path}", f"--storage.tsdb.path={data}", "--web.enable-lifecycle",
                f"--web.listen-address={(value('http-address') or [f'{pod.ip}:10902'])[0]}"]

    def argv(self, pod: Pod, container: JSON) -> list[str]:
        name = container["name"]
        if name in RELOADER_CONTAINERS:
            program = self.args.reloader
        else:
            program = shutil.which(MAIN_PROGRAMS[name]) or MAIN_PROGRAMS[name]
        # the data folder: an emptyDir a DATA_FLAGS argument names is passed as its host folder (not mounted)
        data_dirs = {m["mountPath"]: str(self.dir / "volumes" / m["name"]) for m in container.get("volumeMounts") or []
                     if any(v["name"] == m["name"] and "emptyDir" in v for v in pod.volumes)
                     and any(a == flag + m["mountPath"] for a in container.get("args") or [] for flag in DATA_FLAGS)}
        # the kubelet expands $(VAR) in args from the container's env (e.g. Alertmanager's [$(POD_IP)]:9094)
        env = self.env(pod, container)
        raw = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in container.get("args") or []]
        args = rewrite_args(raw, _container_ports(pod), pod.ip, data_dirs)
        if name == "thanos-ruler":
            args = self.thanos_ruler_argv(pod, args, container)
        elif name in ("prometheus", "alertmanager") and not any(a.startswith("--web.listen-address=") for a in args):
            # without the flag the program listens on every address (its default, as in a pod's own network)
            port = next(p["containerPort"] for p in container.get("ports") or [])
            args.append(f"--web.listen-address={pod.ip}:{port}")
        if name == "alertmanager" and not any(a.startswith("--cluster.listen-address") for a in args):
            args.append("--cluster.listen-address=")  # one replica: no gossip on the machine's every address
        script = ["set -e"]
        for root in TMPFS_ROOTS:
            script.append(f"mkdir -p {root} && mount -t tmpfs tmpfs {root}")
        for target, source in self.mounts(pod, container):
            if target in data_dirs:
                continue  # the data folder is passed as the host folder itself (rewrite_args)
            made = f"mkdir -p \"$(dirname '{target}')\" && touch '{target}'" if source.is_file() else f"mkdir -p '{target}'"
            script.append(f"{made} && mount --bind '{source}' '{target}'")
        script.append('exec "$@"')
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "; ".join(script), name, program, *args]

    def env(self, pod: Pod, container: JSON) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "KUBERNETES_SERVICE_HOST": self.args.apiserver.rsplit(":", 1)[0],
               "KUBERNETES_SERVICE_PORT": self.args.apiserver.rsplit(":", 1)[1]}
        for entry in container.get("env") or []:
            if "value" in entry:
                env[entry["name"]] = entry["value"]
            elif (entry.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
                env[entry["name"]] = pod.name
            elif (entry.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
                env[entry["name"]] = pod.namespace
            elif (entry.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
                env[entry["name"]] = pod.ip
        return env

    def start(self, pod: Pod, container: JSON) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{container['name']}.log", "ab")  # noqa: SIM115 - the child keeps it
        print(f"starting container {container['name']}", flush=True)
        return subprocess.Popen(self.argv(pod, container), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=self.env(pod, container), start_new_session=True)

    def run(self) -> int:
        pod = self.pod()
        self.sync(pod)
        skipped = [c["name"] for c in pod.containers + pod.init_containers
                   if c["name"] not in MAIN_PROGRAMS and c["name"] not in RELOADER_CONTAINERS]
        print(f"pod {pod.namespace}/{pod.name}: not run here: {', '.join(skipped) or 'none'}", flush=True)
        for container in pod.init_containers:
            if container["name"] in RELOADER_CONTAINERS:
                done = self.start(pod, container).wait(timeout=120)
                if done != 0:
                    print(f"init container {container['name']} exited {done}", flush=True)
                    return 1
        for container in pod.containers:
            if container["name"] in MAIN_PROGRAMS or container["name"] in RELOADER_CONTAINERS:
                self.children.append(self.start(pod, container))
        while not self.stopping.wait(SYNC_SECONDS):
            for child in self.children:
                if child.poll() is not None:
                    print(f"container pid {child.pid} exited {child.returncode}: stopping the pod", flush=True)
                    self.stop()
                    return 1
            try:
                self.sync(pod)
            except Exception as error:  # noqa: BLE001 - the apiserver may be briefly away; retried
                print(f"sync failed (retried): {error}", flush=True)
        return 0

    def stop(self, *_: Any) -> None:
        self.stopping.set()
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


def _items(data: dict[str, bytes], items: list[JSON] | None) -> dict[str, bytes]:
    if not items:
        return data
    return {item["path"]: data[item["key"]] for item in items if item["key"] in data}


def _write_files(folder: Path, files: dict[str, bytes]) -> None:
    """The kubelet's atomic update, by file: changed files replaced by rename, removed keys deleted.
    (In place, not by swapping the folder: a bind mount keeps pointing at the folder it was given.)"""
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.read_bytes() == content:
            continue
        partial = path.with_name(f".{path.name}.partial")
        partial.write_bytes(content)
        partial.replace(path)
    for path in folder.iterdir():
        if path.is_file() and not path.name.startswith(".") and path.name not in files:
            path.unlink()


def _pair(text: str) -> tuple[str, str]:
    name, _, value = text.partition("=")
    if not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, found {text!r}")
    return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuaas.cluster.monitoring_pods", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--statefulset", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--ca", required=True, help="the cluster CA (the token folder's ca.crt)")
    parser.add_argument("--apiserver", required=True, help="HOST:PORT (in-cluster config of the programs)")
    parser.add_argument("--reloader", required=True, help="the built prometheus-config-reloader")
    parser.add_argument("--ip", required=True, help="the pod's loopback address (pod_ip)")
    parser.add_argument("--thanos-query", default="", help="Thanos Ruler's stand-in: the Prometheus URL it reads")
    parser.add_argument("--thanos-alertmanager", default="", help="Thanos Ruler's stand-in: HOST:PORT it alerts")
    parser.add_argument("--host", type=_pair, action="append", default=[], metavar="NAME=IP")
    args = parser.parse_args(argv)
    runner = Runner(args)
    signal.signal(signal.SIGTERM, lambda *_: runner.stopping.set())
    try:
        return runner.run()
    finally:
        runner.stop()


if __name__ == "__main__":
    sys.exit(main())
