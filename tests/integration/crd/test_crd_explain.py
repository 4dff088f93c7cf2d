"""What `kubectl explain` shows a CRD's users: their own words, in plain text."""

from __future__ import annotations

from pathlib import Path

from setpoint.client import Client
from setpoint.crd.generator import crd_for
from setpoint.migrate.install import apply_crd
from setpoint.testing import eventually
from tests._support.crd_server import kubectl
from tests._support.gadgets import Gadget


async def test_kubectl_explain_shows_plain_condition_text(
    k8s: Client, kubeconfig_path: Path
) -> None:
    """kubectl explain <kind>.status.conditions: the user's text, then plain condition text.

    No reST roles or literals from setpoint's docstrings reach the server's OpenAPI.
    """
    await apply_crd(k8s, crd_for(Gadget))
    # The server publishes a new CRD's OpenAPI a moment after it is Established.
    shown = await eventually(
        lambda: kubectl(kubeconfig_path, "explain", "gadgets.status.conditions"),
        timeout=60,
        interval=0.5,
        description="kubectl explain finds the Gadget kind",
    )
    assert "Ready: every part exists. Degraded: something needs attention." in shown
    assert "One aspect of the object's current state, as observed by its controller." in shown
    described = shown.split("DESCRIPTION:", 1)[1]  # the header names the group
    for marker in ("``", ":func:", ":class:", "metav1", "setpoint"):
        assert marker not in described, (marker, shown)
    status = kubectl(kubeconfig_path, "explain", "gadgets.status.conditions.status")
    assert "Whether the condition holds: True, False or Unknown." in status
    spec = kubectl(kubeconfig_path, "explain", "gadgets.spec")
    assert "What the Gadget should do; see Model for the base." in spec
