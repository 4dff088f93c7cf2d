"""The complete example in docs/guide/controllers.md runs and does what the guide says."""

from __future__ import annotations

import base64
import re
import types
from pathlib import Path
from typing import Any

from setpoint.api import kinds
from setpoint.client import Client, NotFound
from setpoint.client.patch import MergePatch
from setpoint.testing import eventually

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guide" / "controllers.md"


def load_example() -> types.ModuleType:
    """Execute the guide's first Python block as a module (``__main__`` guard not taken)."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    assert blocks, f"no python block in {GUIDE}"
    module = types.ModuleType("controllers_guide_example")
    exec(compile(blocks[0], str(GUIDE), "exec"), module.__dict__)
    return module


async def test_the_guide_example_replicates_labelled_configmaps(
    k8s: Client, namespace: str
) -> None:
    """The replicator from the controllers guide keeps a Secret copy of labelled ConfigMaps.

    The guide's code block is executed as written; its ``start_replicator`` runs against the
    test namespace. A labelled ConfigMap gets a controlled Secret with the same data, a
    change to the ConfigMap reaches the Secret, and an unlabelled ConfigMap is left alone.
    """
    example = load_example()
    cache, controller = await example.start_replicator(k8s, namespace)
    try:
        await k8s.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "settings",
                    "namespace": namespace,
                    "labels": {"example.com/replicate": "true"},
                },
                "data": {"mode": "fast"},
            }
        )
        await k8s.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "private", "namespace": namespace},
                "data": {"mode": "slow"},
            }
        )

        async def replica_data() -> dict[str, Any] | None:
            secret = await k8s.get(kinds.Secret, "settings-replica", namespace=namespace)
            refs = secret["metadata"]["ownerReferences"]
            assert refs[0]["kind"] == "ConfigMap" and refs[0]["controller"] is True
            return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}

        assert await eventually(replica_data, timeout=60) == {"mode": "fast"}
        patch = MergePatch({"data": {"mode": "faster"}})
        await k8s.patch(kinds.ConfigMap, "settings", patch, namespace=namespace)

        async def updated() -> bool:
            return await replica_data() == {"mode": "faster"}

        await eventually(updated, timeout=60, description="the change reached the replica")
        try:
            await k8s.get(kinds.Secret, "private-replica", namespace=namespace)
        except NotFound:
            pass
        else:
            raise AssertionError("an unlabelled ConfigMap was replicated")
        assert controller.failure() is None
    finally:
        await controller.stop(10)
        await cache.stop(5)
