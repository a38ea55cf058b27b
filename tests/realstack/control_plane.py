"""A minimal real control plane for the node tests: etcd, kube-apiserver, controller-manager, scheduler.

Why here and this small: the node (gpuaas.cluster.node) needs an API server to register with and a
controller-manager for what every namespace gets (the `default` ServiceAccount, the
`kube-root-ca.crt` ConfigMap that a pod's token volume projects). `gpuaas cluster up` (the
`stack` branch) brings the whole control plane; when it is on main, these tests use it and this
file goes. All binaries are built from the modules pinned under stack/ (`gpuaas cluster build`, gpuaas.cluster.binaries);
the CA is throwaway, made with openssl; every server binds 127.0.0.1 on a free port.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from engine import ports
from gpuaas.cluster.binaries import program
from gpuaas.cluster.debian import debian_tool


def free_port() -> int:
    return ports.free_port()


def _openssl(*arguments: str) -> None:
    done = subprocess.run([debian_tool("openssl"), *arguments], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {arguments[0]} failed: {done.stderr.strip()[-500:]}")


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (Node,RBAC; NodeRestriction) + kube-controller-manager + kube-scheduler on loopback."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpuaas-cp-")))
    service_cidr: str = ""
    processes: list[tuple[str, subprocess.Popen, Path]] = field(default_factory=list)
    api_port: int = 0

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def _certificates(self, service_ip: str) -> None:
        pki = self.pki
        pki.mkdir(parents=True)
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(pki / "ca.key"),
                 "-out", str(pki / "ca.crt"), "-days", "2", "-subj", "/CN=gpuaas-test-ca")

        def sign(name: str, subject: str, extensions: str) -> None:
            (pki / f"{name}.ext").write_text(extensions)
            _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(pki / f"{name}.key"),
                     "-out", str(pki / f"{name}.csr"), "-subj", subject)
            _openssl("x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", str(pki / "ca.crt"),
                     "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-out", str(pki / f"{name}.crt"),
                     "-days", "2", "-extfile", str(pki / f"{name}.ext"))

        sign("apiserver", "/CN=kube-apiserver",
             f"subjectAltName=IP:127.0.0.1,IP:{service_ip},DNS:localhost,DNS:kubernetes,"
             "DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n")
        sign("admin", "/O=system:masters/CN=admin", "extendedKeyUsage=clientAuth\n")
        sign("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
             "extendedKeyUsage=clientAuth\n")
        _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
        _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))

    def _kubeconfig(self, path: Path, user: str, cert: Path, key: Path) -> None:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.server,
                                                      "certificate-authority": str(self.pki / "ca.crt")}}],
            "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        }))

    def _spawn(self, name: str, command: list[str]) -> None:
        log = self.workdir / f"{name}.log"
        with log.open("ab") as handle:
            process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        self.processes.append((name, process, log))

    def start(self, timeout: float = 60.0) -> None:
        # A random /24 in 10.100.0.0/14 for Services: clear of the usual 10.96.0.0/16 and `gpuaas cluster up`'s
        # 10.97.0.0/16; two test clusters on one machine (rarely) share a ClusterIP, which each node serves on
        # its own bridge (gpuaas.cluster.node.ServiceForwarder).
        if not self.service_cidr:
            subnet = list(ipaddress.ip_network("10.100.0.0/14").subnets(new_prefix=24))
            self.service_cidr = str(subnet[secrets.randbelow(len(subnet))])
        service_ip = str(ipaddress.ip_network(self.service_cidr).network_address + 1)
        self._certificates(service_ip)
        etcd_port, peer_port, self.api_port = free_port(), free_port(), free_port()
        self._spawn("etcd", [str(program("etcd", "etcd")), "--data-dir", str(self.workdir / "etcd"),
                             "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-cluster", f"default=http://127.0.0.1:{peer_port}"])
        pki = self.pki
        self._spawn("kube-apiserver", [
            str(program("kubernetes", "kube-apiserver")), "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(self.api_port),
            "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--service-account-key-file", str(pki / "sa.pub"), "--service-account-signing-key-file", str(pki / "sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
            "--service-cluster-ip-range", self.service_cidr,
            "--kubelet-client-certificate", str(pki / "apiserver-kubelet-client.crt"),
            "--kubelet-client-key", str(pki / "apiserver-kubelet-client.key"),
            "--kubelet-certificate-authority", str(pki / "ca.crt"),
            # Node names do not resolve on this machine: reach kubelets by the node's InternalIP.
            "--kubelet-preferred-address-types", "InternalIP",
        ])
        self._kubeconfig(self.admin_kubeconfig, "admin", pki / "admin.crt", pki / "admin.key")
        self._wait_ready(timeout)
        self._spawn("kube-controller-manager", [
            str(program("kubernetes", "kube-controller-manager")), "--kubeconfig", str(self.admin_kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", "0",
            "--service-account-private-key-file", str(pki / "sa.key"), "--root-ca-file", str(pki / "ca.crt"),
            "--use-service-account-credentials=false", "--leader-elect=false",
            # nodelifecycle stays: it lifts the not-ready taint the kubelet registers with.
            "--controllers", "*,-nodeipam,-service-lb-controller,-route",
            # its FlexVolume prober would create /usr/libexec/kubernetes/kubelet-plugins/volume/exec/ on the machine
            "--flex-volume-plugin-dir", str(self.workdir / "flexvolume"),
        ])
        # Argo's pods name no node: the scheduler places them.
        self._spawn("kube-scheduler", [str(program("kubernetes", "kube-scheduler")), "--kubeconfig", str(self.admin_kubeconfig),
                                       "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false"])

    def _listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.api_port), timeout=1).close()
        except OSError:
            return False
        return True

    def _wait_ready(self, timeout: float) -> None:
        from kubernetes import config

        api = config.new_client_from_config(str(self.admin_kubeconfig))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process, log in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}: {log.read_text()[-1500:]}")
            if self._listening():  # then ask for readiness (no urllib3 retries on a closed port)
                with contextlib.suppress(Exception):
                    if api.call_api("GET", f"{self.server}/readyz", _request_timeout=5).status == 200:
                        return
            time.sleep(0.3)
        raise RuntimeError(f"kube-apiserver not ready within {timeout:.0f}s")

    def stop(self) -> None:
        for _, process, _ in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        self.processes.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)


def main() -> int:
    """`python -m tests.realstack.control_plane`: run one in the foreground (prints JSON; SIGTERM stops it)."""
    import json
    import signal

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, _frame: stopping.append(number))
    signal.signal(signal.SIGINT, lambda number, _frame: stopping.append(number))
    plane = ControlPlane()
    started = time.monotonic()
    try:
        plane.start()
        print(json.dumps({"server": plane.server, "ca_cert": str(plane.pki / "ca.crt"),
                          "ca_key": str(plane.pki / "ca.key"), "admin_kubeconfig": str(plane.admin_kubeconfig),
                          "service_cidr": plane.service_cidr, "start_s": round(time.monotonic() - started, 3)}),
              flush=True)
        while not stopping:
            time.sleep(0.3)
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
