"""setpoint.testing.nodes: what nodes are configured with, and the errors before they start.

Starting nodes needs root and a node's packages (tests/cluster, ``make test-cluster``); the
configurations, images, checks and errors are checked here without either.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.cli.main import main
from setpoint.testing import nodes
from setpoint.testing.controlplane import (
    Binaries,
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
    _Process,
)
from setpoint.testing.nodes import NodesError, NodeSet


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        out = {}
        for member in tar.getmembers():
            handle = tar.extractfile(member)
            assert handle is not None
            out[member.name] = handle.read()
        return out


def _bin_dir(
    tmp_path: Path, names: tuple[str, ...] = ("kubelet", "kube-proxy", "kube-scheduler")
) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in names:
        (bin_dir / name).write_bytes(b"x")
    return bin_dir


EMPTY_HOST: dict[str, Any] = {
    "mounts": [],
    "netns": [],
    "links": [],
    "cgroups": [],
    "sysctls": {},
    "paths": {},
    "nftables": [],
}


@pytest.fixture
def machine_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root, every package and the CNI plugins, as far as preflight can tell; an empty host."""
    monkeypatch.setattr(nodes, "check_machine", lambda: None)
    monkeypatch.setattr(nodes, "host_state", lambda directory=None: dict(EMPTY_HOST))
    monkeypatch.setattr(nodes, "missing_cni_plugins", lambda directory=None: [])


# --- counts and options -----------------------------------------------------------------


@pytest.mark.parametrize("count", [-1, 10, True, 2.0])
def test_a_node_count_outside_0_to_9_is_refused(count: Any) -> None:
    with pytest.raises(NodesError, match="0 to 9 nodes"):
        nodes.check_node_count(count)
    with pytest.raises(ControlPlaneError, match="0 to 9 nodes"):
        ControlPlaneOptions(nodes=count)


def test_node_counts_in_range_are_accepted() -> None:
    assert [nodes.check_node_count(n) for n in (0, 1, 9)] == [0, 1, 9]
    assert ControlPlaneOptions(nodes=2).nodes == 2


def test_nodes_without_kube_controller_manager_are_refused(tmp_path: Path) -> None:
    plane = ControlPlane(
        ControlPlaneOptions(nodes=1, controller_manager=False, binaries=_binaries(tmp_path))
    )
    with pytest.raises(ControlPlaneError, match="needs kube-controller-manager"):
        plane.start()


# --- the machine ------------------------------------------------------------------------


def test_nodes_need_root(tmp_path: Path) -> None:
    with pytest.raises(NodesError, match="nodes need root"):
        nodes.check_machine(euid=1000, which=lambda tool: f"/usr/bin/{tool}")


def test_a_missing_package_is_named_with_the_command_that_installs_it(tmp_path: Path) -> None:
    static = tmp_path / "busybox"
    static.write_bytes(_elf(with_interpreter=False))

    def which(tool: str) -> str | None:
        if tool in ("socat", "containerd"):
            return None
        return str(static) if tool == "busybox" else f"/usr/bin/{tool}"

    with pytest.raises(NodesError) as caught:
        nodes.check_machine(euid=0, which=which)
    message = str(caught.value)
    assert "containerd, socat" in message
    assert "make cluster-deps" in message
    assert "apt-get install containerd socat" in message


def test_a_dynamic_busybox_is_named_with_its_static_package(tmp_path: Path) -> None:
    dynamic = tmp_path / "busybox"
    dynamic.write_bytes(_elf(with_interpreter=True))

    def which(tool: str) -> str | None:
        return str(dynamic) if tool == "busybox" else f"/usr/bin/{tool}"

    with pytest.raises(NodesError) as caught:
        nodes.check_machine(euid=0, which=which)
    assert "apt-get install busybox-static`" in str(caught.value)


def test_a_machine_with_everything_passes_without_the_distributions_cni_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CNI plugins come from their Go module now: /usr/lib/cni is not asked for.
    static = tmp_path / "busybox"
    static.write_bytes(_elf(with_interpreter=False))
    looked_at: list[str] = []
    real_is_file = Path.is_file

    def is_file(path: Path) -> bool:
        looked_at.append(str(path))
        return real_is_file(path)

    monkeypatch.setattr(Path, "is_file", is_file)
    nodes.check_machine(
        euid=0, which=lambda tool: str(static) if tool == "busybox" else f"/usr/bin/{tool}"
    )
    assert not [p for p in looked_at if "cni" in p]
    assert "containernetworking-plugins" not in nodes.NODE_PACKAGES


def _built_cni(cache: Path) -> Path:
    bin_dir = cache / "cni-plugins" / nodes.CNI_PLUGINS_VERSION / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for plugin in nodes.CNI_PLUGINS:
        (bin_dir / plugin).write_bytes(b"x")
    return bin_dir


def test_the_cni_plugins_are_cached_beside_the_other_node_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    assert nodes.cni_bin_dir() == tmp_path / "cni-plugins" / "v1.10.0" / "bin"
    assert set(nodes.CNI_PLUGINS) == {"bridge", "host-local", "loopback", "portmap"}
    assert nodes.missing_cni_plugins() == list(nodes.CNI_PLUGINS)
    _built_cni(tmp_path)
    assert nodes.missing_cni_plugins() == []


def test_missing_cni_plugins_name_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodes, "check_machine", lambda: None)
    monkeypatch.setattr(nodes, "host_state", lambda directory=None: dict(EMPTY_HOST))
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path / "cache"))
    (_built_cni(tmp_path / "cache") / "portmap").unlink()
    node_set = NodeSet(1, tmp_path / "nodes", bin_dir=_bin_dir(tmp_path))
    with pytest.raises(NodesError, match="CNI plugin\\(s\\) portmap not found") as caught:
        node_set.preflight()
    assert "setpoint controlplane build --nodes" in str(caught.value)
    assert str(nodes.cni_bin_dir()) in str(caught.value)


def test_building_the_cni_plugins_installs_each_missing_one_from_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    bin_dir = _built_cni(tmp_path)
    (bin_dir / "bridge").unlink()
    (bin_dir / "portmap").unlink()
    calls: list[tuple[list[str], dict[str, str]]] = []

    def run(argv: list[str], *, check: bool = True, env: dict[str, str] | None = None) -> str:
        assert env is not None
        calls.append((list(argv), env))
        (Path(env["GOBIN"]) / argv[-1].split("/")[-1].split("@")[0]).write_bytes(b"x")
        return ""

    monkeypatch.setattr(nodes, "_run", run)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/bin/{tool}")
    ticks = iter([0.0, 3.0, 10.0, 12.0])
    lines: list[str] = []
    taken = nodes.build_cni_plugins(log=lines.append, clock=lambda: next(ticks))
    assert [argv[-1] for argv, _ in calls] == [
        "github.com/containernetworking/plugins/plugins/main/bridge@v1.10.0",
        "github.com/containernetworking/plugins/plugins/meta/portmap@v1.10.0",
    ]
    for argv, env in calls:
        assert env["CGO_ENABLED"] == "0" and env["GOBIN"] == str(bin_dir)
        assert argv[:3] == ["go", "install", "-trimpath"]
        assert "buildversion.BuildVersion=v1.10.0" in argv[argv.index("-ldflags") + 1]
    assert taken == {"bridge": 3.0, "host-local": 0.0, "loopback": 0.0, "portmap": 2.0}
    assert lines[0].startswith("building CNI plugins v1.10.0 (bridge, portmap)")
    assert lines[1:] == ["  [1/2] bridge built in 3s", "  [2/2] portmap built in 2s"]
    calls.clear()
    assert nodes.build_cni_plugins(log=lines.append) == dict.fromkeys(nodes.CNI_PLUGINS, 0.0)
    assert calls == []  # all cached: nothing built


def test_a_failed_cni_build_names_the_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/bin/{tool}")

    def fail(argv: list[str], **_: Any) -> str:
        raise NodesError("`go install ...` exited 1: no route to proxy")

    monkeypatch.setattr(nodes, "_run", fail)
    with pytest.raises(NodesError, match=r"CNI plugin bridge v1\.10\.0 failed: .*no route"):
        nodes.build_cni_plugins(log=lambda line: None)
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    with pytest.raises(NodesError, match="Go is needed once to build the CNI plugins"):
        nodes.build_cni_plugins(log=lambda line: None)


def test_missing_node_binaries_name_the_build_command(tmp_path: Path, machine_ok: None) -> None:
    node_set = NodeSet(1, tmp_path / "nodes", bin_dir=_bin_dir(tmp_path, ("kubelet",)))
    with pytest.raises(NodesError, match="kube-proxy, kube-scheduler not found") as caught:
        node_set.preflight()
    assert "setpoint controlplane build --nodes" in str(caught.value)


def test_names_left_by_another_plane_or_a_crash_are_refused(
    tmp_path: Path, machine_ok: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        nodes,
        "host_state",
        lambda directory=None: {**EMPTY_HOST, "links": ["setpoint0"], "netns": ["setpoint-node1"]},
    )
    with pytest.raises(NodesError, match="setpoint0, setpoint-node1 exist already") as caught:
        NodeSet(1, tmp_path, bin_dir=_bin_dir(tmp_path)).preflight()
    assert "setpoint controlplane down --clean" in str(caught.value)


def _binaries(tmp_path: Path) -> Binaries:
    bin_dir = _bin_dir(tmp_path, ("etcd", "kube-apiserver", "kube-controller-manager"))
    return Binaries(
        kube_apiserver=bin_dir / "kube-apiserver",
        etcd=bin_dir / "etcd",
        kube_controller_manager=bin_dir / "kube-controller-manager",
        kubectl=None,
        source="test",
    )


def test_a_failed_preflight_starts_nothing_and_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def not_root() -> None:
        raise NodesError("nodes need root")

    monkeypatch.setattr(nodes, "check_machine", not_root)
    base = tmp_path / "planes"
    plane = ControlPlane(ControlPlaneOptions(nodes=2, binaries=_binaries(tmp_path), base_dir=base))
    with pytest.raises(NodesError, match="nodes need root"):
        plane.start()
    assert list(base.iterdir()) == []
    assert plane.nodes is None and not plane.running


def test_a_kubelet_that_exits_fails_the_start_with_its_last_log_lines(tmp_path: Path) -> None:
    node_set = NodeSet(1, tmp_path, bin_dir=tmp_path)
    node = node_set.nodes[0]
    kubelet = _Process(
        "kubelet",
        ["sh", "-c", "echo starting; echo 'E failed to run Kubelet: boom'; exit 1"],
        tmp_path / "kubelet.log",
    )
    kubelet.start()
    assert kubelet.proc is not None
    kubelet.proc.wait()
    node.kubelet = kubelet
    with pytest.raises(NodesError, match="setpoint-node1's kubelet exited") as caught:
        node_set._wait_ready(None, node)  # type: ignore[arg-type]  # exits before any request
    assert "failed to run Kubelet: boom" in str(caught.value)


def test_stopping_a_set_that_never_started_is_a_no_op(tmp_path: Path) -> None:
    node_set = NodeSet(2, tmp_path / "nodes", bin_dir=tmp_path)
    assert node_set.stop() == []
    assert node_set.stop() == []


def test_stopping_a_set_that_never_started_leaves_another_planes_proxy_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A set refused by preflight (another plane with nodes runs) deletes none of its tables."""
    ran: list[list[str]] = []

    def run(args: list[str], **_: Any) -> str:
        ran.append(list(args))
        return "".join(f"table {t}\n" for t in nodes.HOST_PROXY_TABLES)

    monkeypatch.setattr(nodes, "_run", run)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    monkeypatch.setattr(nodes, "processes_mentioning", lambda text: [])
    node_set = NodeSet(2, tmp_path / "nodes", bin_dir=tmp_path)
    node_set.stop()
    assert [a for a in ran if a[:2] == ["nft", "delete"]] == []


# --- leftovers --------------------------------------------------------------------------


def test_leftovers_name_everything_the_host_did_not_have_before() -> None:
    kubelet_root = str(Path(tempfile.gettempdir(), "setpoint-cp-x/nodes/node1/kubelet/root"))
    before = {
        **EMPTY_HOST,
        "links": ["setpoint-other"],
        "sysctls": {"kernel/panic": "0"},
        "paths": {"/run/netns": False, "/var/lib/cni": True},
    }
    after = {
        "mounts": [kubelet_root],
        "netns": ["setpoint-node1"],
        "links": ["setpoint-other", "setpoint0"],
        "cgroups": ["/sys/fs/cgroup/memory/setpoint-node1"],
        "sysctls": {"kernel/panic": "10"},
        "paths": {"/run/netns": True, "/var/lib/cni": True},
        "nftables": ["ip kube-proxy"],
    }
    problems = nodes.leftovers(before, after, [(42, "kubelet --config=x")])
    assert problems == [
        "process 42 still runs: kubelet --config=x",
        f"mount left: {kubelet_root}",
        "netns left: setpoint-node1",
        "link left: setpoint0",
        "cgroup left: /sys/fs/cgroup/memory/setpoint-node1",
        "nftables table left: ip kube-proxy",
        "sysctl kernel/panic is 10, was 0",
        "path left: /run/netns",
    ]
    assert nodes.leftovers(before, before) == []


# --- images -----------------------------------------------------------------------------


def test_the_oci_archive_is_a_consistent_image_layout(tmp_path: Path) -> None:
    layer = nodes._layer(
        {
            "bin": (None, 0o755, None),
            "bin/tool": (b"\x7fELF...", 0o755, None),
            "bin/sh": (None, 0o777, "tool"),
        }
    )
    archive = tmp_path / "image.tar"
    nodes.write_oci_archive(archive, "localhost/x/y:z", layer, {"Entrypoint": ["/bin/tool"]})
    files = _members(archive)

    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/x/y:z"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "localhost/x/y:z"

    def blob(descriptor: dict[str, object]) -> bytes:
        digest = str(descriptor["digest"])
        data = files["blobs/sha256/" + digest.removeprefix("sha256:")]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
        assert len(data) == descriptor["size"]
        return data

    manifest = json.loads(blob(entry))
    config = json.loads(blob(manifest["config"]))
    (layer_descriptor,) = manifest["layers"]
    unpacked = gzip.decompress(blob(layer_descriptor))
    # The config names the uncompressed layer: the runtime checks this on unpack.
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(unpacked).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/bin/tool"]
    with tarfile.open(fileobj=io.BytesIO(unpacked)) as tar:
        assert tar.getmember("bin/sh").linkname == "tool"
        assert tar.getmember("bin/tool").mode == 0o755


def _elf(with_interpreter: bool) -> bytes:
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    header[0x20:0x28] = (64).to_bytes(8, "little")  # program headers right after
    header[0x36:0x38] = (56).to_bytes(2, "little")
    header[0x38:0x3A] = (2).to_bytes(2, "little")
    load = (1).to_bytes(4, "little") + bytes(52)
    second = (3 if with_interpreter else 1).to_bytes(4, "little") + bytes(52)
    return bytes(header) + load + second


def test_only_a_binary_without_an_interpreter_counts_as_static(tmp_path: Path) -> None:
    static, dynamic = tmp_path / "static", tmp_path / "dynamic"
    static.write_bytes(_elf(with_interpreter=False))
    dynamic.write_bytes(_elf(with_interpreter=True))
    assert nodes._is_static_elf(static)
    assert not nodes._is_static_elf(dynamic)
    (tmp_path / "script").write_text("#!/bin/sh\n")
    assert not nodes._is_static_elf(tmp_path / "script")
    assert not nodes._is_static_elf(tmp_path / "missing")


def test_loading_an_image_needs_nodes(tmp_path: Path) -> None:
    with pytest.raises(NodesError, match="the plane has no nodes"):
        nodes.import_image([], str(tmp_path / "x.tar"))


def test_an_image_name_without_buildah_or_podman_says_how_to_make_an_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    with pytest.raises(NodesError, match="neither buildah nor podman") as caught:
        nodes.import_image([tmp_path / "containerd.sock"], "localhost/my/operator:dev")
    assert "oci-archive:" in str(caught.value)


def test_the_running_nodes_are_read_from_the_planes_record(tmp_path: Path) -> None:
    assert nodes.running_nodes(tmp_path) == []
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes" / "nodes.json").write_text(
        json.dumps({"nodes": [{"name": "setpoint-node1", "socket": "/x/containerd.sock"}]})
    )
    assert nodes.running_nodes(tmp_path) == [Path("/x/containerd.sock")]


# --- configurations ---------------------------------------------------------------------


def test_the_kubelet_config_carries_what_this_machine_needs(tmp_path: Path) -> None:
    config = yaml.safe_load(nodes.kubelet_config(tmp_path, 2, tmp_path / "ca.crt"))
    assert config["failCgroupV1"] is False  # Kubernetes 1.35+ refuses cgroup v1 otherwise
    assert config["cgroupDriver"] == "cgroupfs"  # systemd is not PID 1
    assert config["cgroupRoot"] == nodes.cgroup_root(2) != nodes.cgroup_root(1)
    assert config["address"] == nodes.node_ip(2)
    assert config["containerRuntimeEndpoint"] == f"unix://{tmp_path}/containerd.sock"
    assert config["podLogsDir"].startswith(str(tmp_path))
    # Only kube-apiserver's client certificate (or a token kube-apiserver vouches for).
    assert config["authentication"] == {
        "anonymous": {"enabled": False},
        "webhook": {"enabled": True},
        "x509": {"clientCAFile": str(tmp_path / "ca.crt")},
    }
    assert config["authorization"] == {"mode": "Webhook"}


def test_the_containerd_config_keeps_everything_under_the_node(tmp_path: Path) -> None:
    config = tomllib.loads(nodes.containerd_config(tmp_path, tmp_path / "cni-bin"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # root lacks CAP_SYS_RESOURCE here
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["sandbox_image"] == nodes.PAUSE_IMAGE
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"SystemdCgroup": False, "Root": f"{tmp_path}/runc"}
    assert cri["cni"]["conf_template"] == f"{tmp_path}/cni/template.json"
    assert cri["cni"]["bin_dir"] == str(tmp_path / "cni-bin")
    for path in (config["root"], config["state"], config["grpc"]["address"]):
        assert path.startswith(str(tmp_path))


def test_containerd_runs_the_cni_plugins_built_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path / "cache"))
    config = tomllib.loads(nodes.containerd_config(tmp_path / "node"))
    bin_dir = config["plugins"]["io.containerd.grpc.v1.cri"]["cni"]["bin_dir"]
    assert bin_dir == str(tmp_path / "cache" / "cni-plugins" / "v1.10.0" / "bin")
    assert "/usr/lib/cni" not in nodes.containerd_config(tmp_path / "node")


def test_the_cni_template_chains_every_plugin_it_names_and_all_are_built(tmp_path: Path) -> None:
    plugins = json.loads(nodes.cni_template(tmp_path))["plugins"]
    assert [p["type"] for p in plugins] == ["bridge", "portmap"]
    assert plugins[0]["ipam"]["type"] == "host-local"
    assert plugins[1]["capabilities"] == {"portMappings": True}
    named = {p["type"] for p in plugins} | {plugins[0]["ipam"]["type"], "loopback"}
    assert named == set(nodes.CNI_PLUGINS)  # containerd runs loopback itself


def test_the_cni_template_takes_the_pod_cidr_node_ipam_assigns(tmp_path: Path) -> None:
    bridge = json.loads(nodes.cni_template(tmp_path))["plugins"][0]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "{{.PodCIDR}}"}]]
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))
    assert bridge["isGateway"] is True and bridge["ipMasq"] is False


def test_node_ipam_hands_out_a_24_of_the_cluster_cidr_apart_from_services() -> None:
    args = NodeSet.controller_manager_args()
    assert args["allocate-node-cidrs"] == "true"
    assert args["cluster-cidr"] == nodes.CLUSTER_CIDR
    assert args["node-cidr-mask-size"] == "24"
    assert args["service-cluster-ip-range"] == nodes.SERVICE_CIDR
    for controller in (
        "node-lifecycle-controller",
        "node-ipam-controller",
        "deployment-controller",
    ):
        assert controller in NodeSet.controllers()


def test_kube_apiserver_reaches_kubelets_by_internal_ip_with_its_own_certificate(
    tmp_path: Path,
) -> None:
    node_set = NodeSet(1, tmp_path / "nodes", bin_dir=tmp_path)
    args = node_set.apiserver_args(tmp_path)
    assert args["kubelet-preferred-address-types"] == "InternalIP"
    assert "enable-aggregator-routing" not in args  # the host kube-proxy serves Services
    # kube-apiserver points the kubernetes Service at the bridge address itself.
    assert args["advertise-address"] == nodes.HOST_IP
    assert args["endpoint-reconciler-type"] == "lease"
    assert Path(args["kubelet-client-certificate"]).read_bytes().startswith(b"-----BEGIN")
    assert (Path(args["kubelet-client-key"]).stat().st_mode & 0o777) == 0o600
    assert (tmp_path / "nodes" / "kubelet-client-ca.crt").is_file()


def test_kube_proxy_keeps_host_wide_settings_alone(tmp_path: Path) -> None:
    config = json.loads(nodes.kube_proxy_config(tmp_path / "kubeconfig", 3))
    assert config["hostnameOverride"] == nodes.node_name(3)
    assert config["oomScoreAdj"] == 0
    assert config["conntrack"] == {"maxPerCore": 0}
    assert config["clusterCIDR"] == nodes.CLUSTER_CIDR


def test_the_host_kube_proxy_keeps_its_rules_and_ports_to_itself(tmp_path: Path) -> None:
    """The host's kube-proxy (kube-apiserver's path to Services) changes no host setting.

    nftables mode: its rules live in tables of its own, which `down` deletes; conntrack
    timeouts and table size are left as the host has them; it listens on the bridge only.
    """
    config = json.loads(nodes.host_kube_proxy_config(tmp_path / "kubeconfig"))
    assert config["mode"] == "nftables"
    assert config["hostnameOverride"] == nodes.HOST_PROXY_NAME
    # With nodes it goes by node 1's name: kube-proxy waits 30 s for a Node of its name.
    named = json.loads(nodes.host_kube_proxy_config(tmp_path / "k", nodes.node_name(1)))
    assert named["hostnameOverride"] == "setpoint-node1"
    assert config["conntrack"] == {
        "maxPerCore": 0,
        "min": 0,
        "tcpEstablishedTimeout": "0s",
        "tcpCloseWaitTimeout": "0s",
    }
    assert config["oomScoreAdj"] == 0
    for key in ("healthzBindAddress", "metricsBindAddress"):
        assert config[key].startswith(f"{nodes.HOST_IP}:")
    assert config["nodePortAddresses"] == [f"{nodes.HOST_IP}/32"]
    assert config["clientConnection"]["kubeconfig"] == str(tmp_path / "kubeconfig")


# --- the command line -------------------------------------------------------------------


def test_up_with_too_many_nodes_fails_before_starting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    assert main(["controlplane", "up", "--nodes", "12", "--name", "t"]) == 2
    assert "--nodes=12: a plane has 0 to 9 nodes" in capsys.readouterr().err
    assert not (tmp_path / "planes" / "t").exists()


def test_up_with_nodes_as_a_user_says_root_before_starting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("setpoint.cli.controlplane.find_binaries", lambda: _binaries(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["controlplane", "up", "--nodes", "2", "--name", "t"]) == 2
    assert "nodes need root" in capsys.readouterr().err
    assert not (tmp_path / "planes" / "t").exists()


def test_load_image_into_a_plane_that_does_not_run_says_how_to_start_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    assert main(["controlplane", "load-image", "image.tar", "--name", "t"]) == 1
    assert "`setpoint controlplane up --nodes N --name t`" in capsys.readouterr().err


def test_a_plane_with_nodes_lists_the_nodes_logs(tmp_path: Path) -> None:
    plane = ControlPlane()
    plane.nodes = NodeSet(1, tmp_path, bin_dir=tmp_path)
    node = plane.nodes.nodes[0]
    node.kubelet = _Process("setpoint-node1 kubelet", ["true"], tmp_path / "kubelet.log")
    assert list(plane.logs()) == [("setpoint-node1 kubelet", tmp_path / "kubelet.log")]


@pytest.mark.parametrize("image", ["operator.tar", "./operator", "/x/operator.tar.gz", "a.tgz"])
def test_a_missing_archive_is_named_not_looked_up_as_an_image(tmp_path: Path, image: str) -> None:
    with pytest.raises(NodesError, match="no such archive"):
        nodes.import_image([tmp_path / "containerd.sock"], image)


def test_the_cluster_dns_is_coredns_as_kubeadm_deploys_it() -> None:
    """CoreDNS in kube-system behind kube-dns at the kubelets' clusterDNS address.

    Non-root on port 53 through the namespaced sysctl (no capability), read-only root,
    probes on /ready and /health, listing only what its kubernetes plugin reads.
    """
    objects = dict((obj["kind"], (path, obj)) for path, obj in nodes.coredns_objects())
    assert list(objects) == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
    ]
    path, service = objects["Service"]
    assert path == "/api/v1/namespaces/kube-system/services"
    assert service["spec"]["clusterIP"] == nodes.DNS_SERVICE_IP
    assert {(p["port"], p["protocol"]) for p in service["spec"]["ports"]} == {
        (53, "UDP"),
        (53, "TCP"),
    }
    pod = objects["Deployment"][1]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["sysctls"] == [
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}
    ]
    container = pod["containers"][0]
    assert container["image"] == nodes.COREDNS_IMAGE
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    corefile = objects["ConfigMap"][1]["data"]["Corefile"]
    assert f"kubernetes {nodes.CLUSTER_DOMAIN} " in corefile and "ready :8181" in corefile
    verbs = {v for rule in objects["ClusterRole"][1]["rules"] for v in rule["verbs"]}
    assert verbs == {"list", "watch"}


def test_kubelets_point_pods_at_the_cluster_dns_only_when_it_runs(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    plain = yaml.safe_load(nodes.kubelet_config(tmp_path, 1, ca))
    assert "clusterDNS" not in plain
    with_dns = yaml.safe_load(nodes.kubelet_config(tmp_path, 1, ca, dns=True))
    assert with_dns["clusterDNS"] == [nodes.DNS_SERVICE_IP]
    assert with_dns["clusterDomain"] == nodes.CLUSTER_DOMAIN


def test_coredns_runs_when_it_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    assert NodeSet(1, tmp_path / "a", bin_dir=tmp_path).dns is False
    binary = nodes.coredns_binary()
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x7fELF")
    assert NodeSet(1, tmp_path / "b", bin_dir=tmp_path).dns is True
    assert NodeSet(1, tmp_path / "c", bin_dir=tmp_path, dns=False).dns is False
    assert nodes.build_coredns() == binary  # built already: no Go needed


def test_the_processes_a_killed_shim_leaves_are_found_by_their_node_cgroup(
    tmp_path: Path,
) -> None:
    # After `kill -9` of a containerd shim its Pod's /pause lives on, re-parented to init;
    # only its cgroup under the node's cgroup root says whose it is (down --clean kills it).
    node = tmp_path / "cpu" / "setpoint-node1"
    container = node / "kubepods" / "besteffort" / "pod1" / "abc"
    container.mkdir(parents=True)
    (node / "cgroup.procs").write_text("")
    (container / "cgroup.procs").write_text("21510\n21600\n")
    other = tmp_path / "memory" / "setpoint-node1" / "kubepods"
    other.mkdir(parents=True)
    (other / "cgroup.procs").write_text("21510\n7\n")
    assert nodes.cgroup_processes([str(node), str(other.parent)]) == [7, 21510, 21600]
    assert nodes.cgroup_processes([str(tmp_path / "gone")]) == []
