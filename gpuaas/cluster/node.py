"""A real Kubernetes node on this machine: containerd + runc + the kubelet, joined to an API server.

Why a real node: the WorkflowTemplates' step pods must run as on a cluster (Argo's executor,
outputs, exit codes, retries, exit handlers), and only a kubelet runs a pod as a kubelet does.
Everything here is the real program, configured for this VM:

| part | what | configured for this VM because |
|---|---|---|
| network | a Linux bridge of its own (`gpuaas-NNN`), a /24 for pods, Debian's CNI `bridge` + `host-local` + `loopback` plugins | loopback-only machine: the bridge is host-internal, nothing is routed out; the node IP is the bridge's address (the kubelet refuses a loopback node IP) |
| containerd | Debian's 1.6, CRI plugin, overlayfs snapshotter, runc, cgroupfs; every path in the node's work folder | `restrict_oom_score_adj`: the VM denies CAP_SYS_RESOURCE, so runc cannot lower a container's oom_score_adj below containerd's own (the pause container asks for -998) |
| kubelet | built from the pinned `k8s.io/kubernetes`, `failCgroupV1: false`, cgroup root of its own, pod logs in the work folder | the cgroup hierarchy is v1; two nodes must not share cgroups or pod logs |
| service forwarder | **a stand-in for kube-proxy**: socat on the `kubernetes` Service's ClusterIP:443 forwarding to the API server on 127.0.0.1, and on the fixed ClusterIPs of the few Services `gpuaas cluster up` gives to programs on loopback (gpuaas.cluster.services) | the API server binds 127.0.0.1 (it publishes no endpoints for a loopback address), and the other programs listen on loopback only, so kube-proxy would have nothing to route to |

Several nodes per machine: the kubelet and containerd of each run in a mount namespace of their own
(gpuaas.cluster.mount_namespace), where the machine paths compiled into them (the kubelet's
device-plugin socket folder `/var/lib/kubelet/device-plugins`, `/var/log/containers`,
containerd's `/run/containerd`, the CNI cache `/var/lib/cni`) are folders of the node's own, and
every mount they make (pods' volumes, containers' root filesystems, network namespaces) stays
in that namespace. Each node has its own bridge, /24, cgroup root and containerd image store; the
Service addresses its stand-in for kube-proxy listens on are bound to its bridge
(SO_BINDTODEVICE), so the same ClusterIP serves each node's pods from its own cluster.

    network = NodeNetwork.choose()
    credentials = NodeCredentials.issue(ca_cert, ca_key, server_url, "gpuaas-node", workdir, [network.node_ip])
    with Node(credentials, network=network) as node:   # start() ... stop(); stop() removes every trace
        node.import_images(build_all())
        node.wait_ready()
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import yaml

from gpuaas.cluster import mount_namespace
from gpuaas.cluster.binaries import program
from gpuaas.cluster.debian import ToolMissing, cni_plugin_dir, debian_tool
from gpuaas.cluster.mount_namespace import MachineShare, MountNamespace, NamespaceError

CGROUP_V1_ROOT = Path("/sys/fs/cgroup")
NETWORK_LOCK = Path("/run/lock/gpuaas-nodes.network.lock")
"""Held while a node picks its /24 and creates its bridge, so two nodes starting at once never pick the same."""
IMAGE_ROOTS = 8
"""Image stores a kept `image_root` may grow to, one per node running at once."""
POD_SUBNETS = ipaddress.ip_network("10.244.0.0/16")
"""Each node takes a free /24 of this range for its bridge and pods."""
DEFAULT_PAUSE_IMAGE = "gpuaas.local/pause:3.10.2"


class NodeError(RuntimeError):
    """The node could not start or stop cleanly; the message says what failed and where its log is."""


def _run(command: list[str], what: str, *, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NodeError(f"{what} failed (exit {done.returncode}): {' '.join(command)}: "
                        f"{(done.stdout + done.stderr).strip()[-800:]}")
    return done


def _log_tail(path: Path, lines: int = 12) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _rss_kib(pid: int) -> int:
    """Resident memory of one process in KiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# --- network -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeNetwork:
    """The node's bridge and pod subnet: node IP = first address, pods from .10 on."""

    bridge: str
    subnet: ipaddress.IPv4Network

    @property
    def node_ip(self) -> str:
        return str(self.subnet.network_address + 1)

    @classmethod
    def choose(cls) -> NodeNetwork:
        """A /24 of 10.244.0.0/16 that no interface, route or gpuaas bridge of this machine uses yet.

        The bridge is created at once (under NETWORK_LOCK), so a node starting beside this one picks
        another; `Node.stop()` (or `delete()`) removes it."""
        NETWORK_LOCK.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(NETWORK_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            network = cls._free()
            network.create()
            return network
        finally:
            os.close(descriptor)

    @classmethod
    def _free(cls) -> NodeNetwork:
        bridges = {line.split(":")[1].strip().split("@")[0]
                   for line in _run(["ip", "-o", "link", "show"], "listing links").stdout.splitlines() if ":" in line}
        used: list[ipaddress.IPv4Network] = []
        for line in _run(["ip", "-4", "-o", "addr", "show"], "listing addresses").stdout.splitlines():
            used.append(ipaddress.ip_interface(line.split()[3]).network)
        for line in _run(["ip", "-4", "route", "show"], "listing routes").stdout.splitlines():
            destination = line.split()[0]
            if destination != "default":
                used.append(ipaddress.ip_network(destination, strict=False))
        candidates = list(POD_SUBNETS.subnets(new_prefix=24))[1:]
        start = secrets.randbelow(len(candidates))
        for subnet in candidates[start:] + candidates[:start]:
            bridge = f"gpuaas-{subnet.network_address.packed[2]}"
            if bridge not in bridges and not any(subnet.overlaps(other) for other in used):
                return cls(bridge=bridge, subnet=subnet)
        raise NodeError(f"no free /24 in {POD_SUBNETS} for the node's pods: every one overlaps an address or route")

    def cni_config(self, ipam_dir: Path) -> dict:
        """The CNI network: Debian's bridge plugin on our bridge, host-local IPAM, loopback."""
        return {
            "cniVersion": "1.0.0", "name": "gpuaas-pods",
            "plugins": [
                # isGateway false: the bridge has its address already (create()), and a gateway bridge makes the
                # plugin turn on net.ipv4.ip_forward for the whole machine, which nothing here needs (pods
                # reach only addresses on their own bridge); the pods still get the default route via it.
                {"type": "bridge", "bridge": self.bridge, "isGateway": False, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                          "ranges": [[{"subnet": str(self.subnet), "rangeStart": str(self.subnet.network_address + 10),
                                       "gateway": self.node_ip}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "loopback"},
            ],
        }

    @property
    def bridge_mac(self) -> str:
        """The bridge's own address: locally administered, from the node IP. Set explicitly because a
        bridge without one takes the lowest MAC of its ports and changes as pods' veths come and go,
        leaving the pods' ARP entries for the gateway and the ClusterIPs on it stale."""
        return "02:00:" + ":".join(f"{byte:02x}" for byte in ipaddress.IPv4Address(self.node_ip).packed)

    def exists(self) -> bool:
        return Path("/sys/class/net", self.bridge).exists()

    def create(self) -> None:
        _run(["ip", "link", "add", self.bridge, "address", self.bridge_mac, "type", "bridge"],
             f"creating bridge {self.bridge}")
        _run(["ip", "addr", "add", f"{self.node_ip}/{self.subnet.prefixlen}", "dev", self.bridge], "addressing the bridge")
        _run(["ip", "link", "set", self.bridge, "up"], "bringing the bridge up")

    def add_address(self, address: str) -> None:
        _run(["ip", "addr", "add", f"{address}/32", "dev", self.bridge], f"adding {address} to {self.bridge}")

    def delete(self) -> None:
        _run(["ip", "link", "del", self.bridge], f"deleting bridge {self.bridge}", check=False)


# --- credentials -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeCredentials:
    """What the kubelet presents and trusts: its kubeconfig (system:node:NAME), serving cert, cluster CA."""

    node_name: str
    server: str
    ca_cert: Path
    kubeconfig: Path
    serving_cert: Path
    serving_key: Path

    @classmethod
    def issue(cls, ca_cert: Path, ca_key: Path, server: str, node_name: str, directory: Path,
              node_ips: Iterable[str] = ()) -> NodeCredentials:
        """Sign a client cert (CN system:node:NAME, O system:nodes) and a serving cert with the cluster CA.

        The Node authorizer and NodeRestriction admission recognise the kubelet by exactly that
        subject; the serving cert lets an API server started with `--kubelet-certificate-authority`
        verify the kubelet when it proxies `kubectl logs`.
        """
        openssl = debian_tool("openssl")
        directory.mkdir(parents=True, exist_ok=True)

        def sign(name: str, subject: str, extensions: str) -> tuple[Path, Path]:
            key, csr, cert, ext = (directory / f"{name}.{suffix}" for suffix in ("key", "csr", "crt", "ext"))
            _run([openssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
                  "-subj", subject], f"a key for {name}")
            ext.write_text(extensions)
            _run([openssl, "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
                  "-CAcreateserial", "-CAserial", str(directory / "ca.srl"), "-out", str(cert), "-days", "7",
                  "-extfile", str(ext)], f"signing {name}")
            return cert, key

        client_cert, client_key = sign("kubelet-client", f"/O=system:nodes/CN=system:node:{node_name}",
                                       "extendedKeyUsage=clientAuth\n")
        names = ",".join([f"DNS:{node_name}", "DNS:localhost", "IP:127.0.0.1", *(f"IP:{ip}" for ip in node_ips)])
        serving_cert, serving_key = sign("kubelet-serving", f"/O=system:nodes/CN=system:node:{node_name}",
                                         f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
        kubeconfig = directory / "kubelet.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "node",
            "clusters": [{"name": "cluster", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}],
            "users": [{"name": node_name, "user": {"client-certificate": str(client_cert),
                                                    "client-key": str(client_key)}}],
            "contexts": [{"name": "node", "context": {"cluster": "cluster", "user": node_name}}],
        }))
        return cls(node_name, server, ca_cert, kubeconfig, serving_cert, serving_key)


# --- processes -----------------------------------------------------------------------------------------


@dataclass
class _Daemon:
    """One long-running program with its log; stopped by the pid we started."""

    name: str
    command: list[str]
    log: Path
    process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def require_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise NodeError(f"{self.name} exited with {self.process.returncode}; last lines of {self.log}:\n"
                            f"{_log_tail(self.log)}")

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


@dataclass
class Containerd:
    """containerd with the CRI plugin, every path under `workdir`, for one node."""

    workdir: Path
    network: NodeNetwork
    sandbox_image: str = DEFAULT_PAUSE_IMAGE
    daemon: _Daemon | None = None
    image_root: Path | None = None
    """containerd's `root` (content store, snapshots) when it should outlive the node, as /var/lib/containerd
    outlives a reboot: imported images are then imported once. The `state` (sockets, network
    namespaces, runc) is always the node's own and goes with it."""
    namespace: MountNamespace | None = None
    """The node's mount namespace: containerd, its shims, runc and the CNI plugins run in it."""

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd.sock"

    @property
    def config_path(self) -> Path:
        return self.workdir / "containerd.toml"

    def config(self) -> str:
        """containerd 1.6's config (version 2): CRI on runc with cgroupfs, CNI from Debian's plugins."""
        root, state = self.image_root or self.workdir / "root", self.workdir / "state"
        return f"""version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.workdir / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{self.sandbox_image}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # This VM denies CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (the sandbox asks for -998).
  restrict_oom_score_adj = true
  # Network namespaces under the node's own state folder, not /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{debian_tool('runc')}"
        Root = "{state / 'runc'}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_plugin_dir()}"
    conf_dir = "{self.workdir / 'cni'}"
"""

    def start(self) -> None:
        (self.workdir / "cni").mkdir(parents=True, exist_ok=True)
        (self.workdir / "cni" / "10-gpuaas.conflist").write_text(
            json.dumps(self.network.cni_config(self.workdir / "cni-ipam"), indent=2))
        self.config_path.write_text(self.config())
        command = [debian_tool("containerd"), "--config", str(self.config_path)]
        self.daemon = _Daemon("containerd", self.namespace.command(command) if self.namespace else command,
                              self.workdir / "containerd.log")
        self.daemon.start()

    def ctr(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run `ctr` against this containerd, in the CRI's `k8s.io` namespace."""
        return _run([debian_tool("ctr"), "--address", str(self.socket), "--namespace", "k8s.io", *arguments],
                    f"ctr {arguments[0] if arguments else ''}", check=check)

    def ready(self) -> bool:
        return self.socket.exists() and self.ctr("version", check=False).returncode == 0

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            assert self.daemon is not None
            self.daemon.require_alive()
            if time.monotonic() > deadline:
                raise NodeError(f"containerd did not answer on {self.socket} within {timeout:.0f}s; "
                                f"log {self.daemon.log}:\n{_log_tail(self.daemon.log)}")
            time.sleep(0.2)

    def import_image(self, archive: Path) -> None:
        """`ctr images import` of an OCI archive (see gpuaas.cluster.images); the CRI sees it at once."""
        self.ctr("images", "import", "--no-unpack=false", str(archive))

    def images(self) -> list[str]:
        return [line for line in self.ctr("images", "ls", "-q").stdout.splitlines() if not line.startswith("sha256:")]

    def shim_pids(self) -> list[int]:
        """containerd-shim processes this containerd started (their command line names our socket)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline and cmdline[0].endswith(b"containerd-shim-runc-v2") and str(self.socket).encode() in cmdline:
                pids.append(int(entry.name))
        return pids

    def remove_all_tasks(self) -> None:
        """Kill and delete every container task, then every container (the node's pods, gone)."""
        if not self.ready():
            return
        for line in self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:]:
            task = line.split()[0]
            self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            listed = self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:]
            if all(" STOPPED" in line or "STOPPED" in line.split() for line in listed):
                break
            time.sleep(0.2)
        for line in self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:]:
            self.ctr("tasks", "delete", "--force", line.split()[0], check=False)
        for container in self.ctr("containers", "ls", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", container, check=False)

    def stop(self) -> None:
        self.remove_all_tasks()
        for pid in self.shim_pids():  # a shim whose task could not be deleted
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.daemon is not None:
            self.daemon.stop()


@dataclass
class Kubelet:
    """The kubelet from the pinned Kubernetes module, registered as `credentials.node_name`."""

    workdir: Path
    credentials: NodeCredentials
    network: NodeNetwork
    containerd_socket: Path
    cgroup_root: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict] = field(default_factory=list)
    daemon: _Daemon | None = None
    namespace: MountNamespace | None = None
    """The node's mount namespace, shared with its containerd: the pods' volumes the kubelet mounts
    are what runc binds into the containers."""

    def configuration(self) -> dict:
        """The KubeletConfiguration: cgroup v1 allowed, loopback-only machine, paths under workdir."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # KEP-5573: since v1.35 the kubelet refuses cgroup v1 unless told; this VM has only v1.
            "failCgroupV1": False,
            "address": self.network.node_ip, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 0,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.credentials.ca_cert)}},
            # Any client certificate signed by the cluster CA may use the kubelet API (the API server's
            # kubelet client among them): a test node, not a multi-tenant one.
            "authorization": {"mode": "AlwaysAllow"},
            "tlsCertFile": str(self.credentials.serving_cert),
            "tlsPrivateKeyFile": str(self.credentials.serving_key),
            "cgroupDriver": "cgroupfs", "cgroupRoot": self.cgroup_root, "cgroupsPerQOS": True,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "podLogsDir": str(self.workdir / "pod-logs"),
            "staticPodPath": str(self.workdir / "static-pods"),
            "registerNode": True,
            "registerWithTaints": self.taints,
            "failSwapOn": False,
            # The node shares this machine: no evictions and no image garbage collection (the images
            # are imported, not pullable), no node-allocatable enforcement on the machine's cgroups.
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "enforceNodeAllocatable": [],
            "resolvConf": "",
            "serializeImagePulls": False,
            "localStorageCapacityIsolation": False,
            # Machine-wide state the kubelet would otherwise leave behind: iptables chains (KUBE-FIREWALL,
            # KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY; pkg/kubelet/kubelet_network_linux.go) that nothing
            # here needs, and the FlexVolume folder /usr/libexec/kubernetes/kubelet-plugins/volume/exec/.
            "makeIPTablesUtilChains": False,
            "volumePluginDir": str(self.workdir / "volume-plugins"),
        }

    def start(self) -> None:
        for folder in ("root", "pod-logs", "static-pods", "volume-plugins", "pki"):
            (self.workdir / folder).mkdir(parents=True, exist_ok=True)
        config = self.workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self.configuration()))
        labels = ",".join(f"{key}={value}" for key, value in sorted(self.labels.items()))
        command = [str(program("kubernetes", "kubelet")), "--config", str(config), "--kubeconfig", str(self.credentials.kubeconfig),
                   "--root-dir", str(self.workdir / "root"), "--cert-dir", str(self.workdir / "pki"),
                   "--hostname-override", self.credentials.node_name, "--node-ip", self.network.node_ip, "-v", "1"]
        if labels:
            command += ["--node-labels", labels]
        self.daemon = _Daemon("kubelet", self.namespace.command(command) if self.namespace else command,
                              self.workdir / "kubelet.log")
        self.daemon.start()

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()


@dataclass(frozen=True)
class ForwardedService:
    """One Service address the stand-in forwards: ClusterIP:port -> a program on this machine's loopback."""

    cluster_ip: str
    port: int
    upstream: str
    """host:port on 127.0.0.1 (the API server, NATS, Prometheus...)."""

    @classmethod
    def parse(cls, text: str) -> ForwardedService:
        """`CLUSTER_IP:PORT=HOST:PORT`, as `python -m gpuaas.cluster.node --forward` takes it."""
        try:
            service, upstream = text.split("=", 1)
            ip, port = service.rsplit(":", 1)
            ipaddress.ip_address(ip)
            _host, upstream_port = upstream.rsplit(":", 1)
            int(upstream_port)
            return cls(ip, int(port), upstream)
        except ValueError:
            raise NodeError(f"--forward: expected CLUSTER_IP:PORT=HOST:PORT (10.97.0.42:4222=127.0.0.1:40123), "
                            f"found {text!r}") from None


@dataclass
class ServiceForwarder:
    """STAND-IN for kube-proxy: socat per forwarded Service (see the module docstring).

    For each Service, socat listens on its ClusterIP and port (an address added to the node's bridge)
    and forwards each connection to a program on 127.0.0.1: the `kubernetes` Service to the API
    server, and the Services `gpuaas cluster up` gives fixed ClusterIPs for what runs on this
    machine's loopback (NATS, Prometheus; gpuaas.cluster.services). The listener is bound to the
    bridge (`so-bindtodevice`): every cluster uses the same ClusterIPs, so two nodes put the same
    address on their bridges, and each node's pods (whose packets arrive on its bridge) reach the
    listener of their own node, which forwards to their own cluster.
    """

    services: list[ForwardedService]
    log: Path
    device: str
    """The node's bridge: only connections arriving on it reach these listeners."""
    daemons: list[_Daemon] = field(default_factory=list)

    def start(self) -> None:
        for service in self.services:
            host, _, upstream_port = service.upstream.rpartition(":")
            daemon = _Daemon(f"service forwarder {service.cluster_ip}:{service.port} (stand-in for kube-proxy)",
                             [debian_tool("socat"),
                              (f"TCP-LISTEN:{service.port},bind={service.cluster_ip},"
                               f"so-bindtodevice={self.device},fork,reuseaddr"),
                              f"TCP:{host}:{upstream_port}"], self.log)
            daemon.start()
            self.daemons.append(daemon)

    def pids(self) -> list[int]:
        return [d.process.pid for d in self.daemons if d.process is not None]

    def stop(self) -> None:
        for daemon in self.daemons:
            daemon.stop()


# --- the node ------------------------------------------------------------------------------------------


def _cgroup_hierarchies(*, unified: bool = False) -> list[Path]:
    """The mounted cgroup v1 hierarchies (cpu, memory, ..., name=systemd), and with `unified` the cgroup2
    one beside them (`/sys/fs/cgroup/unified` on a hybrid machine: runc creates the node's groups there too)."""
    kinds = ("cgroup", "cgroup2") if unified else ("cgroup",)
    hierarchies = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, kind, *_ = line.split()
        if kind in kinds and point.startswith(str(CGROUP_V1_ROOT)):
            hierarchies.append(Path(point))
    return sorted(set(hierarchies))


def _create_cgroup(name: str) -> None:
    for hierarchy in _cgroup_hierarchies():
        group = hierarchy / name
        group.mkdir(exist_ok=True)
        for inherited in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset child starts empty
            if (group / inherited).exists() and not (group / inherited).read_text().strip():
                (group / inherited).write_text((hierarchy / inherited).read_text())


def _remove_cgroup(name: str) -> None:
    for hierarchy in _cgroup_hierarchies(unified=True):
        group = hierarchy / name
        if not group.exists():
            continue
        for directory, _, _ in sorted(os.walk(group), key=lambda entry: len(entry[0]), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def _kill_cgroup(name: str) -> None:
    """SIGKILL every process in the node's cgroup tree (containers the runtime could not stop)."""
    for _ in range(50):
        pids = set()
        for hierarchy in _cgroup_hierarchies(unified=True):
            for procs in (hierarchy / name).rglob("cgroup.procs") if (hierarchy / name).is_dir() else ():
                with contextlib.suppress(OSError):
                    pids.update(int(pid) for pid in procs.read_text().split())
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _unmount_under(root: Path) -> None:
    prefix = str(root.resolve())
    mounted = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((m for m in mounted if m == prefix or m.startswith(prefix + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


class Node:
    """containerd + kubelet (+ the API service stand-in) as one component: start, ready, stop.

    `stop()` leaves nothing behind: pods' processes, mounts, cgroups, the bridge, the work folder.
    """

    def __init__(self, credentials: NodeCredentials, *, workdir: Path | None = None,
                 labels: dict[str, str] | None = None, taints: list[dict] | None = None,
                 sandbox_image: str = DEFAULT_PAUSE_IMAGE, network: NodeNetwork | None = None,
                 image_root: Path | None = None, forwards: list[ForwardedService] | None = None) -> None:
        self.credentials = credentials
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="gpuaas-node-"))
        self.labels = {"gpuaas.io/pod-runtime": "kubelet", **(labels or {})}
        self.taints = taints or []
        self.sandbox_image = sandbox_image
        self.network: NodeNetwork | None = network
        """Chosen at start() unless given (NodeNetwork.choose(), to put the node IP in the kubelet's serving cert)."""
        self.containerd: Containerd | None = None
        self.kubelet: Kubelet | None = None
        self.forwarder: ServiceForwarder | None = None
        self.namespace: MountNamespace | None = None
        self.share = MachineShare()
        self.image_root_base = image_root
        """containerd's root kept across node starts (imported images stay), or None: in the workdir. A node
        beside another takes the first of `<root>`, `<root>-2`, ... that no running node holds."""
        self.image_root: Path | None = None
        self._image_root_lock: int | None = None
        self.forwards = list(forwards or [])
        """Services besides `kubernetes` that the stand-in for kube-proxy forwards."""
        self.cgroup_root = f"gpuaas-{secrets.token_hex(4)}"
        self.started_at: float | None = None

    # lifecycle ----------------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _claim_image_root(self) -> Path | None:
        """The first image store of the pool no running node holds (containerd locks its store's database)."""
        if self.image_root_base is None:
            return None
        base = self.image_root_base
        for index in range(1, IMAGE_ROOTS + 1):
            root = base if index == 1 else base.with_name(f"{base.name}-{index}")
            root.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(root.with_name(root.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                continue
            self._image_root_lock = descriptor
            return root
        raise NodeError(f"all {IMAGE_ROOTS} image stores {base}, {base.name}-2... are in use by running nodes; "
                        "stop one, or give this node another --image-root")

    def start(self) -> None:
        """Bridge, mount namespace, containerd, kubelet, API service forwarder; returns once containerd answers."""
        self.started_at = time.monotonic()
        try:
            services = self._forwarded_services()
            self.share.join()
            self.network = self.network or NodeNetwork.choose()
            if not self.network.exists():
                self.network.create()
            _create_cgroup(self.cgroup_root)
            self.image_root = self._claim_image_root()
            self.namespace = MountNamespace(self.workdir / "host")
            self.namespace.start()
            self.containerd = Containerd(self.workdir / "containerd", self.network, self.sandbox_image,
                                         image_root=self.image_root, namespace=self.namespace)
            self.containerd.start()
            self.containerd.wait_ready()
            self._start_forwarder(services)
            self.kubelet = Kubelet(self.workdir / "kubelet", self.credentials, self.network,
                                   self.containerd.socket, f"/{self.cgroup_root}", self.labels, self.taints,
                                   namespace=self.namespace)
            self.kubelet.start()
        except BaseException:
            self.stop()
            raise

    def _kubernetes_service(self) -> tuple[str, int]:
        """ClusterIP and port of Service default/kubernetes, read with the node's own credentials."""
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(str(self.credentials.kubeconfig)))
        service = api.read_namespaced_service("kubernetes", "default")
        return service.spec.cluster_ip, service.spec.ports[0].port

    def _forwarded_services(self) -> list[ForwardedService]:
        """`kubernetes` (its ClusterIP read from the API server) and the Services given to forward."""
        cluster_ip, port = self._kubernetes_service()
        upstream = self.credentials.server.removeprefix("https://").rstrip("/")
        return [ForwardedService(cluster_ip, port, upstream), *self.forwards]

    def _start_forwarder(self, services: list[ForwardedService]) -> None:
        assert self.network is not None
        for address in dict.fromkeys(service.cluster_ip for service in services):
            self.network.add_address(address)
        self.forwarder = ServiceForwarder(services, self.workdir / "service-forwarder.log", self.network.bridge)
        self.forwarder.start()

    def import_images(self, archives: Iterable[Path]) -> dict[str, float]:
        """Import image archives into the node's containerd; seconds per archive (0 when already there).

        With a kept `image_root`, an archive imported before (same file name: the name carries the
        hash of the image's inputs) is not imported again; the record sits beside that root.
        """
        assert self.containerd is not None, "start the node first"
        record = self.image_root.parent / f"{self.image_root.name}.imported.json" if self.image_root else None
        imported: dict[str, str] = json.loads(record.read_text()) if record and record.exists() else {}
        present = set(self.containerd.images())
        seconds = {}
        for archive in map(Path, archives):
            meta = archive.with_suffix(".json")
            reference = json.loads(meta.read_text()).get("reference") if meta.exists() else None
            if reference and imported.get(reference) == archive.name and reference in present:
                seconds[archive.name] = 0.0
                continue
            started = time.monotonic()
            self.containerd.import_image(archive)
            seconds[archive.name] = time.monotonic() - started
            if reference:
                imported[reference] = archive.name
        if record:
            record.write_text(json.dumps(imported, indent=2, sort_keys=True) + "\n")
        return seconds

    def wait_ready(self, timeout: float = 120.0) -> float:
        """Wait for the Node object's Ready condition; seconds since start()."""
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(str(self.credentials.kubeconfig)))
        deadline = time.monotonic() + timeout
        last = "not registered"
        while time.monotonic() < deadline:
            for daemon in (self.kubelet.daemon if self.kubelet else None,
                           self.containerd.daemon if self.containerd else None):
                if daemon is not None:
                    daemon.require_alive()
            try:
                node = api.read_node(self.credentials.node_name)
                ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
                if ready is not None and ready.status == "True":
                    assert self.started_at is not None
                    return time.monotonic() - self.started_at
                last = f"Ready={ready.status}: {ready.message}" if ready else "no Ready condition yet"
            except client.ApiException as error:
                last = f"{error.status} {error.reason}"
            time.sleep(0.5)
        log = self.kubelet.daemon.log if self.kubelet and self.kubelet.daemon else None
        raise NodeError(f"node {self.credentials.node_name} not Ready within {timeout:.0f}s ({last}); "
                        f"kubelet log {log}:\n{_log_tail(log) if log else ''}")

    def memory_kib(self) -> dict[str, int]:
        """Resident memory of the node's programs: kubelet, containerd, its shims, the forwarder."""
        figures: dict[str, int] = {}
        for name, part in (("kubelet", self.kubelet), ("containerd", self.containerd)):
            daemon = part.daemon if part else None
            if daemon and daemon.process:
                figures[name] = _rss_kib(daemon.process.pid)
        if self.forwarder:
            figures["forwarder"] = sum(_rss_kib(pid) for pid in self.forwarder.pids())
        if self.containerd:
            figures["shims"] = sum(_rss_kib(pid) for pid in self.containerd.shim_pids())
        return figures

    def stop(self) -> None:
        """Stop everything started, in reverse, and remove every trace (idempotent)."""
        try:
            if self.kubelet:
                self.kubelet.stop()
            if self.containerd:
                self.containerd.stop()
            if self.forwarder:
                self.forwarder.stop()
            _kill_cgroup(self.cgroup_root)  # the pods' processes (in mount namespaces of their own)
            if self.namespace:
                self.namespace.stop()  # every process left in the node's namespace; its mounts go with it
            _unmount_under(self.workdir)  # a node of an earlier version mounted in the machine's namespace
            _remove_cgroup(self.cgroup_root)
            if self.network:
                self.network.delete()
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
        finally:
            self.kubelet = self.containerd = self.forwarder = self.network = self.namespace = None
            if self._image_root_lock is not None:
                os.close(self._image_root_lock)
                self._image_root_lock = None
            self.share.leave()


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuaas.cluster.node`: run one node in the foreground until SIGTERM or Ctrl-C.

    Signs the node's credentials with the cluster CA, starts the node, imports the image archives,
    waits for Ready, prints one JSON line (node IP, timings, daemon pids, containerd socket) on
    stdout (and into --ready-file), then keeps the node up; on SIGTERM/SIGINT it stops the node and
    removes every trace. `gpuaas cluster up` runs it as one of the cluster's processes.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m gpuaas.cluster.node", description=main.__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="API server URL, https://127.0.0.1:PORT")
    parser.add_argument("--ca-cert", type=Path, required=True, help="the cluster CA certificate (PEM)")
    parser.add_argument("--ca-key", type=Path, required=True, help="the cluster CA key, to sign the kubelet's certificates")
    parser.add_argument("--name", default="gpuaas-node", help="node name (default gpuaas-node)")
    parser.add_argument("--image", type=Path, action="append", default=[], metavar="ARCHIVE",
                        help="OCI archive to import (repeat; see python -m gpuaas.cluster.images)")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="node label (repeat)")
    parser.add_argument("--taint", action="append", default=[], metavar="KEY=VALUE:EFFECT",
                        help="taint the node registers with (repeat)")
    parser.add_argument("--forward", action="append", default=[], metavar="CLUSTER_IP:PORT=HOST:PORT",
                        help="a Service the stand-in for kube-proxy forwards, besides `kubernetes` (repeat)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="the node's folder (default: a temporary one); emptied when the node stops")
    parser.add_argument("--image-root", type=Path, default=None,
                        help="containerd's root, kept across starts so images are imported once")
    parser.add_argument("--ready-file", type=Path, default=None, help="also write the JSON line here once Ready")
    args = parser.parse_args(argv)

    stopping = {"signal": None}

    def request_stop(number: int, _frame: object) -> None:
        stopping["signal"] = number

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    if args.ready_file:
        args.ready_file.unlink(missing_ok=True)
    credentials_dir = Path(tempfile.mkdtemp(prefix="gpuaas-node-pki-"))
    try:
        taints = [_taint(text) for text in args.taint]
        forwards = [ForwardedService.parse(text) for text in args.forward]
        labels = dict(label.split("=", 1) for label in args.label)
        network = NodeNetwork.choose()  # its bridge is made now: the node's stop() or this removes it
        try:
            credentials = NodeCredentials.issue(args.ca_cert, args.ca_key, args.server, args.name, credentials_dir,
                                                [network.node_ip])
            workdir = args.workdir
            if workdir is not None:
                reaped = mount_namespace.reap(workdir / "host")  # a node on this folder killed before it stopped
                if reaped:
                    print(f"killed {len(reaped)} processes a node killed earlier left in its mount namespace "
                          f"({workdir})", file=sys.stderr, flush=True)
                _unmount_under(workdir)  # a node of an earlier version killed before it could clean up
                shutil.rmtree(workdir, ignore_errors=True)
                workdir.mkdir(parents=True)
            node = Node(credentials, network=network, labels=labels, taints=taints, workdir=workdir,
                        image_root=args.image_root, forwards=forwards)
        except BaseException:
            network.delete()
            raise
        print(f"starting node {args.name} ({network.bridge}, {network.subnet})...", file=sys.stderr, flush=True)
        node.start()
        try:
            ready = node.wait_ready()
            imported = node.import_images(args.image)
            assert node.kubelet and node.containerd and node.kubelet.daemon and node.containerd.daemon
            pids = {"kubelet": node.kubelet.daemon.process.pid, "containerd": node.containerd.daemon.process.pid}
            if node.forwarder:
                pids["service-forwarders"] = node.forwarder.pids()
            line = json.dumps({"node": args.name, "node_ip": network.node_ip, "bridge": network.bridge,
                               "ready_s": round(ready, 3), "import_s": {k: round(v, 3) for k, v in imported.items()},
                               "pids": pids, "containerd_socket": str(node.containerd.socket),
                               "workdir": str(node.workdir)})
            print(line, flush=True)
            if args.ready_file:
                args.ready_file.write_text(line + "\n")
            while stopping["signal"] is None:
                for part in (node.kubelet, node.containerd):
                    if part and part.daemon:
                        part.daemon.require_alive()
                time.sleep(0.5)
        finally:
            print(f"stopping node {args.name}...", file=sys.stderr, flush=True)
            node.stop()
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
    except (NodeError, NamespaceError, ToolMissing, OSError) as error:
        print(f"gpuaas node: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(credentials_dir, ignore_errors=True)
        if args.ready_file:
            args.ready_file.unlink(missing_ok=True)
    return 0


def _taint(text: str) -> dict:
    """`KEY=VALUE:EFFECT` (or `KEY:EFFECT`) as the kubelet's registerWithTaints entry."""
    spec, _, effect = text.rpartition(":")
    key, _, value = spec.partition("=")
    if not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise NodeError(f"--taint: expected KEY=VALUE:EFFECT with EFFECT NoSchedule, PreferNoSchedule or NoExecute, "
                        f"found {text!r}")
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


if __name__ == "__main__":
    raise SystemExit(main())
