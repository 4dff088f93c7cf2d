"""The local control plane itself: version, kubectl access, CLI, isolation, clean stop."""

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject
from setpoint.client import Client, NotFound, load_kubeconfig
from setpoint.testing import ControlPlane, ControlPlaneOptions, eventually
from setpoint.testing.controlplane import find_binaries, selected_kubernetes_version


async def test_server_reports_the_pinned_release(k8s: Client) -> None:
    """/version reports the selected release (by default the packaged pin), stamped in the build."""
    version = await k8s.server_version()
    assert version["gitVersion"] == selected_kubernetes_version()
    assert version["major"] == "1"


def test_kubectl_reaches_the_plane(kubeconfig_path: Path) -> None:
    """kubectl, built alongside the plane, lists namespaces with the admin kubeconfig."""
    kubectl = find_binaries().kubectl
    assert kubectl is not None, "kubectl was not built"
    out = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig_path), "get", "ns", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "namespace/default" in out.split()
    version = subprocess.run(
        [str(kubectl), "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert selected_kubernetes_version() in version


async def test_two_planes_do_not_collide_and_a_stop_leaves_no_processes(
    control_plane: ControlPlane, k8s: Client
) -> None:
    """A second plane gets its own ports, directory and data; stopping it leaves nothing.

    An object created in one is not visible in the other. Stopping the second ends every
    component process and removes its directory, and leaves the first running. (One test,
    so the second plane is started once for both.)
    """
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as second:
        assert second.server != control_plane.server
        assert second.directory != control_plane.directory
        pids = [p.proc.pid for p in second._processes if p.proc is not None]
        directory = second.directory
        assert len(pids) == 2
        async with Client(load_kubeconfig(str(second.kubeconfig_path))) as other:
            await other.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "only-in-second"}}
            )
            names = {n["metadata"]["name"] for n in await other.list(kinds.Namespace)}
            assert "only-in-second" in names
        first = {n["metadata"]["name"] for n in await k8s.list(kinds.Namespace)}
        assert "only-in-second" not in first
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not directory.exists()
    assert control_plane.running


def test_components_die_with_a_killed_parent(tmp_path: Path) -> None:
    """When the process that started a plane is SIGKILLed, its components die too.

    No atexit hook runs after SIGKILL; the parent-death signal set on each child
    is what prevents orphaned etcd and kube-apiserver processes.
    """
    script = (
        "from setpoint.testing import ControlPlane, ControlPlaneOptions\n"
        "import os, sys, time\n"
        "p = ControlPlane(ControlPlaneOptions(controller_manager=False)); p.start()\n"
        "print(' '.join(str(x.proc.pid) for x in p._processes), flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    children = [int(x) for x in line.split()]
    assert len(children) == 2, line
    proc.kill()
    proc.wait(10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in children):
        time.sleep(0.1)
    assert not any(psutil.pid_exists(p) for p in children)


def test_cli_up_env_down(tmp_path: Path) -> None:
    """`setpoint controlplane up` prints an export line, `env` repeats it, `down` stops it.

    kubectl works with the printed KUBECONFIG in between, as a user would run it.
    """
    env = dict(os.environ)
    name = f"clitest{os.getpid()}"
    cli = [sys.executable, "-m", "setpoint", "controlplane"]
    up = subprocess.run(
        [*cli, "up", "--name", name],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert up.returncode == 0, up.stderr
    line = up.stdout.strip().splitlines()[-1]
    assert line.startswith("export KUBECONFIG=")
    kubeconfig = line.split("=", 1)[1]
    try:
        again = subprocess.run(
            [*cli, "env", "--name", name],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=True,
        )
        assert again.stdout.strip() == line
        kubectl = find_binaries().kubectl
        assert kubectl is not None
        ns = subprocess.run(
            [str(kubectl), "get", "ns"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, "KUBECONFIG": kubeconfig},
            check=True,
        )
        assert "default" in ns.stdout
    finally:
        down = subprocess.run(
            [*cli, "down", "--name", name],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    assert down.returncode == 0, down.stderr
    gone = subprocess.run(
        [*cli, "env", "--name", name],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert gone.returncode == 1
    assert "not running" in gone.stderr


async def test_crds_installed_before_the_controller_manager_cascade_at_once() -> None:
    """CRDs given to ControlPlaneOptions are Established before kube-controller-manager starts.

    Its garbage collector then handles the kind from its first sync: deleting a custom
    resource removes its dependents at once, instead of after the collector's 30-second
    rescan for new kinds.
    """
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.early.setpoint.dev"},
        "spec": {
            "group": "early.setpoint.dev",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    gadget = GroupVersionKind("early.setpoint.dev", "v1", "Gadget")
    with ControlPlane(ControlPlaneOptions(crds=[crd])) as plane:
        async with Client(load_kubeconfig(str(plane.kubeconfig_path))) as client:
            owner: JsonObject = await client.create(
                {
                    "apiVersion": "early.setpoint.dev/v1",
                    "kind": "Gadget",
                    "metadata": {"name": "g", "namespace": "default"},
                }
            )
            await client.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": "dependent",
                        "namespace": "default",
                        "ownerReferences": [
                            {
                                "apiVersion": "early.setpoint.dev/v1",
                                "kind": "Gadget",
                                "name": "g",
                                "uid": owner["metadata"]["uid"],
                            }
                        ],
                    },
                }
            )
            await client.delete(gadget, "g", namespace="default")

            async def collected() -> bool:
                try:
                    await client.get(kinds.ConfigMap, "dependent", namespace="default")
                except NotFound:
                    return True
                return False

            # Well under the collector's 30 s rescan period.
            await eventually(collected, timeout=15, description="dependent collected")
