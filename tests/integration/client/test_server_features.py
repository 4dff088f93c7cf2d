"""The optional-feature probe against the real server: each answer matches what the server does."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from setpoint.api.meta import JsonObject
from setpoint.client import Client
from setpoint.client.errors import UnknownKind
from setpoint.client.features import (
    STORAGE_VERSION_MIGRATION,
    VALIDATING_ADMISSION_POLICY,
    probe_server_features,
)
from setpoint.testing import run_operator
from setpoint.testing.controlplane import selected_kubernetes_version


async def test_the_probe_matches_what_the_server_accepts(k8s: Client) -> None:
    """Each feature the probe reports is usable, and each it denies is refused by the server.

    StorageVersionMigration and ValidatingAdmissionPolicy: a server-side dry-run create
    succeeds where the probe says served, and the kind is unknown where it says not.
    WatchList: a watch with sendInitialEvents delivers the initial state.
    """
    features = await probe_server_features(k8s, watch_list=True)
    assert features.git_version == selected_kubernetes_version()
    assert features.minor == int(selected_kubernetes_version().split(".")[1])
    name = f"probe-{uuid.uuid4().hex[:6]}"
    samples = {
        STORAGE_VERSION_MIGRATION: (
            features.storage_version_migration,
            {
                "apiVersion": STORAGE_VERSION_MIGRATION.api_version,
                "kind": STORAGE_VERSION_MIGRATION.kind,
                "metadata": {"name": name},
                "spec": {"resource": {"group": "", "resource": "configmaps"}},
            },
        ),
        VALIDATING_ADMISSION_POLICY: (
            features.validating_admission_policy,
            {
                "apiVersion": VALIDATING_ADMISSION_POLICY.api_version,
                "kind": VALIDATING_ADMISSION_POLICY.kind,
                "metadata": {"name": name},
                "spec": {
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["configmaps"],
                            }
                        ]
                    },
                    "validations": [{"expression": "true"}],
                },
            },
        ),
    }
    for served, body in samples.values():
        if served:
            created: JsonObject = await k8s.create(body, dry_run=True)
            assert created["metadata"]["name"] == name
        else:
            with pytest.raises(UnknownKind):
                await k8s.create(body, dry_run=True)
    assert features.watch_list is True
    missing = [
        needle
        for needle, lacking in (
            ("storagemigration.k8s.io/v1", not features.storage_version_migration),
            ("ValidatingAdmissionPolicy", not features.validating_admission_policy),
        )
        if lacking
    ]
    lines = features.degradations()
    assert len(lines) == len(missing)
    for needle, line in zip(missing, lines, strict=True):
        assert needle in line and features.git_version in line


async def test_the_manager_logs_what_the_server_lacks(
    kubeconfig_path: Path, k8s: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """A manager that connects logs one line per missing feature, and nothing when none is."""
    features = await probe_server_features(k8s)
    with caplog.at_level(logging.INFO, logger="setpoint.manager"):
        async with run_operator(lambda manager: None, kubeconfig=str(kubeconfig_path)):
            pass
    logged = [r.getMessage() for r in caplog.records if r.name == "setpoint.manager"]
    for line in features.degradations():
        assert line in logged
    assert not [m for m in logged if "does not serve" in m and m not in features.degradations()]
