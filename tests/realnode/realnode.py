"""A real one-node Kubernetes cluster on this machine for the ``e2e`` tests (``make test-e2e``).

On top of the control plane of :mod:`tests.realcluster.controlplane` (its e2e variant: the API server on the node's bridge
address, the lease endpoint reconciler, the Node authorizer, the EndpointSlice and node lifecycle controllers),
one real node from the binaries ``hack/node/build.sh`` builds (cached under ``~/.cache/tfk8s/node/<versions>/``):

- a bridge of its own, :data:`BRIDGE` with :data:`NODE_IP` (the kubelet refuses a loopback node IP), isolated:
  nothing routes it to the outside (``net.ipv4.ip_forward`` stays 0, no masquerade), the Service range is routed
  onto it so that a Service address nothing translated never leaves the machine;
- **containerd 2** (CRI) with runc and the CNI plugins bridge/host-local/loopback/portmap: pods get addresses of
  :data:`SUBNET` on that bridge; images are imported, never pulled (:func:`write_image` packs the pause and the
  probe programs into OCI archives; pods use ``imagePullPolicy: Never``);
- the **kubelet** (cgroupfs driver on cgroup v1, its cgroups under ``/<CGROUP_NAME>`` of every hierarchy), run
  in a mount namespace of its own where the six kernel tunables it insists on (``kernel.panic=10``,
  ``kernel.panic_on_oops=1``, ...) read as it wants them (files bind-mounted over ``/proc/sys/...`` in that
  namespace only) with ``protectKernelDefaults: true``: it checks them and changes nothing on the machine;
- **kube-proxy** (iptables mode), set to change no kernel setting (no conntrack sizing, no route_localnet);
- **CoreDNS** as a host process on the bridge address, serving the cluster domain from the API, behind the
  ``kube-dns`` Service (:data:`DNS_SERVICE_IP`, a selectorless Service with an EndpointSlice): no ``forward``,
  so a name outside the cluster is refused, never sent to a resolver outside this machine.

Everything the node changes on the machine is written down before it is made, in the state file
``<ROOT>/state.json`` (:class:`Journal`), and :func:`sweep` undoes it from there: the processes started (by
pid and start time, never by name) and every process in the node's cgroups, the mounts under :data:`ROOT`,
the bridge and the links on it, the iptables chains of kube-proxy / the kubelet / CNI and the nftables tables
they brought, the cgroups, the kernel settings recorded at the start and the folders created outside the root.
It runs at the end of the session (also after Ctrl-C or SIGTERM), from a watchdog process when the test process
is killed, and by hand: ``hack/node/cleanup.sh`` (``python3 -m tests.realnode.realnode --cleanup``). All runtime state
lives under :data:`ROOT` (``/run/tfk8s-e2e``); the logs and configs in the session's work folder.

The **second node** (:func:`running_second_node`, started only by the two-node tests' session fixture): its own
network namespace (bound to ``<ROOT>/netns/node2``) with :data:`NODE2_IP` on a veth whose other end is a port of
:data:`BRIDGE`, its own containerd, kubelet (in a mount namespace whose ``/var/lib/kubelet`` is its own) and
kube-proxy under ``<ROOT>/node2``, its cgroups under ``/<CGROUP_NAME>/node2``, its pods on :data:`SUBNET2` on
:data:`BRIDGE2` inside its namespace. Host-gw routing without the machine's forwarding: forwarding is on in the
second node's namespace only; the first node's pods have a route to :data:`SUBNET2` through :data:`NODE2_IP`
(bridged, not routed by the machine), the machine one for its own processes (the API server, CoreDNS), and a
Service address translated on the first node to a pod of the second is bridged there by br_netfilter. It is
tainted :data:`SECOND_NODE_TAINT` so that only the pods that tolerate it run there. :meth:`RealNode.kill_hard`
loses it as a VM vanishes (link cut, everything SIGKILLed), :meth:`RealNode.restart` brings it back.

Run it by hand: ``python -m tests.realnode.realnode --up [--nodes 2]`` (prints the kubeconfig; Ctrl-C tears it all down).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import io
import ipaddress
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.realcluster.controlplane import (
    REPO,
    ControlPlane,
    _die_with_parent,
    binaries_dir,
    free_port,
    running_control_plane,
)

ROOT = Path(os.environ.get("TFK8S_E2E_ROOT", "/run/tfk8s-e2e"))
STATE = "state.json"
BRIDGE = "tfk8s0"
SUBNET = ipaddress.ip_network(os.environ.get("TFK8S_E2E_SUBNET", "10.77.0.0/24"))
NODE_IP = str(SUBNET.network_address + 1)
POD_RANGE = (str(SUBNET.network_address + 10), str(SUBNET.broadcast_address - 5))
SERVICE_CIDR = "10.96.0.0/24"  # = tests.realcluster.controlplane.SERVICE_CIDR
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
NODE_NAME = "tfk8s-e2e-node"
CGROUP_NAME = "tfk8s-e2e"
PAUSE_IMAGE = "tfk8s.local/pause:1"
PROBE_IMAGE = "tfk8s.local/e2e-probe:1"
NODE_BUILD_SCRIPT = REPO / "hack" / "node" / "build.sh"
NODE_BINARIES = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr", "coredns", "runc")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
# the node lifecycle controller (a node without heartbeats: Unknown, tainted unreachable, its pods not Ready),
# the taint eviction controller (pods evicted after their unreachable/not-ready tolerationSeconds) and the pod
# GC (pods of deleted nodes), at their upstream settings
E2E_CONTROLLERS = ("endpointslice-controller", "node-lifecycle-controller", "taint-eviction-controller",
                   "pod-garbage-collector-controller")
SKIP_REASON = "e2e tests need `make test-e2e` (root, Go, the control plane's and the node's binaries)"
# What the kubelet wants of the kernel (k8s.io/component-helpers/node/util/sysctl; it would write them).
KUBELET_TUNABLES = {"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
                    "kernel/panic_on_oops": "1", "kernel/keys/root_maxkeys": "1000000",
                    "kernel/keys/root_maxbytes": "25000000"}
# Recorded before anything starts and restored by sweep(): the kubelet's, kube-proxy's (conntrack,
# route_localnet), the CNI bridge plugin's (ip_forward, with isGateway) and br_netfilter's.
WATCHED_SYSCTLS = (*KUBELET_TUNABLES, "net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding",
                   "net/ipv4/conf/all/route_localnet", "net/netfilter/nf_conntrack_max",
                   "net/netfilter/nf_conntrack_tcp_timeout_established",
                   "net/netfilter/nf_conntrack_tcp_timeout_close_wait", "net/netfilter/nf_conntrack_tcp_be_liberal",
                   "net/netfilter/nf_conntrack_udp_timeout", "net/netfilter/nf_conntrack_udp_timeout_stream",
                   "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables")
# Paths outside ROOT that the node's programs would create by default. The configs below point all but two into
# ROOT; those two the node does create, and sweep() removes them when they were absent before the run:
# /var/lib/kubelet whole (only a kubelet makes it: its device plugin socket, whatever --root-dir says) and
# /var/lib/cni's empty folders once our files in it are gone (libcni's cache, which containerd cannot move).
# The others, if they appear during a run, are another program's (a colleague's containerd makes /run/containerd)
# and are left alone; the journal records them for the record.
OUR_OUTSIDE_PATHS = ("/var/lib/kubelet", "/var/lib/cni")
OUTSIDE_PATHS = (*OUR_OUTSIDE_PATHS, "/var/log/containers", "/var/log/pods", "/run/containerd", "/var/lib/containerd",
                 "/opt/containerd", "/run/runc", "/run/netns", "/etc/cni/net.d", "/usr/libexec/kubernetes", "/etc/cdi",
                 "/run/cdi", "/run/nri", "/etc/kubernetes")
KUBELET_ONLY_PATH = "/var/lib/kubelet"
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")
CNI_NETWORK = "tfk8s-e2e"
CNI_CACHE = Path("/var/lib/cni")  # libcni's default cache, which containerd's CRI has no setting for
OUR_CHAIN_PREFIX = "KUBE-"  # kube-proxy's and the kubelet's chains (no other kubelet runs on this machine)
IPTABLES_NFT_TABLES = ("filter", "nat", "mangle", "raw", "security", "kube-proxy")
MNT_DETACH = 2
# The second node (started only for the two-node tests: running_second_node): a network namespace of its own
# (ROOT/netns/node2), reached from the first node's bridge by a veth (LINK2 on BRIDGE, eth0 with NODE2_IP inside),
# its pods on SUBNET2 on a bridge of its own inside the namespace (BRIDGE2), host-gw routes both ways.
SUBNET2 = ipaddress.ip_network(os.environ.get("TFK8S_E2E_SUBNET2") or
                               f"{SUBNET.broadcast_address + 1}/{SUBNET.prefixlen}")
NODE2_IP = str(SUBNET.network_address + 2)  # on the first node's subnet, below its pods' range
NODE2_NAME = "tfk8s-e2e-node2"
BRIDGE2 = "tfk8s1"  # inside the second node's network namespace
LINK2 = "tfk8s0-n2"  # the host's end of the link, a port of BRIDGE
NODE2_DIR = "node2"  # its root (ROOT/node2), work folder, cgroup (/<CGROUP_NAME>/node2) and journal tag
# Only the two-node tests tolerate it: every other pod (the launch steps, the one-node tests' replicas) stays on
# the first node, so the suite's time does not double.
SECOND_NODE_TAINT = {"key": "tfk8s.dev/e2e-second-node", "value": "true", "effect": "NoSchedule"}
SECOND_NODE_TOLERATION = {"key": SECOND_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodeSpec:
    """What tells one e2e node from the other: its name, node address, pod subnet and bridge (whose address,
    ``gateway``, is the pods' default route), cgroup (relative to each hierarchy's root), network namespace
    (a file a namespace is bound to; None: the machine's), more routes for its pods (``(dst, via)``), the taints
    it registers with, ``tag`` (its journal names' suffix, its certificates' prefix; "" for the first)."""

    name: str
    ip: str
    subnet: ipaddress.IPv4Network
    bridge: str
    gateway: str
    cgroup: str
    netns: Path | None = None
    pod_routes: tuple[tuple[str, str], ...] = ()
    taints: tuple[dict[str, str], ...] = ()
    tag: str = ""

    @property
    def pod_range(self) -> tuple[str, str]:
        """The first and last pod address (host-local's rangeStart/rangeEnd)."""
        return str(self.subnet.network_address + 10), str(self.subnet.broadcast_address - 5)


def first_node_spec(root: Path = ROOT) -> NodeSpec:
    """The first node: on the machine's network namespace, :data:`NODE_IP` on :data:`BRIDGE`; its pods reach the
    second node's pods through :data:`NODE2_IP` (host-gw: a route in every pod, not the host's forwarding)."""
    return NodeSpec(NODE_NAME, NODE_IP, SUBNET, BRIDGE, NODE_IP, CGROUP_NAME,
                    pod_routes=((str(SUBNET2), NODE2_IP),))


def second_node_spec(root: Path = ROOT) -> NodeSpec:
    """The second node: its own network namespace (``<root>/netns/node2``), :data:`NODE2_IP` on the link to the
    first node's bridge, pods on :data:`SUBNET2` behind :data:`BRIDGE2`, tainted :data:`SECOND_NODE_TAINT`."""
    return NodeSpec(NODE2_NAME, NODE2_IP, SUBNET2, BRIDGE2, str(SUBNET2.network_address + 1),
                    f"{CGROUP_NAME}/{NODE2_DIR}", netns=root / "netns" / NODE2_DIR,
                    taints=(SECOND_NODE_TAINT,), tag=NODE2_DIR)


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file (for error messages), or a note that it does not exist."""
    if not path.exists():
        return f"({path} does not exist)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def node_binaries_dir() -> Path | None:
    """The directory with every node binary (``hack/node/build.sh --dir``), or None when they are not built."""
    env_dir = os.environ.get("TFK8S_NODE_DIR")
    try:
        d = Path(env_dir) if env_dir else Path(subprocess.run(
            ["bash", str(NODE_BUILD_SCRIPT), "--dir"], check=True, capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return None
    ok = all(os.access(d / b, os.X_OK) for b in NODE_BINARIES) and all(
        os.access(d / "cni" / p, os.X_OK) for p in CNI_PLUGINS)
    return d if ok else None


def images_dir() -> Path | None:
    """The directory with the ``pause`` and ``probe`` programs (``hack/node/build.sh --images-dir``)."""
    try:
        d = Path(subprocess.run(["bash", str(NODE_BUILD_SCRIPT), "--images-dir"], check=True,
                                capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return None
    return d if all(os.access(d / b, os.X_OK) for b in ("pause", "probe")) else None


def _run(*argv: str, check: bool = True, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, timeout=timeout, **kw)


# -- processes: identified by pid and start time ---------------------------------------------------------------------
def proc_start_time(pid: int) -> int | None:
    """The start time (clock ticks after boot) of process ``pid``, or None if there is none (or a zombie):
    with the pid, it tells a process we started from a later one that reuses its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _stop_processes(entries: list[tuple[int, int | None]], grace: float, log: Callable[[str], None]) -> None:
    """SIGTERM the processes (pid, start time; None: any), SIGKILL those still there after ``grace`` s."""
    def alive() -> list[tuple[int, int | None]]:
        return [(p, st) for p, st in entries if proc_start_time(p) is not None
                and (st is None or proc_start_time(p) == st)]

    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        left = alive()
        if not left:
            return
        for pid, _ in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
    for pid, _ in alive():
        log(f"process {pid} survived SIGKILL")


# -- cgroups ------------------------------------------------------------------------------------------------------------
def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1 controllers, named ones, the hybrid ``unified``), or ``[/sys/fs/cgroup]``
    on a pure cgroup v2 machine."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] in ("cgroup", "cgroup2"):
            out.append(Path(_unescape(left.split()[4])))
    return out


def _cgroup_dirs() -> list[Path]:
    return [h / CGROUP_NAME for h in cgroup_hierarchies() if (h / CGROUP_NAME).is_dir()]


def _cgroup_pids(sub: str = "") -> set[int]:
    """The processes in the nodes' cgroups (``sub``: only under ``/<CGROUP_NAME>/<sub>``, the second node's)."""
    pids: set[int] = set()
    for top in _cgroup_dirs():
        top = top / sub if sub else top
        for d, _, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    pids |= {int(x) for x in (Path(d) / "cgroup.procs").read_text().split()}
    return pids


def create_cgroups(cgroup: str = CGROUP_NAME) -> list[str]:
    """``/<cgroup>`` (and its ``daemons`` child, for the node's own processes) in every hierarchy, cpuset's
    CPUs and memory nodes copied from the parent; returns the directories made. The second node's
    (``<CGROUP_NAME>/node2``) nests in the first's: :func:`sweep` finds both under ``/<CGROUP_NAME>``."""
    made = []
    for h in cgroup_hierarchies():
        for d in (h / cgroup, h / cgroup / "daemons"):
            if d.exists():
                continue
            d.mkdir()
            made.append(str(d))
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (d / name).exists() and not (d / name).read_text().strip():
                    (d / name).write_text((d.parent / name).read_text())
    return made


def join_daemons_cgroup(pid: int, cgroup: str = CGROUP_NAME) -> None:
    """Move process ``pid`` into ``/<cgroup>/daemons`` of the ``pids`` hierarchy (cgroup v1; the unified
    one on v2), for tracking only (no limit, its memory accounting unchanged): its children (the shims containerd
    starts) follow it, so :func:`sweep` finds every process the node started in the node's cgroups."""
    hierarchies = cgroup_hierarchies()
    picks = [h for h in hierarchies if h.name == "pids"] or [h for h in hierarchies if h == Path("/sys/fs/cgroup")]
    for h in picks:
        with contextlib.suppress(OSError):
            (h / cgroup / "daemons" / "cgroup.procs").write_text(str(pid))


# -- mounts -----------------------------------------------------------------------------------------------------------
def _unescape(s: str) -> str:
    return s.encode().decode("unicode_escape") if "\\" in s else s


def mounts(with_options: bool = False) -> list[tuple[str, ...]]:
    """(mount point, file system type[, super block options]) of this mount namespace, in mount order."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fs = right.split()
        entry = (_unescape(left.split()[4]), fs[0])
        out.append((*entry, _unescape(fs[2]) if len(fs) > 2 else "") if with_options else entry)
    return out


def mounts_under(root: Path) -> list[str]:
    """Mount points at or under ``root``, in mount order."""
    r = str(root)
    return [m for m, _ in mounts() if m == r or m.startswith(r + "/")]


def _umount(path: str, flags: int = 0) -> int:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    return 0 if libc.umount2(path.encode(), flags) == 0 else ctypes.get_errno()


def unmount_all(root: Path, log: Callable[[str], None]) -> None:
    """Unmount everything at or under ``root``, the last mounted first; lazily (MNT_DETACH) what stays busy."""
    for _ in range(5):
        left = mounts_under(root)
        if not left:
            return
        for m in reversed(left):
            if _umount(m) not in (0,):
                _umount(m, MNT_DETACH)
    for m in mounts_under(root):
        log(f"mount {m} could not be unmounted")


# -- network ----------------------------------------------------------------------------------------------------------
def in_netns(netns: Path | None) -> list[str]:
    """The argv prefix that runs a command in the network namespace bound to ``netns`` (``[]``: this one)."""
    return ["nsenter", f"--net={netns}", "--"] if netns else []


def links() -> list[dict[str, Any]]:
    """The network interfaces (``ip -j link show``)."""
    return json.loads(_run("ip", "-j", "link", "show").stdout or "[]")


def iptables_rules(cmd: str, table: str, netns: Path | None = None) -> list[str]:
    """``<cmd> -t <table> -S`` lines (in the network namespace bound to ``netns``), or ``[]`` when the table
    cannot be read."""
    res = _run(*in_netns(netns), cmd, "-w", "5", "-t", table, "-S", check=False)
    return res.stdout.splitlines() if res.returncode == 0 else []


def _our_chains(lines: list[str]) -> list[str]:
    """Of ``iptables -S`` lines, the chains that are ours: ``KUBE-*``, and the CNI plugins' ``CNI-*`` chains of
    our network (their rules' comments name it; the node's pods use no hostPort and no masquerade, so there are
    none today), not another CNI user's."""
    ours = [ln.split()[1] for ln in lines if ln.startswith("-N ") and ln.split()[1].startswith(OUR_CHAIN_PREFIX)]
    marker = f'\\"{CNI_NETWORK}\\"'
    for ln in lines:
        parts = ln.split()
        if marker in ln and parts[0] == "-A":
            target = parts[parts.index("-j") + 1] if "-j" in parts[:-1] else ""
            ours += [c for c in (parts[1], target) if c.startswith("CNI-") and c not in ours]
    return ours


def our_iptables(cmd: str) -> dict[str, list[str]]:
    """Per table, our chains (see :func:`_our_chains`) and the rules in them or jumping to them."""
    found: dict[str, list[str]] = {}
    for table in IPTABLES_TABLES:
        lines = iptables_rules(cmd, table)
        ours = set(_our_chains(lines))
        mine = [ln for ln in lines if len(ln.split()) > 1 and (ln.split()[1] in ours or any(
            f"-j {c}" in ln for c in ours))]
        if mine:
            found[table] = mine
    return found


def remove_our_iptables(log: Callable[[str], None]) -> None:
    """Delete our chains (``KUBE-*``, our network's ``CNI-*``) and every rule that jumps to them, in IPv4 and
    IPv6."""
    for cmd in ("iptables", "ip6tables"):
        if shutil.which(cmd) is None:
            continue
        for table in IPTABLES_TABLES:
            lines = iptables_rules(cmd, table)
            ours = _our_chains(lines)
            for ln in lines:  # rules in the other chains that jump to ours
                parts = shlex.split(ln)
                if parts[0] == "-A" and parts[1] not in ours and any(c in parts for c in ours):
                    _run(cmd, "-w", "5", "-t", table, "-D", *parts[1:], check=False)
            for chain in ours:
                _run(cmd, "-w", "5", "-t", table, "-F", chain, check=False)
            for chain in ours:
                res = _run(cmd, "-w", "5", "-t", table, "-X", chain, check=False)
                if res.returncode != 0:
                    log(f"{cmd} -t {table} -X {chain}: {res.stderr.strip()}")


def nft_tables() -> list[str]:
    """The nftables tables as ``"<family> <name>"`` (``[]`` without nft)."""
    if shutil.which("nft") is None:
        return []
    res = _run("nft", "-j", "list", "tables", check=False)
    if res.returncode != 0:
        return []
    return sorted(f"{i['table']['family']} {i['table']['name']}"
                  for i in json.loads(res.stdout).get("nftables", []) if "table" in i)


def _nft_rule_count(table: str) -> int:
    res = _run("nft", "-j", "list", "table", *table.split(), check=False)
    if res.returncode != 0:
        return 0
    return sum(1 for i in json.loads(res.stdout).get("nftables", []) if "rule" in i)


def our_cni_cache_files(root: Path) -> list[Path]:
    """libcni's cache files (``/var/lib/cni/results/*``) of network namespaces under ``root`` (our pods')."""
    out = []
    for f in CNI_CACHE.glob("results/*"):
        with contextlib.suppress(OSError):
            if str(root) + "/" in f.read_text(errors="replace"):
                out.append(f)
    return out


# -- sysctls ----------------------------------------------------------------------------------------------------------
def read_sysctls(names: tuple[str, ...] = WATCHED_SYSCTLS) -> dict[str, str]:
    """The current value of each kernel setting (``/proc/sys/<name>``) that exists."""
    out = {}
    for n in names:
        with contextlib.suppress(OSError):
            out[n] = Path("/proc/sys", n).read_text().strip()
    return out


# -- the journal ----------------------------------------------------------------------------------------------------
@dataclass
class Journal:
    """The state file: what the node made on this machine, written down before it is made (so that a killed
    run can be undone by :func:`sweep` from another process) and the machine's state before it started."""

    path: Path
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Journal | None:
        """The journal at ``path``, or None when there is none (or it cannot be read)."""
        try:
            return cls(path, json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    def save(self) -> None:
        """Write it atomically."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)

    def add(self, key: str, value: Any) -> None:
        """Append ``value`` to the list ``key`` and save."""
        self.data.setdefault(key, []).append(value)
        self.save()

    def owner_alive(self) -> bool:
        """Whether the process that wrote it still runs."""
        owner = self.data.get("owner", {})
        return bool(owner) and proc_start_time(owner["pid"]) == owner["start"]


def begin(root: Path = ROOT) -> Journal:
    """Check the machine can take the node, undo a previous run's leftovers, and start the journal with the
    machine's state (kernel settings, nftables tables, interfaces, paths outside ``root``)."""
    if os.geteuid() != 0:
        raise RuntimeError("the e2e node needs root (mounts, cgroups, a bridge, iptables): run `make test-e2e` as root")
    previous = Journal.load(root / STATE)
    if previous is not None:
        if previous.owner_alive():
            raise RuntimeError(f"another e2e run (pid {previous.data['owner']['pid']}) uses {root}: wait for it, "
                               f"or stop it and run hack/node/cleanup.sh")
        problems = sweep(previous, log=lambda m: print(f"realnode: {m}", file=sys.stderr))
        if problems:
            raise RuntimeError("a previous e2e run left things that could not be removed:\n  " + "\n  ".join(problems))
    elif root.exists() and mounts_under(root):
        raise RuntimeError(f"{root} has mounts but no {STATE}: unmount them (findmnt -R {root}) and remove it")
    for name in (BRIDGE, LINK2):
        if any(link["ifname"] == name for link in links()):
            raise RuntimeError(f"an interface {name} exists already (not made by this run): `ip link del {name}`")
    routes = json.loads(_run("ip", "-j", "route", "show").stdout or "[]")
    for r in routes:
        dst = r.get("dst", "")
        for subnet, var in ((SUBNET, "TFK8S_E2E_SUBNET"), (SUBNET2, "TFK8S_E2E_SUBNET2")):
            if dst not in ("default", "") and ipaddress.ip_network(dst, strict=False).overlaps(subnet):
                raise RuntimeError(f"{subnet} overlaps the route {dst} dev {r.get('dev')}: set {var} to a "
                                   f"free /24 of 10.0.0.0/8")
    for tool in ("ip", "iptables", "mount", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed: hack/node/build.sh installs the node's Debian packages")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    journal = Journal(root / STATE, {
        "owner": {"pid": os.getpid(), "start": proc_start_time(os.getpid())},
        "root": str(root),
        "sysctls": read_sysctls(),
        "nft_tables": nft_tables(),
        "links": sorted(link["ifname"] for link in links()),
        "absent_paths": [p for p in OUTSIDE_PATHS if not os.path.lexists(p)],
        "processes": [], "cgroups": [],
    })
    journal.save()
    return journal


def sweep(journal: Journal, log: Callable[[str], None] = lambda m: None) -> list[str]:
    """Undo everything the journal records, whatever state the run was left in (idempotent): processes (those
    recorded, then every one in the node's cgroups: containers, shims), mounts under the root, the links on the
    bridge and the bridge, our iptables chains and the nftables tables that came with them, the cgroups, the
    kernel settings, the paths created outside the root, and the root. Returns what could not be undone
    (``[]``: the machine is as the journal found it)."""
    data = journal.data
    root = Path(data["root"])
    procs = data.get("processes", [])
    # 1. the kubelet first (it would restart what goes), then containerd, then everything in our cgroups
    # (containers, shims), then the others.
    order = {"kubelet": 0, "containerd": 1}
    def base(p: dict[str, Any]) -> str:  # "kubelet@node2": the second node's kubelet
        return p["name"].split("@")[0]

    for p in sorted(procs, key=lambda p: order.get(base(p), 2)):
        if base(p) in order:
            _stop_processes([(p["pid"], p["start"])], 5.0, log)
    for _ in range(20):
        pids = _cgroup_pids() - {os.getpid()}
        if not pids:
            break
        _stop_processes([(pid, None) for pid in pids], 0.0, log)
    _stop_processes([(p["pid"], p["start"]) for p in procs if base(p) not in order], 5.0, log)
    # 2. mounts (overlay root file systems, shm, netns, the kubelet's volumes and its shared bind mount)
    unmount_all(root, log)
    # 3. network: the links on our bridge (veths of pods whose netns survived), the bridge; iptables; nftables
    if data.get("bridge"):
        for link in links():
            if link.get("master") == data["bridge"]:
                _run("ip", "link", "del", link["ifname"], check=False)
        if any(link["ifname"] == data["bridge"] for link in links()):
            _run("ip", "link", "del", data["bridge"], check=False)
    if data.get("link2") and any(link["ifname"] == data["link2"] for link in links()):
        _run("ip", "link", "del", data["link2"], check=False)  # its peer in the second node's namespace goes too
    remove_our_iptables(log)
    before = set(data.get("nft_tables", []))
    for t in nft_tables():
        if t not in before and t.split()[1] in IPTABLES_NFT_TABLES and _nft_rule_count(t) == 0:
            _run("nft", "delete", "table", *t.split(), check=False)
    # 4. cgroups, deepest first
    for top in _cgroup_dirs():
        for _ in range(10):
            for d, _dirs, _files in os.walk(top, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(d)
            if not top.exists():
                break
            time.sleep(0.2)
    # 5. kernel settings
    for name, value in data.get("sysctls", {}).items():
        p = Path("/proc/sys", name)
        with contextlib.suppress(OSError):
            if p.read_text().strip() != value:
                log(f"restoring {name.replace('/', '.')} = {value} (was {p.read_text().strip()})")
                p.write_text(value)
    # 6. libcni's cache files of our pods (containerd's CRI cannot move the cache), and the paths outside the
    # root that were absent before (see OUTSIDE_PATHS)
    for f in our_cni_cache_files(root):
        f.unlink(missing_ok=True)
    for path in data.get("absent_paths", []):
        if not os.path.lexists(path) or mounts_under(Path(path)):
            continue
        if path not in OUR_OUTSIDE_PATHS:
            log(f"{path} appeared during the run: not the node's (its configs point elsewhere), left alone")
            continue
        inside = sorted(str(p.relative_to(path)) for p in Path(path).rglob("*"))[:8] if os.path.isdir(path) else []
        if path == KUBELET_ONLY_PATH:
            log(f"removing {path} (made by the kubelet during the run): {', '.join(inside)}")
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.isdir(path) and not os.path.islink(path):
            for d, _dirs, _files in os.walk(path, topdown=False):  # the empty folders only
                with contextlib.suppress(OSError):
                    os.rmdir(d)
            if not os.path.exists(path):
                log(f"removed {path} (made during the run, nothing left in it)")
    problems = leftovers(journal)
    # 7. the root, the state file last (unless something is left: the journal stays for hack/node/cleanup.sh)
    if root.exists() and not mounts_under(root) and not problems:
        for child in root.iterdir():
            if child.name != STATE:
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink()
        journal.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            root.rmdir()
        if root.exists():
            problems.append(f"{root} could not be removed")
    return problems


def leftovers(journal: Journal) -> list[str]:
    """What of the node is still on the machine (``[]``: nothing): processes, mounts, links, iptables chains,
    nftables tables, cgroups, kernel settings, paths outside the root."""
    data = journal.data
    root = Path(data["root"])
    found = []
    for p in data.get("processes", []):
        if proc_start_time(p["pid"]) == p["start"]:
            found.append(f"process {p['name']} (pid {p['pid']}) still runs")
    if _cgroup_pids() - {os.getpid()}:
        found.append(f"processes in the node's cgroups: {sorted(_cgroup_pids())}")
    found += [f"mount {m}" for m in mounts_under(root)]
    # overlay mounts of ours elsewhere (their layers in the root); others' (a colleague's buildah) are not ours
    found += [f"overlay mount {m} ({o[:120]})" for m, t, o in mounts(with_options=True)
              if t == "overlay" and str(root) + "/" in o and not m.startswith(str(root) + "/")]
    names = {link["ifname"]: link for link in links()}
    if data.get("bridge") and data["bridge"] in names:
        found.append(f"bridge {data['bridge']}")
    found += [f"interface {n} on {data['bridge']}" for n, link in names.items()
              if data.get("bridge") and link.get("master") == data["bridge"]]
    if data.get("link2") and data["link2"] in names and names[data["link2"]].get("master") != data.get("bridge"):
        found.append(f"interface {data['link2']} (the link to the second node)")
    found += [f"interface {n} (a veth made during the run)" for n, link in names.items()
              if n not in data.get("links", []) and link.get("link_type") == "ether" and n.startswith("veth")]
    for cmd in ("iptables", "ip6tables"):
        if shutil.which(cmd):
            for table, lines in our_iptables(cmd).items():
                found += [f"{cmd} -t {table}: {ln}" for ln in lines]
    before = set(data.get("nft_tables", []))
    found += [f"nftables table {t} (made during the run)" for t in nft_tables()
              if t not in before and t.split()[1] in IPTABLES_NFT_TABLES]
    found += [f"cgroup {d}" for d in _cgroup_dirs()]
    now = read_sysctls(tuple(data.get("sysctls", {})))
    found += [f"sysctl {n.replace('/', '.')} = {now.get(n)} (was {v})" for n, v in data.get("sysctls", {}).items()
              if now.get(n) != v]
    found += [f"{p} (made during the run)" for p in data.get("absent_paths", []) if os.path.lexists(p) and (
        p == KUBELET_ONLY_PATH or (p in OUR_OUTSIDE_PATHS and os.path.isdir(p) and not any(
            f.is_file() for f in Path(p).rglob("*"))))]
    found += [f"{f} (libcni's cache of a pod's network)" for f in our_cni_cache_files(root)]
    return found


# -- images -------------------------------------------------------------------------------------------------------
def write_image(path: Path, ref: str, files: dict[str, Path], entrypoint: list[str], user: str = "",
                dirs: tuple[str, ...] = ()) -> str:
    """Write an OCI image layout archive at ``path``: one layer with ``files`` (path in the image -> file here,
    mode 0755, owned by root, mtime 0) and empty ``dirs`` (mode 1777, like /tmp), config ``entrypoint`` (and
    ``User``, e.g. ``"1000"``, when given), named ``ref`` (``ctr images import`` reads the name from the index's
    ``io.containerd.image.name`` annotation). Returns the manifest's digest."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for d in sorted(dirs):
            info = tarfile.TarInfo(d.strip("/"))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777, 0
            t.addfile(info)
        for arcname, src in sorted(files.items()):
            data = src.read_bytes()
            info = tarfile.TarInfo(arcname.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            t.addfile(info, io.BytesIO(data))
    layer = layer_buf.getvalue()

    def blob(b: bytes) -> tuple[str, bytes]:
        return "sha256:" + hashlib.sha256(b).hexdigest(), b

    layer_digest, _ = blob(layer)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Entrypoint": entrypoint, "Env": ["PATH=/"], **({"User": user} if user else {})},
                         "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
                         "history": [{"created_by": "tests/realnode/realnode.py write_image"}]}).encode()
    config_digest, _ = blob(config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": len(layer)}]}).encode()
    manifest_digest, _ = blob(manifest)
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
        "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]},
    }]}).encode()
    with tarfile.open(path, "w") as t:
        entries = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
        entries += [(f"blobs/sha256/{d.split(':')[1]}", b) for d, b in
                    ((layer_digest, layer), (config_digest, config), (manifest_digest, manifest))]
        for name, b in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(b), 0
            t.addfile(info, io.BytesIO(b))
    return manifest_digest


# -- the node -------------------------------------------------------------------------------------------------------
@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen
    log: Path


@dataclass
class RealNode:
    """The node's processes and files. Use :func:`running_real_cluster` (and :func:`running_second_node`).

    ``work``: configs, certificates and logs (``<component>.log``), kept after the run; ``root``: the runtime
    state (containerd's, the kubelet's, CNI's), removed by :func:`sweep`; ``spec``: which node (default the
    first, :func:`first_node_spec`).
    """

    cp: ControlPlane
    bin_dir: Path
    images: Path
    work: Path
    journal: Journal
    root: Path = ROOT
    spec: NodeSpec | None = None
    procs: dict[str, _Proc] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    argv: dict[str, list[str]] = field(default_factory=dict)  # how each process was started (restart())

    def __post_init__(self) -> None:
        if self.spec is None:
            self.spec = first_node_spec(self.root)

    @property
    def name(self) -> str:
        """The node's name in the API."""
        assert self.spec is not None
        return self.spec.name

    @property
    def _prefix(self) -> str:
        """Its certificates' prefix in the control plane's PKI folder ("" for the first node)."""
        assert self.spec is not None
        return f"{self.spec.tag}-" if self.spec.tag else ""

    @property
    def sock(self) -> Path:
        """containerd's socket."""
        return self.root / "containerd" / "containerd.sock"

    def ctr(self, *args: str, check: bool = True) -> str:
        """Run ``ctr -n k8s.io ARGS`` against the node's containerd; its stdout."""
        return _run(str(self.bin_dir / "ctr"), "--address", str(self.sock), "-n", "k8s.io", *args,
                    check=check).stdout

    def logs(self, name: str, lines: int = 40) -> str:
        """The last lines of a component's log."""
        return log_tail(self.work / f"{name}.log", lines)

    # -- start ------------------------------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], daemons_cgroup: bool = True) -> _Proc:
        assert self.spec is not None
        log = self.work / f"{name}.log"
        self.argv[name] = argv
        argv = in_netns(self.spec.netns) + argv
        env = {"PATH": f"{self.bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "TMPDIR": str(self.root / "tmp"), "HOME": str(self.root / "home"), "LANG": "C.UTF-8"}
        popen = subprocess.Popen(argv, stdout=log.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=env, cwd=self.root, start_new_session=True,
                                 preexec_fn=_die_with_parent)  # noqa: PLW1509 - only prctl(2) runs before exec
        tagged = f"{name}@{self.spec.tag}" if self.spec.tag else name
        self.journal.add("processes", {"name": tagged, "pid": popen.pid, "start": proc_start_time(popen.pid)})
        if daemons_cgroup:
            join_daemons_cgroup(popen.pid, self.spec.cgroup)
        proc = _Proc(name, popen, log)
        self.procs[name] = proc
        return proc

    def _wait(self, what: str, proc: _Proc, check: Callable[[], Any], timeout: float, *more_logs: str) -> None:
        t0 = time.monotonic()
        last: BaseException | None = None
        while time.monotonic() - t0 < timeout:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode} (log {proc.log}):\n"
                                   f"{self.logs(proc.name)}")
            try:
                if check():
                    self.timings[what] = round(time.monotonic() - t0, 1)
                    return
            except Exception as e:  # noqa: BLE001 - not yet
                last = e
            time.sleep(0.25)
        extra = "".join(f"\n--- {n}.log:\n{self.logs(n, 20)}" for n in more_logs)
        raise RuntimeError(f"{what} not ready after {timeout:.0f}s (last error: {last!r}); last lines of "
                           f"{proc.log}:\n{self.logs(proc.name)}{extra}")

    def start(self) -> None:
        """Start containerd (and import the images), kube-proxy, the kubelet and (on the first node) CoreDNS;
        :meth:`wait_ready` waits until the node is Ready, kube-proxy serves the kubernetes Service and CoreDNS
        answers."""
        assert self.spec is not None
        for d in ("tmp", "home", "cni/net.d", "cni/ipam", "cdi", "pod-logs", "kubelet", "kubelet-ns/var-log",
                  "kubelet-ns/sysctl", "s", "hostpath"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "resolv.conf").write_text("")  # the node's upstream resolvers: none
        self._certificates()
        self._start_containerd()
        self._import_images()
        if not self.spec.tag:
            self._api_objects()
        self._start_kube_proxy()
        self._start_kubelet()
        if not self.spec.tag:
            self._start_coredns()

    def _certificates(self) -> None:
        pki, spec, pre = self.cp.pki, self.spec, self._prefix
        assert spec is not None
        pki.issue(f"{pre}node-kubelet", f"system:node:{spec.name}", org="system:nodes")
        pki.issue(f"{pre}node-serving", f"system:node:{spec.name}", sans=(spec.ip, spec.name), server=True)
        # bound to system:node-proxier by the default RBAC policy
        pki.issue(f"{pre}kube-proxy", "system:kube-proxy")
        users = ("node-kubelet", "kube-proxy") if spec.tag else ("node-kubelet", "kube-proxy", "coredns")
        if not spec.tag:
            pki.issue("coredns", "tfk8s:coredns")
        for user in users:
            (self.work / f"{user}.kubeconfig").write_text(json.dumps({
                "apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": self.cp.url,
                                                          "certificate-authority": pki.path("ca.crt")}}],
                "users": [{"name": user, "user": {"client-certificate": pki.path(f"{pre}{user}.crt"),
                                                  "client-key": pki.path(f"{pre}{user}.key")}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
                "current-context": "test"}))

    def _start_containerd(self) -> None:
        r, b, spec = self.root, self.bin_dir, self.spec
        assert spec is not None
        # host-gw: the other node's pod subnet through its node address, straight from the pod (bridged, never
        # routed by this machine, whose ip_forward stays 0); everything else through the bridge's address
        routes = [{"dst": dst, "gw": via} for dst, via in spec.pod_routes] + [{"dst": "0.0.0.0/0",
                                                                                 "gw": spec.gateway}]
        cni = {"cniVersion": "1.0.0", "name": CNI_NETWORK, "plugins": [
            {"type": "bridge", "bridge": spec.bridge, "isGateway": False, "ipMasq": False,
             "ipam": {"type": "host-local", "dataDir": str(r / "cni" / "ipam"),
                      "ranges": [[{"subnet": str(spec.subnet), "rangeStart": spec.pod_range[0],
                                   "rangeEnd": spec.pod_range[1], "gateway": spec.gateway}]],
                      "routes": routes}},
            {"type": "portmap", "capabilities": {"portMappings": True}}]}
        (r / "cni" / "net.d" / "10-tfk8s-e2e.conflist").write_text(json.dumps(cni, indent=1))
        config = self.work / "containerd.toml"
        config.write_text(f"""# The e2e node's containerd: every path under {r}, CRI only, nothing pulled.
version = 4
root = "{r}/containerd/root"
state = "{r}/containerd/state"
temp = "{r}/tmp"
imports = []  # not the default /etc/containerd/conf.d/*.toml
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
                    "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs",
                    "io.containerd.image-verifier.v1.bindir"]

[debug]
  level = "info"
[plugins."io.containerd.server.v1.grpc"]
  address = "{self.sock}"
[plugins."io.containerd.server.v1.ttrpc"]
  address = "{self.sock}.ttrpc"
[plugins."io.containerd.server.v1.debug"]
  address = ""
[plugins."io.containerd.server.v1.metrics"]
  address = ""

[plugins."io.containerd.shim.v1.manager"]
  socket_dir = "{r}/s"

[plugins."io.containerd.cri.v1.runtime"]
  # This machine withholds CAP_SYS_RESOURCE: runc cannot lower a container's oom_score_adj below containerd's
  # (every pod fails with "can't get final child's PID from pipe") unless containerd clamps it.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = ["{r}/cdi"]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      disable_pause_image_pull = true
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{b}/runc"
        Root = "{r}/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{b}/cni"]
    conf_dir = "{r}/cni/net.d"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
""")
        proc = self._spawn("containerd", [str(b / "containerd"), "--config", str(config)])
        self._wait("containerd", proc, lambda: self.sock.exists() and "Server:" in _run(
            str(b / "ctr"), "--address", str(self.sock), "version", timeout=10).stdout, 60)

    def _import_images(self) -> None:
        t0 = time.monotonic()
        for ref, prog in ((PAUSE_IMAGE, "pause"), (PROBE_IMAGE, "probe")):
            archive = self.work / f"{prog}.oci.tar"
            write_image(archive, ref, {f"/{prog}": self.images / prog}, [f"/{prog}"])
            self.ctr("images", "import", "--platform", "linux/amd64", str(archive))
        listed = self.ctr("images", "ls", "-q").split()
        missing = [ref for ref in (PAUSE_IMAGE, PROBE_IMAGE) if ref not in listed]
        if missing:
            raise RuntimeError(f"ctr images import did not create {missing} (listed: {listed}); containerd log:\n"
                               f"{self.logs('containerd')}")
        self.timings["images"] = round(time.monotonic() - t0, 1)

    def _api_objects(self) -> None:
        """CoreDNS's rights, the kube-dns Service and its EndpointSlice (CoreDNS on the node's address)."""
        from kubernetes import client, utils

        with self.cp.admin_client() as api:
            utils.create_from_dict(api, {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "tfk8s:coredns"},
                "rules": [{"apiGroups": [""], "resources": ["services", "namespaces", "pods", "endpoints"],
                           "verbs": ["list", "watch"]},
                          {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                           "verbs": ["list", "watch"]}]})
            utils.create_from_dict(api, {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "tfk8s:coredns"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tfk8s:coredns"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tfk8s:coredns"}]})
            core = client.CoreV1Api(api)
            core.create_namespaced_service("kube-system", {
                "metadata": {"name": "kube-dns", "labels": {"k8s-app": "kube-dns"}},
                "spec": {"clusterIP": DNS_SERVICE_IP, "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]}})
            client.DiscoveryV1Api(api).create_namespaced_endpoint_slice("kube-system", {
                "metadata": {"name": "kube-dns-node", "labels": {
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": "tfk8s.dev-e2e"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}, "nodeName": NODE_NAME}],
                "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                          {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]})

    def _start_kube_proxy(self) -> None:
        healthz = free_port()
        spec = self.spec
        assert spec is not None
        local = "127.0.0.1" if spec.netns is None else spec.ip  # the health port: where this process reads it
        config = self.work / "kube-proxy.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.work / "kube-proxy.kubeconfig")},
            "hostnameOverride": spec.name, "bindAddress": spec.ip,
            "healthzBindAddress": f"{local}:{healthz}", "metricsBindAddress": f"127.0.0.1:{free_port()}",
            "mode": "iptables", "clusterCIDR": str(spec.subnet), "detectLocalMode": "ClusterCIDR",
            "nodePortAddresses": [f"{spec.ip}/32"],
            # change no kernel setting: no route_localnet (NodePorts on localhost), no conntrack sizing/timeouts
            "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
                          "tcpBeLiberal": False, "udpTimeout": "0s", "udpStreamTimeout": "0s"},
            "oomScoreAdj": 0}, indent=1))
        self._spawn("kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={config}", "--v=2"])
        self._healthz_port = healthz
        self._healthz_addr = local

    def _start_kubelet(self) -> None:
        r, pki, spec, pre = self.root, self.cp.pki, self.spec, self._prefix
        assert spec is not None
        port, healthz = free_port(), free_port()
        config = self.work / "kubelet.yaml"
        config.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": spec.ip, "port": port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": healthz,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": pki.path("ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": pki.path(f"{pre}node-serving.crt"), "tlsPrivateKeyFile": pki.path(f"{pre}node-serving.key"),
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            # cgroup v1 on this machine: the cgroupfs driver, and the kubelet told not to refuse v1
            "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{spec.cgroup}", "failCgroupV1": False,
            "podLogsDir": str(r / "pod-logs"), "volumePluginDir": str(r / "kubelet" / "volume-plugins"),
            "clusterDNS": [DNS_SERVICE_IP], "clusterDomain": CLUSTER_DOMAIN, "resolvConf": str(r / "resolv.conf"),
            # check the kernel tunables (they read as wanted in its mount namespace), never write them
            "protectKernelDefaults": True, "makeIPTablesUtilChains": False, "oomScoreAdj": 0,
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "maxPods": 32, "shutdownGracePeriod": "0s", "registerNode": True,
            "registerWithTaints": list(spec.taints),
            # the node's heartbeat: its Lease renewed every 10 s (nodeLeaseDurationSeconds 40, the upstream
            # default) and its status every 10 s; the node lifecycle controller calls it lost after
            # --node-monitor-grace-period (50 s upstream) without either
            "nodeStatusReportFrequency": "10s"}, indent=1))
        # The kubelet's mount namespace: the kernel tunables as it wants them, /var/log of its own (it makes
        # /var/log/containers); its pod volumes (tmpfs, under the root dir) must reach containerd's namespace,
        # hence the root dir a shared mount, bind-mounted on itself first (the journal has the root: sweep
        # unmounts it).
        kdir = r / "kubelet"
        _run("mount", "--bind", str(kdir), str(kdir))
        _run("mount", "--make-rshared", str(kdir))
        binds = []
        for name, value in KUBELET_TUNABLES.items():
            f = r / "kubelet-ns" / "sysctl" / name.replace("/", ".")
            f.write_text(value + "\n")
            binds.append(f"mount --bind {shlex.quote(str(f))} /proc/sys/{name}")
        if spec.tag:
            # the second kubelet's /var/lib/kubelet (device-plugin and pod-resources sockets, which it would
            # otherwise take from the first: it empties that folder as it starts) is a folder of its own
            Path(KUBELET_ONLY_PATH).mkdir(parents=True, exist_ok=True)
            (r / "kubelet-ns" / "var-lib-kubelet").mkdir(parents=True, exist_ok=True)
            binds.append(f"mount --bind {shlex.quote(str(r / 'kubelet-ns' / 'var-lib-kubelet'))} {KUBELET_ONLY_PATH}")
        script = "\n".join(["set -e", f"mount --bind {shlex.quote(str(r / 'kubelet-ns' / 'var-log'))} /var/log",
                            *binds, 'exec "$0" "$@"'])
        self._spawn("kubelet", [
            "unshare", "--mount", "--propagation", "unchanged", "--", "/bin/sh", "-c", script,
            str(self.bin_dir / "kubelet"), f"--config={config}",
            f"--kubeconfig={self.work / 'node-kubelet.kubeconfig'}", f"--root-dir={kdir}",
            f"--cert-dir={kdir / 'pki'}",
            f"--hostname-override={spec.name}", f"--node-ip={spec.ip}", "--v=2"])

    def _start_coredns(self) -> None:
        ready, health = free_port(), free_port()
        corefile = self.work / "Corefile"
        corefile.write_text(f"""# The cluster domain from the API server; no forward: other names are refused.
{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {NODE_IP}
    errors
    ready 127.0.0.1:{ready}
    health 127.0.0.1:{health}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.work / 'coredns.kubeconfig'} test
        pods insecure
        ttl 5
    }}
    cache 5
}}
""")
        self._spawn("coredns", [str(self.bin_dir / "coredns"), "-conf", str(corefile)])
        self._ready_port = ready

    def wait_ready(self, timeout: float = 120) -> None:
        """Wait until the node is Ready, kube-proxy is healthy and CoreDNS is ready (errors show the logs)."""
        import urllib.request

        from kubernetes import client

        spec = self.spec
        assert spec is not None
        with self.cp.admin_client() as api:
            core = client.CoreV1Api(api)

            def node_ready() -> bool:
                node = core.read_node(spec.name)
                return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []) and \
                    not any(t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or [])

            self._wait("node Ready", self.procs["kubelet"], node_ready, timeout, "containerd")
        self._wait("kube-proxy", self.procs["kube-proxy"], lambda: urllib.request.urlopen(
            f"http://{self._healthz_addr}:{self._healthz_port}/healthz", timeout=2).status == 200, 60)
        self._wait("kube-proxy's kubernetes Service rules", self.procs["kube-proxy"], lambda: any(
            "10.96.0.1/32" in ln for ln in iptables_rules("iptables", "nat", spec.netns)), 60)
        if spec.tag:
            return
        self._wait("CoreDNS", self.procs["coredns"], lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{self._ready_port}/ready", timeout=2).status == 200, 60)

    # -- stop ---------------------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop gracefully: every pod deleted through the API (the kubelet stops its containers and tears down
        their network), then the kubelet, what containers are left (ctr), containerd, kube-proxy, CoreDNS.
        :func:`sweep` then removes whatever remains."""
        from kubernetes import client

        assert self.spec is not None
        on_node = f"spec.nodeName={self.spec.name}"
        if "kubelet" in self.procs and self.procs["kubelet"].popen.poll() is None:
            with contextlib.suppress(Exception), self.cp.admin_client() as api:
                core = client.CoreV1Api(api)
                for pod in core.list_pod_for_all_namespaces(field_selector=on_node).items:
                    core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=5)
                deadline = time.monotonic() + 30
                while core.list_pod_for_all_namespaces(field_selector=on_node).items and \
                        time.monotonic() < deadline:
                    time.sleep(0.5)
        for name in ("kubelet",):
            self._terminate(name)
        if "containerd" in self.procs and self.procs["containerd"].popen.poll() is None:
            with contextlib.suppress(Exception):
                for task in self.ctr("tasks", "ls", "-q").split():
                    self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
                for cid in self.ctr("containers", "ls", "-q").split():
                    self.ctr("tasks", "delete", "-f", cid, check=False)
                    self.ctr("containers", "rm", cid, check=False)
        for name in ("containerd", "kube-proxy", "coredns"):
            self._terminate(name)

    # -- a node lost and back (the second node) -------------------------------------------------------------------
    def kill_hard(self) -> float:
        """Lose the node as a VM that vanishes: its link cut first (no FIN, no RST reaches its peers: their
        packets go nowhere), then every process of the node SIGKILLed at once (the kubelet, containerd, the
        shims, every container, kube-proxy): no pod is terminated gracefully, nothing is reported to the API
        server. The second node only (the first's processes share the machine's network namespace). Returns
        the moment of the loss (``time.time()``)."""
        assert self.spec is not None and self.spec.tag, "only the second node can be lost"
        _run("ip", "link", "set", LINK2, "down")
        t = time.time()
        pids = [(p.popen.pid, proc_start_time(p.popen.pid)) for p in self.procs.values()
                if p.popen.poll() is None]
        for _ in range(10):
            pids += [(pid, None) for pid in _cgroup_pids(NODE2_DIR) - {os.getpid()}]
            for pid, _st in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not _cgroup_pids(NODE2_DIR):
                break
            time.sleep(0.1)
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(5)
        return t

    def restart(self, timeout: float = 120) -> float:
        """Bring the lost node back: its link up, containerd, kube-proxy and the kubelet started again on their
        state of before (nothing cleaned by hand: the kubelet and containerd find the dead sandboxes and
        containers themselves); waits until it is Ready again. Returns the seconds that took."""
        t0 = time.monotonic()
        ctr = str(self.bin_dir / "ctr")
        _run("ip", "link", "set", LINK2, "up")
        for name in ("containerd", "kube-proxy", "kubelet"):
            if name == "containerd":
                self.sock.unlink(missing_ok=True)
            self._spawn(name, self.argv[name])
            if name == "containerd":
                self._wait("containerd again", self.procs[name], lambda: self.sock.exists() and "Server:" in _run(
                    ctr, "--address", str(self.sock), "version", timeout=10).stdout, 60)
        self.wait_ready(timeout)
        return time.monotonic() - t0

    def _terminate(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is None or proc.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGTERM)
        try:
            proc.popen.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(5)

    def reap(self) -> None:
        """Collect the exit status of every process started (after :func:`sweep` killed what was left)."""
        for proc in self.procs.values():
            with contextlib.suppress(Exception):
                proc.popen.wait(5)


@dataclass
class E2ECluster:
    """The running cluster: the control plane (``cp``: ``admin_client()``, ``pki``, ``url``) and the node;
    ``node2`` once :func:`running_second_node` started the second one."""

    cp: ControlPlane
    node: RealNode
    work: Path
    journal: Journal | None = None
    node2: RealNode | None = None


def create_second_node_network(journal: Journal, netns: Path) -> None:
    """The second node's network: a network namespace bound to ``netns`` (under the root: :func:`sweep`
    unmounts it), a veth from :data:`BRIDGE` (:data:`LINK2`) to its ``eth0`` with :data:`NODE2_IP`, its pods'
    bridge :data:`BRIDGE2` with the first address of :data:`SUBNET2`, forwarding on in that namespace only (its
    own ``net.ipv4.ip_forward``; the machine's stays 0), and on the machine a route to :data:`SUBNET2` through
    :data:`NODE2_IP` (host-gw). The first node's pods reach the second's by their own route (see
    :func:`first_node_spec`); a Service address translated on the first node to a pod of the second is bridged
    to it by br_netfilter (a DNAT onto the same bridge needs no forwarding), and its reply un-translated."""
    journal.data["link2"] = LINK2
    journal.save()
    netns.parent.mkdir(parents=True, exist_ok=True)
    netns.touch()
    _run("unshare", f"--net={netns}", "true")
    ns = in_netns(netns)
    _run("ip", "link", "add", LINK2, "type", "veth", "peer", "name", "eth0", "netns", str(netns))
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{LINK2}/disable_ipv6").write_text("1")
    _run("ip", "link", "set", LINK2, "master", BRIDGE, "up")
    gateway = f"{SUBNET2.network_address + 1}/{SUBNET2.prefixlen}"
    script = f"""set -e
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6
echo 1 > /proc/sys/net/ipv4/ip_forward
ip link set lo up
ip addr add {NODE2_IP}/{SUBNET.prefixlen} dev eth0
ip link set eth0 up
ip link add {BRIDGE2} type bridge
ip addr add {gateway} dev {BRIDGE2}
ip link set {BRIDGE2} up
ip route add {SERVICE_CIDR} dev {BRIDGE2}
if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables; fi
"""
    _run(*ns, "sh", "-c", script)
    _run("ip", "route", "add", str(SUBNET2), "via", NODE2_IP, "dev", BRIDGE)


@contextlib.contextmanager
def running_second_node(cluster: E2ECluster) -> Iterator[RealNode]:
    """Start the second node in its own network namespace (:func:`create_second_node_network`; its root
    ``<root>/node2``, logs in ``<work>/node2``, cgroup ``/<CGROUP_NAME>/node2``, tainted
    :data:`SECOND_NODE_TAINT`), wait until it is Ready; stop it afterwards (what is left, the session's
    :func:`sweep` removes). Sets ``cluster.node2``."""
    assert cluster.journal is not None
    journal, first = cluster.journal, cluster.node
    spec = second_node_spec(first.root)
    root, work = first.root / NODE2_DIR, cluster.work / NODE2_DIR
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    journal.data["cgroups"] = journal.data.get("cgroups", []) + create_cgroups(spec.cgroup)
    journal.save()
    assert spec.netns is not None
    create_second_node_network(journal, spec.netns)
    node = RealNode(cluster.cp, first.bin_dir, first.images, work, journal, root, spec)
    cluster.node2 = node
    try:
        node.start()
        node.wait_ready()
        node.timings["up"] = round(time.monotonic() - t0, 1)
        yield node
    finally:
        node.stop()


def create_bridge(journal: Journal) -> None:
    """The node's bridge with :data:`NODE_IP`, up, without IPv6, and the Service range routed onto it (a packet
    to a Service address that kube-proxy did not translate goes nowhere, never out of the machine)."""
    journal.data["bridge"] = BRIDGE
    journal.save()
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{BRIDGE}/disable_ipv6").write_text("1")
    _run("ip", "addr", "add", f"{NODE_IP}/{SUBNET.prefixlen}", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    _run("ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE)


def start_watchdog(journal: Journal, work: Path) -> subprocess.Popen:
    """A process that outlives this one (no PDEATHSIG, a session of its own) and runs :func:`sweep` when this
    one dies without having done it (a SIGKILLed pytest): ``python -m tests.realnode.realnode --watch PID``."""
    return subprocess.Popen([sys.executable, "-m", "tests.realnode.realnode", "--watch", str(os.getpid()),
                             "--root", str(journal.path.parent)], cwd=REPO, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=(work / "watchdog.log").open("ab"),
                            stderr=subprocess.STDOUT)


@contextlib.contextmanager
def running_real_cluster(work: Path, root: Path = ROOT) -> Iterator[E2ECluster]:
    """Bring up the bridge, the control plane on it and the node (logs and configs in ``work``); afterwards
    tear everything down and check that nothing is left (RuntimeError listing it, and the fix)."""
    cp_dir, node_dir, images = binaries_dir(), node_binaries_dir(), images_dir()
    if cp_dir is None or node_dir is None or images is None:
        raise RuntimeError(SKIP_REASON)
    work.mkdir(parents=True, exist_ok=True)
    journal = begin(root)
    watchdog = start_watchdog(journal, work)
    journal.data["watchdog"] = {"pid": watchdog.pid, "start": proc_start_time(watchdog.pid)}
    journal.save()
    node: RealNode | None = None
    cluster: E2ECluster | None = None
    problems: list[str] = []
    try:
        create_cgroups_made = create_cgroups()
        journal.data["cgroups"] = create_cgroups_made
        journal.save()
        create_bridge(journal)
        with running_control_plane(work, free_port(), cp_dir, address=NODE_IP,
                                   extra_controllers=E2E_CONTROLLERS, node_authorizer=True) as cp:
            node = RealNode(cp, node_dir, images, work, journal, root)
            try:
                node.start()
                node.wait_ready()
                cluster = E2ECluster(cp, node, work, journal)
                yield cluster
            finally:
                if cluster is not None and cluster.node2 is not None:
                    cluster.node2.stop()
                node.stop()
    finally:
        problems = sweep(journal, log=lambda m: print(f"realnode: {m}", file=sys.stderr))
        for p in problems:
            print(f"realnode: left: {p}", file=sys.stderr)
        if node is not None:
            node.reap()
        if cluster is not None and cluster.node2 is not None:
            cluster.node2.reap()
        with contextlib.suppress(ProcessLookupError):
            watchdog.terminate()
        with contextlib.suppress(Exception):
            watchdog.wait(5)
    if problems:
        raise RuntimeError("the e2e node left these on the machine (run hack/node/cleanup.sh):\n  "
                           + "\n  ".join(problems))


# -- command line: cleanup, watchdog, a cluster by hand ----------------------------------------------------------
def _watch(pid: int, root: Path) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        fd = None
    if fd is not None:
        select.select([fd], [], [])
    else:
        while proc_start_time(pid) is not None:
            time.sleep(1)
    journal = Journal.load(root / STATE)
    if journal is None or journal.data.get("owner", {}).get("pid") != pid:
        return 0
    print(f"realnode watchdog: pid {pid} died without tearing the e2e node down; sweeping {root}", flush=True)
    problems = sweep(journal, log=lambda m: print(f"realnode watchdog: {m}", flush=True))
    for p in problems:
        print(f"realnode watchdog: left: {p}", flush=True)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.realnode.realnode --cleanup [--force]`` (what hack/node/cleanup.sh runs): undo what an e2e run
    left, from its state file; ``--check``: only list it (exit 1 if anything is left); ``--up``: bring the cluster
    up, print the kubeconfig, tear down on Ctrl-C / SIGTERM; ``--watch PID`` (internal): the watchdog."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.realnode.realnode", description=main.__doc__)
    parser.add_argument("--cleanup", action="store_true", help="undo what an e2e run left")
    parser.add_argument("--check", action="store_true", help="list what an e2e run left; exit 1 if anything")
    parser.add_argument("--force", action="store_true", help="clean up even if the run's process still runs")
    parser.add_argument("--up", action="store_true", help="run the cluster until Ctrl-C")
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=1, help="with --up: 1 or 2 real nodes")
    parser.add_argument("--watch", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--root", default=str(ROOT), help=f"the node's root (default {ROOT})")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if args.watch:
        return _watch(args.watch, root)
    if args.up:
        import tempfile

        work = Path(tempfile.mkdtemp(prefix="tfk8s-e2e-"))
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        with running_real_cluster(work, root) as cluster, contextlib.ExitStack() as more:
            nodes = f"node {NODE_NAME} ({NODE_IP})"
            if args.nodes == 2:
                more.enter_context(running_second_node(cluster))
                nodes += f" and {NODE2_NAME} ({NODE2_IP}, tainted {SECOND_NODE_TAINT['key']})"
            print(f"e2e cluster at {cluster.cp.url}, {nodes}; logs in {work}\n"
                  f"export KUBECONFIG={cluster.cp.kubeconfig()}\n(Ctrl-C tears it down)", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(1)
        return 0
    journal = Journal.load(root / STATE)
    if journal is None:
        stray = [f"mount {m}" for m in mounts_under(root)] + [f"cgroup {d}" for d in _cgroup_dirs()]
        stray += [f"bridge {BRIDGE}" for link in links() if link["ifname"] == BRIDGE]
        if root.exists():
            stray.append(f"{root} (no {STATE} in it)")
        for s in stray:
            print(f"left without a state file: {s}")
        if not stray:
            print(f"nothing to clean up: no {root / STATE}")
        return 1 if stray else 0
    if args.check and journal.owner_alive():
        # another run (a colleague's, started after ours ended) holds the node now: its begin() swept whatever a
        # finished run left, or refused to start; nothing of ours to judge
        print(f"{root / STATE}: another e2e run (pid {journal.data['owner']['pid']}) holds the node now; "
              f"not checked")
        return 0
    if args.check or not args.cleanup:
        found = leftovers(journal)
        for f in found:
            print(f"left: {f}")
        print(f"{root / STATE}: owner pid {journal.data['owner']['pid']} "
              f"{'running' if journal.owner_alive() else 'gone'}")
        return 1
    if journal.owner_alive() and not args.force:
        print(f"the e2e run (pid {journal.data['owner']['pid']}) still runs: stop it first, or --force",
              file=sys.stderr)
        return 2
    wd = journal.data.get("watchdog")
    if wd:
        _stop_processes([(wd["pid"], wd["start"])], 2.0, print)
    problems = sweep(journal, log=print)
    for p in problems:
        print(f"could not remove: {p}")
    print("clean" if not problems else f"{len(problems)} things left")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
