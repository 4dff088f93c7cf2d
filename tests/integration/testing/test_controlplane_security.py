"""The local control plane on a shared machine: etcd needs a client certificate, secrets 0600.

Issue 18, item 13: etcd listened on loopback without authentication, so any local user
could read Secrets from it or rewrite the test cluster; the kubeconfig helpers wrote
through symlinks with umask permissions before a chmod.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from setpoint.testing.controlplane import ControlPlane


def _range_request(url: str) -> urllib.request.Request:
    key = base64.b64encode(b"/registry/").decode()
    end = base64.b64encode(b"/registry0").decode()
    return urllib.request.Request(
        f"{url}/v3/kv/range",
        data=json.dumps({"key": key, "range_end": end, "keys_only": True}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )


def test_etcd_refuses_clients_without_its_certificate(control_plane: ControlPlane) -> None:
    """Plain HTTP and TLS without a client certificate both fail; the plane's own client works."""
    url = control_plane._etcd_url
    assert url.startswith("https://127.0.0.1:")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(_range_request(url.replace("https://", "http://")), timeout=5)
    trusting = ssl.create_default_context(
        cafile=str(control_plane.directory / "etcd-ca.crt")
    )  # trusts the server, presents no certificate
    with (
        pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError, OSError)),
        urllib.request.urlopen(_range_request(url), timeout=5, context=trusting) as resp,
    ):
        resp.read()
    # The plane's own helpers hold the client certificate: a range read succeeds.
    assert control_plane.stored_api_version("setpoint.dev/nothing/here") is None


def test_kubeconfigs_are_private_and_never_written_through_a_link(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """path= pointing at a symlink replaces the link; the file is 0600 whatever the umask."""
    victim = tmp_path / "victim"
    victim.write_text("do not touch")
    link = tmp_path / "user.kubeconfig"
    link.symlink_to(victim)
    old = os.umask(0)
    try:
        written = control_plane.kubeconfig_for_user("alice", path=link)
        token_path = tmp_path / "token.kubeconfig"
        control_plane.kubeconfig_for_token("t0k", name="bob", path=token_path)
    finally:
        os.umask(old)
    assert victim.read_text() == "do not touch"
    assert not written.is_symlink()
    for path in (written, token_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert "alice" in written.read_text()
