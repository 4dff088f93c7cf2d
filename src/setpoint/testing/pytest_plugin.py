"""pytest plugin: a real control plane per session, a fresh namespace per test.

Installed through the ``pytest11`` entry point, so any project that installs
setpoint gets these fixtures:

- ``control_plane`` (session): a started :class:`~setpoint.testing.ControlPlane`,
  or, with ``SETPOINT_USE_EXISTING_CLUSTER=1``, the cluster ``$KUBECONFIG``
  points at. Started only when a test asks for it.
- ``kubeconfig_path`` (session): the admin kubeconfig of that plane.
- ``k8s`` (session): an async :class:`~setpoint.client.Client` on it.
- ``namespace`` (function): a fresh namespace, deleted after the test.

There is no skipping: if the plane cannot start, every test that needs it
errors with the reason (missing binaries, a component's log tail). A run where
the integration suite silently did nothing is worse than a red one.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - exercised only without the testing extra
    pytest_asyncio = None  # type: ignore[assignment]

from setpoint.api import kinds
from setpoint.client.client import Client
from setpoint.client.errors import NotFound
from setpoint.client.kubeconfig import load_kubeconfig
from setpoint.testing.controlplane import ControlPlane, ControlPlaneError

__all__ = ["ExistingCluster"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ExistingCluster:
    """Stands in for a :class:`ControlPlane` when tests target an existing cluster."""

    kubeconfig_path: Path
    has_controller_manager: bool = True

    def kubeconfig_for_user(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """Not available: an existing cluster's CA key is not ours to sign with."""
        raise ControlPlaneError(
            "this test needs to mint client certificates, which only the local control plane "
            "can do; run it without SETPOINT_USE_EXISTING_CLUSTER"
        )


def _use_existing() -> bool:
    return os.environ.get("SETPOINT_USE_EXISTING_CLUSTER", "").lower() in ("1", "true", "yes")


def pytest_configure(config: pytest.Config) -> None:
    """Register setpoint's markers."""
    config.addinivalue_line("markers", "integration: runs against a real Kubernetes API server")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane | ExistingCluster]:
    """A real control plane for the whole session (see the module docstring)."""
    if _use_existing():
        path = os.environ.get("KUBECONFIG")
        if not path:
            raise ControlPlaneError(
                "SETPOINT_USE_EXISTING_CLUSTER=1 needs KUBECONFIG to point at the cluster's "
                "kubeconfig"
            )
        yield ExistingCluster(Path(path.split(os.pathsep)[0]))
        return
    plane = ControlPlane()
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kubeconfig_path(control_plane: ControlPlane | ExistingCluster) -> Path:
    """The admin kubeconfig of the session's control plane."""
    return control_plane.kubeconfig_path


def _async_fixture(**kwargs: object) -> Callable[[F], F]:
    """``pytest_asyncio.fixture`` when available, else a fixture that explains what is missing.

    The plugin loads in every pytest run of an environment with setpoint installed,
    so a missing pytest-asyncio must not break unrelated test suites: only the
    async fixtures fail, and they say how to fix it.
    """
    if pytest_asyncio is not None:
        decorator: Callable[[F], F] = pytest_asyncio.fixture(**kwargs)  # type: ignore[call-overload]
        return decorator

    def missing(func: Any) -> Any:
        scope: Any = kwargs.get("scope", "function")

        @pytest.fixture(name=func.__name__, scope=scope)
        def fixture() -> None:
            raise RuntimeError(
                f"the {func.__name__!r} fixture needs pytest-asyncio: "
                "pip install 'setpoint[testing]'"
            )

        return fixture

    return missing


@_async_fixture(scope="session", loop_scope="session")
async def k8s(kubeconfig_path: Path) -> AsyncIterator[Client]:
    """An async client with admin rights on the session's control plane."""
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    try:
        yield client
    finally:
        await client.close()


@_async_fixture(loop_scope="session")
async def namespace(k8s: Client, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh namespace for one test, named after it; deleted (not awaited) afterwards."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"setpoint.dev/test": "true"}},
        }
    )
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.Namespace, name)
