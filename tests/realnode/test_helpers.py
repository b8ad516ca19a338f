"""The e2e node's helpers that need no node (tests/realnode/realnode.py), run by `make test`: the OCI archive the images are
imported from, which iptables chains the sweep takes for its own, the journal, process identity, mountinfo."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from tests.realnode import realnode


def test_write_image_is_an_oci_layout_whose_digests_and_name_hold(tmp_path: Path):
    prog = tmp_path / "prog"
    prog.write_bytes(b"\x7fELF not really")
    archive = tmp_path / "img.tar"
    digest = realnode.write_image(archive, "tfk8s.local/x:1", {"/prog": prog}, ["/prog"])
    with tarfile.open(archive) as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers()}
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    entry = json.loads(files["index.json"])["manifests"][0]
    assert entry["digest"] == digest
    assert entry["annotations"]["io.containerd.image.name"] == "tfk8s.local/x:1"
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    manifest = json.loads(files[f"blobs/sha256/{digest.split(':')[1]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["config"]["Entrypoint"] == ["/prog"]
    layer = files[f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}"]
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]  # uncompressed: the same digest
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        (member,) = t.getmembers()
        assert (member.name, member.mode, member.uid, member.mtime) == ("prog", 0o755, 0, 0)
        assert t.extractfile(member).read() == prog.read_bytes()


def test_the_sweep_takes_kube_chains_and_our_networks_cni_chains_only():
    lines = [
        "-N KUBE-SERVICES", "-N CNI-ours", "-N CNI-theirs", "-N DOCKER",
        '-A POSTROUTING -s 10.77.0.12/32 -m comment --comment "name: \\"tfk8s-e2e\\" id: \\"abc\\"" -j CNI-ours',
        '-A POSTROUTING -s 10.88.0.3/32 -m comment --comment "name: \\"podman\\" id: \\"def\\"" -j CNI-theirs',
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
    ]
    assert realnode._our_chains(lines) == ["KUBE-SERVICES", "CNI-ours"]


def test_journal_round_trip_and_owner(tmp_path: Path):
    j = realnode.Journal(tmp_path / "state.json", {"owner": {"pid": os.getpid(),
                                                             "start": realnode.proc_start_time(os.getpid())}})
    j.add("processes", {"name": "x", "pid": 1, "start": 2})
    loaded = realnode.Journal.load(tmp_path / "state.json")
    assert loaded is not None and loaded.data["processes"] == [{"name": "x", "pid": 1, "start": 2}]
    assert loaded.owner_alive()
    loaded.data["owner"]["start"] += 1  # the same pid, another process: not ours
    assert not loaded.owner_alive()
    assert realnode.Journal.load(tmp_path / "missing.json") is None


def test_process_identity_and_mount_points():
    assert realnode.proc_start_time(os.getpid()) is not None
    assert realnode.proc_start_time(2**22 + 12345) is None  # above pid_max: no such process
    assert "/" in [m for m, _ in realnode.mounts()]
    assert realnode._unescape("/a\\040b") == "/a b"
    assert realnode.mounts_under(Path("/nonexistent-tfk8s")) == []


def test_the_two_nodes_specs_have_their_own_subnets_addresses_cgroups_and_namespace(tmp_path: Path):
    first, second = realnode.first_node_spec(tmp_path), realnode.second_node_spec(tmp_path)
    assert (str(first.subnet), first.ip, first.gateway, first.bridge) == ("10.77.0.0/24", "10.77.0.1", "10.77.0.1",
                                                                         "tfk8s0")
    assert (str(second.subnet), second.ip, second.gateway, second.bridge) == ("10.77.1.0/24", "10.77.0.2",
                                                                             "10.77.1.1", "tfk8s1")
    # the second node's address is on the first node's subnet, below its pods' range; host-gw routes
    assert first.pod_range == ("10.77.0.10", "10.77.0.250") and second.pod_range == ("10.77.1.10", "10.77.1.250")
    assert first.pod_routes == (("10.77.1.0/24", "10.77.0.2"),)
    assert (first.netns, second.netns) == (None, tmp_path / "netns" / "node2")
    assert (first.cgroup, second.cgroup) == ("tfk8s-e2e", "tfk8s-e2e/node2")  # nested: swept with the first
    assert (first.taints, second.taints) == ((), (realnode.SECOND_NODE_TAINT,))
    assert realnode.in_netns(None) == []
    assert realnode.in_netns(second.netns) == ["nsenter", f"--net={tmp_path}/netns/node2", "--"]
    assert len(realnode.LINK2) <= 15  # an interface name's limit (IFNAMSIZ - 1)
