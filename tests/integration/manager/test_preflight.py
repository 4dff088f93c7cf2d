"""A broken connection fails the manager at once, with a message that says why.

Each case builds a kubeconfig that is wrong in one way against the real local control
plane, runs a manager with one controller and a sync timeout far longer than the test's
bound, and checks the error: its problem, the kubeconfig and server it names, and the fix.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import setpoint as sp
from setpoint.api import kinds
from setpoint.client.client import Client
from setpoint.client.kubeconfig import load_kubeconfig
from setpoint.client.preflight import PreflightFailed, PreflightProblem
from setpoint.manager import Manager, ManagerOptions
from setpoint.observability.metrics import Metrics
from setpoint.testing import ControlPlane
from setpoint.tls.certs import CertificateAuthority

# Far above the bound each test waits: a failure within the bound did not wait for a sync.
SYNC_TIMEOUT = 600.0
BOUND = 60.0


async def _reconcile(ctx: sp.Context, request: sp.Request) -> None:
    return None


def _edited(source: Path, target: Path, edit: Any) -> Path:
    doc = yaml.safe_load(source.read_text())
    edit(doc)
    target.write_text(yaml.safe_dump(doc))
    return target


async def _run_manager(kubeconfig: Path) -> BaseException:
    client = Client(load_kubeconfig(kubeconfig))
    options = ManagerOptions(
        metrics=Metrics.isolated(),
        metrics_bind_address="0",
        health_probe_bind_address="0",
        handle_signals=False,
        cache_sync_timeout=SYNC_TIMEOUT,
    )
    manager = Manager(client, options)
    manager.controller("audit").for_(kinds.ConfigMap).build(_reconcile)
    try:
        async with asyncio.timeout(BOUND):
            await manager.run()
    except Exception as exc:
        return exc
    finally:
        await client.close()
    raise AssertionError("the manager ran although its connection is broken")


def _wrong_ca(kubeconfig_path: Path, tmp_path: Path) -> Path:
    """The admin kubeconfig, trusting a CA that did not sign the server's certificate."""
    other_ca = CertificateAuthority("not-the-cluster-ca")

    def edit(doc: dict[str, Any]) -> None:
        doc["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
            other_ca.cert_pem
        ).decode()

    return _edited(kubeconfig_path, tmp_path / "wrong-ca.kubeconfig", edit)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_preflight_connection_refused(kubeconfig_path: Path, tmp_path: Path) -> None:
    """A closed port fails the manager at once: unreachable, naming kubeconfig and server.

    The message says to check that the API server runs and that the URL is right.
    """
    port = _closed_port()

    def edit(doc: dict[str, Any]) -> None:
        doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"

    kubeconfig = _edited(kubeconfig_path, tmp_path / "closed.kubeconfig", edit)
    error = await _run_manager(kubeconfig)
    assert isinstance(error, PreflightFailed), error
    assert error.problem is PreflightProblem.UNREACHABLE
    message = str(error)
    assert f"https://127.0.0.1:{port}" in message
    assert str(kubeconfig) in message
    assert "refused" in message.lower() or "connect call failed" in message.lower()
    assert "running" in message


async def test_preflight_untrusted_certificate(kubeconfig_path: Path, tmp_path: Path) -> None:
    """A CA the server's certificate does not chain to fails at once with CA advice.

    The kubeconfig keeps the real server and credentials but trusts another CA. The message
    names the kubeconfig and tells to fix its certificate-authority, not to check that the
    server runs (the advice a plain connection error gets).
    """
    kubeconfig = _wrong_ca(kubeconfig_path, tmp_path)
    error = await _run_manager(kubeconfig)
    assert isinstance(error, PreflightFailed), error
    assert error.problem is PreflightProblem.UNTRUSTED_CERTIFICATE
    message = str(error)
    assert str(kubeconfig) in message
    assert "does not trust" in message
    assert "certificate-authority" in message
    assert "is running" not in message


async def test_preflight_bogus_token(control_plane: ControlPlane, tmp_path: Path) -> None:
    """A token the server does not know is a 401: the message says to get fresh credentials."""
    kubeconfig = control_plane.kubeconfig_for_token(
        "not-a-real-token", name="bogus", path=tmp_path / "bogus.kubeconfig"
    )
    error = await _run_manager(kubeconfig)
    assert isinstance(error, PreflightFailed), error
    assert error.problem is PreflightProblem.UNAUTHORIZED
    message = str(error)
    assert "401" in message and str(kubeconfig) in message
    assert control_plane.server in message
    assert "credentials" in message


async def test_preflight_no_credentials(kubeconfig_path: Path, tmp_path: Path) -> None:
    """A kubeconfig without credentials is the anonymous user: the message says so."""

    def edit(doc: dict[str, Any]) -> None:
        doc["users"][0]["user"] = {}

    kubeconfig = _edited(kubeconfig_path, tmp_path / "anonymous.kubeconfig", edit)
    error = await _run_manager(kubeconfig)
    assert isinstance(error, PreflightFailed), error
    assert error.problem is PreflightProblem.NO_CREDENTIALS
    message = str(error)
    assert "system:anonymous" in message and str(kubeconfig) in message


async def test_preflight_user_without_permissions(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """A user without RBAC fails at once, naming the user, the verbs, the kind and the fix."""
    kubeconfig = control_plane.kubeconfig_for_user(
        "preflight-nobody", path=tmp_path / "nobody.kubeconfig"
    )
    error = await _run_manager(kubeconfig)
    assert isinstance(error, PreflightFailed), error
    assert error.problem is PreflightProblem.FORBIDDEN
    message = str(error)
    assert "'preflight-nobody'" in message
    assert "list/watch configmaps in all namespaces" in message
    assert "controller 'audit'" in message
    assert "setpoint generate rbac" in message


async def test_preflight_passes_and_reports_the_user(
    kubeconfig_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With a working kubeconfig the check passes, logs the user, and the manager runs."""
    client = Client(load_kubeconfig(kubeconfig_path))
    options = ManagerOptions(
        metrics=Metrics.isolated(),
        metrics_bind_address="0",
        health_probe_bind_address="0",
        handle_signals=False,
    )
    manager = Manager(client, options)
    manager.controller("audit").for_(kinds.ConfigMap).build(_reconcile)
    caplog.set_level("INFO", logger="setpoint.manager")
    task = asyncio.create_task(manager.run())
    try:
        await manager.wait_elected(timeout=BOUND)
        assert any("connected to" in r.getMessage() for r in caplog.records)
    finally:
        manager.stop()
        await asyncio.wait_for(task, BOUND)
        await client.close()


def test_setpoint_run_fails_fast_on_a_wrong_ca(kubeconfig_path: Path, tmp_path: Path) -> None:
    """`setpoint run` with an untrusted CA exits 1 with one error line naming the kubeconfig.

    The sync timeout is 600 s (`--cache-sync-timeout`), so exiting within the subprocess's
    bound shows the failure did not wait for the caches.
    """
    kubeconfig = _wrong_ca(kubeconfig_path, tmp_path)
    operator = tmp_path / "audit_operator.py"
    operator.write_text(
        "from setpoint import kinds\n\n"
        "async def reconcile(ctx, request):\n    return None\n\n"
        "def setup(manager):\n"
        "    manager.controller('audit').for_(kinds.ConfigMap).build(reconcile)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "setpoint", "run", str(operator),
         "--kubeconfig", str(kubeconfig), "--cache-sync-timeout", str(SYNC_TIMEOUT),
         "--metrics-bind-address", "0", "--health-probe-bind-address", "0"],
        capture_output=True, text=True, timeout=BOUND, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("setpoint: error:")]
    assert len(errors) == 1, done.stderr
    assert str(kubeconfig) in errors[0]
    assert "does not trust" in errors[0]
    assert "Traceback" not in done.stderr
