"""The shipping paths (Helm, OLM bundle, one manifest) for tests: tools and comparisons.

``helm`` and ``olmcheck`` are built from Go modules by scripts/build_helm.py (cached in
~/.cache/setpoint/helm), OLM's ``olm`` operator and its CRDs by scripts/build_olm.py (cached
in ~/.cache/setpoint/olm); :func:`compare_objects` says where two renderings of the operator
(``helm template`` and ``kubectl kustomize``) disagree on the objects both render.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "build_olm",
    "build_tool",
    "comparable",
    "compare_objects",
    "install_plan_rbac",
    "object_key",
]

ROOT = Path(__file__).resolve().parents[2]


def build_tool(tool: str) -> Path:
    """``helm`` or ``olmcheck``, built on first use; no Go fails the test (never skips)."""
    if shutil.which("go") is None:
        pytest.fail("Go is not installed: helm and olmcheck are built from Go modules")
    built = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_helm.py"), "--tool", tool],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(built.stdout.strip().splitlines()[-1])


def build_olm() -> tuple[Path, Path]:
    """OLM's ``olm`` operator and the directory of OLM's CRDs, built on first use; no Go
    fails the test (never skips)."""
    if shutil.which("go") is None:
        pytest.fail("Go is not installed: OLM is built from Go modules")
    built = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_olm.py")],
        check=True,
        capture_output=True,
        text=True,
    )
    olm, crds = built.stdout.strip().splitlines()[-2:]
    return Path(olm), Path(crds)


def install_plan_rbac(csv: Mapping[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The ServiceAccounts and RBAC an OLM InstallPlan creates for ``csv`` in ``namespace``.

    olm-operator installs a CSV's Deployment only once its ServiceAccounts exist with the
    permissions the CSV asks for; OLM's catalog operator creates them (as InstallPlan
    steps) before. Without a catalog the installer creates them: one ClusterRole and
    ClusterRoleBinding per ``clusterPermissions`` entry, one Role and RoleBinding per
    ``permissions`` entry, named ``<csv>-<account>[-cluster]``. Every object carries OLM's
    owner labels (``olm.owner*``), by which olm-operator deletes the cluster-scoped ones with
    the CSV; the namespaced ones get an owner reference once the CSV exists.
    """
    name = csv["metadata"]["name"]
    spec = csv["spec"]["install"]["spec"]
    labels = {
        "olm.owner": name,
        "olm.owner.namespace": namespace,
        "olm.owner.kind": "ClusterServiceVersion",
    }
    rbac = "rbac.authorization.k8s.io/v1"
    cluster = [(p, True) for p in spec.get("clusterPermissions", ())]
    local = [(p, False) for p in spec.get("permissions", ())]
    accounts = sorted({p["serviceAccountName"] for p, _ in cluster + local})
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": namespace, "labels": labels},
        }
        for account in accounts
    ]
    for permission, cluster_wide in cluster + local:
        account = permission["serviceAccountName"]
        role = f"{name}-{account}" + ("-cluster" if cluster_wide else "")
        kind = "ClusterRole" if cluster_wide else "Role"
        meta: dict[str, Any] = {"name": role, "labels": labels}
        if not cluster_wide:
            meta["namespace"] = namespace
        out.append(
            {"apiVersion": rbac, "kind": kind, "metadata": meta, "rules": permission["rules"]}
        )
        out.append(
            {
                "apiVersion": rbac,
                "kind": f"{kind}Binding",
                "metadata": dict(meta),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            }
        )
    return out


def object_key(document: Mapping[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) of an object."""
    meta = document.get("metadata", {})
    return document.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


def _prune(value: Any) -> Any:
    """Drop empty lists, maps and nulls (``volumes: []`` and no ``volumes`` are one Pod);
    sort container ports by name (a list merged by key: its order means nothing, and
    kustomize's strategic merge puts a patch's port first)."""
    if isinstance(value, dict):
        pruned = {k: _prune(v) for k, v in value.items()}
        if isinstance(pruned.get("ports"), list) and "containerPort" in str(pruned["ports"]):
            pruned["ports"] = sorted(pruned["ports"], key=lambda p: str(p.get("name")))
        return {k: v for k, v in pruned.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def comparable(document: Mapping[str, Any]) -> dict[str, Any]:
    """The object without what each tool adds of its own: labels and annotations on the
    object itself (Helm's managed-by, kustomize's part-of), empty fields."""
    out = dict(document)
    meta = {k: v for k, v in out.get("metadata", {}).items() if k not in ("labels", "annotations")}
    out["metadata"] = meta
    pruned: dict[str, Any] = _prune(out)
    return pruned


def compare_objects(
    left: Iterable[Mapping[str, Any]], right: Iterable[Mapping[str, Any]]
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(keys both render, differences): each difference names the object and the field."""
    by_key_left = {object_key(d): comparable(d) for d in left}
    by_key_right = {object_key(d): comparable(d) for d in right}
    shared = sorted(set(by_key_left) & set(by_key_right))
    differences: list[str] = []
    for key in shared:
        differences.extend(_diff(by_key_left[key], by_key_right[key], "/".join(key)))
    return shared, differences


def _diff(left: Any, right: Any, where: str) -> list[str]:
    if isinstance(left, dict) and isinstance(right, dict):
        out = []
        for name in sorted(set(left) | set(right)):
            if name not in left or name not in right:
                out.append(f"{where}.{name}: only in {'right' if name not in left else 'left'}")
            else:
                out.extend(_diff(left[name], right[name], f"{where}.{name}"))
        return out
    if left != right:
        return [f"{where}: {left!r} != {right!r}"]
    return []
