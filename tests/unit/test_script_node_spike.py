"""scripts/node_spike.py (``make node-spike``): the images and configurations it writes.

The spike itself needs root and a node's packages, so it runs by hand; what it writes is
checked here: an OCI archive ``ctr images import`` accepts, and the settings decision 0021
found this machine needs.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import sys
import tarfile
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import yaml

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "node_spike.py"


@pytest.fixture(scope="module")
def spike() -> ModuleType:
    spec = importlib.util.spec_from_file_location("setpoint_node_spike", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        out = {}
        for member in tar.getmembers():
            handle = tar.extractfile(member)
            assert handle is not None
            out[member.name] = handle.read()
        return out


def test_the_oci_archive_is_a_consistent_image_layout(spike: ModuleType, tmp_path: Path) -> None:
    layer = spike._layer(
        {
            "bin": (None, 0o755, None),
            "bin/tool": (b"\x7fELF...", 0o755, None),
            "bin/sh": (None, 0o777, "tool"),
        }
    )
    archive = tmp_path / "image.tar"
    spike.write_oci_archive(archive, "localhost/x/y:z", layer, {"Entrypoint": ["/bin/tool"]})
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


def test_only_a_binary_without_an_interpreter_counts_as_static(
    spike: ModuleType, tmp_path: Path
) -> None:
    static, dynamic = tmp_path / "static", tmp_path / "dynamic"
    static.write_bytes(_elf(with_interpreter=False))
    dynamic.write_bytes(_elf(with_interpreter=True))
    assert spike._is_static_elf(static)
    assert not spike._is_static_elf(dynamic)
    (tmp_path / "script").write_text("#!/bin/sh\n")
    assert not spike._is_static_elf(tmp_path / "script")


def test_the_kubelet_config_carries_what_this_machine_needs(
    spike: ModuleType, tmp_path: Path
) -> None:
    config = yaml.safe_load(spike.kubelet_config(tmp_path, 2))
    assert config["failCgroupV1"] is False  # Kubernetes 1.35+ refuses cgroup v1 otherwise
    assert config["cgroupDriver"] == "cgroupfs"  # systemd is not PID 1
    assert config["cgroupRoot"] == spike.cgroup_root(2) != spike.cgroup_root(1)
    assert config["address"] == spike.node_ip(2)
    assert config["containerRuntimeEndpoint"] == f"unix://{tmp_path}/containerd.sock"
    assert config["podLogsDir"].startswith(str(tmp_path))


def test_the_containerd_config_keeps_everything_under_the_node(
    spike: ModuleType, tmp_path: Path
) -> None:
    config = tomllib.loads(spike.containerd_config(tmp_path))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # root lacks CAP_SYS_RESOURCE here
    assert cri["netns_mounts_under_state_dir"] is True
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"SystemdCgroup": False, "Root": f"{tmp_path}/runc"}
    for path in (config["root"], config["state"], config["grpc"]["address"]):
        assert path.startswith(str(tmp_path))


def test_each_node_gets_its_own_pod_subnet(spike: ModuleType, tmp_path: Path) -> None:
    subnets = set()
    for index in (1, 2, 3):
        config = json.loads(spike.cni_config(tmp_path, spike.pod_cidr(index)))
        (bridge,) = config["plugins"]
        subnets.add(bridge["ipam"]["ranges"][0][0]["subnet"])
        assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))
    assert len(subnets) == 3


def test_the_network_pods_run_without_the_probed_pods_extras(spike: ModuleType) -> None:
    pod = spike.pod_on("client", "node-a", "echo hi")
    container = pod["spec"]["containers"][0]
    assert pod["spec"]["nodeName"] == "node-a"
    assert container["command"] == ["/bin/sh", "-c", "echo hi"]
    assert "readinessProbe" not in container and "volumes" not in pod["spec"]
    assert "readinessProbe" in spike.POD["spec"]["containers"][0]  # the template is untouched


def test_kubelets_take_only_the_api_servers_certificate_when_the_spike_owns_the_plane(
    spike: ModuleType, tmp_path: Path
) -> None:
    owned = yaml.safe_load(spike.kubelet_config(tmp_path, 1, tmp_path / "ca.crt"))
    assert owned["authentication"] == {
        "anonymous": {"enabled": False},
        "webhook": {"enabled": True},
        "x509": {"clientCAFile": str(tmp_path / "ca.crt")},
    }
    assert owned["authorization"] == {"mode": "Webhook"}
    # Another plane's kube-apiserver has no kubelet client certificate: anonymous it is.
    foreign = yaml.safe_load(spike.kubelet_config(tmp_path, 1))
    assert foreign["authentication"]["anonymous"] == {"enabled": True}
    assert foreign["authorization"] == {"mode": "AlwaysAllow"}
