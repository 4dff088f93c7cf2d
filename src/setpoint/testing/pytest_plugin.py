"""pytest plugin: a real control plane per session, a fresh namespace per test.

Installed through the ``pytest11`` entry point, so any project that installs
setpoint gets these fixtures:

- ``control_plane`` (session): a started :class:`~setpoint.testing.ControlPlane`,
  or, with ``SETPOINT_USE_EXISTING_CLUSTER=1``, the cluster ``$KUBECONFIG``
  points at. Started only when a test asks for it.
- ``kubeconfig_path`` (session): the admin kubeconfig of that plane.
- ``k8s`` (session): an async :class:`~setpoint.client.Client` on it.
- ``namespace`` (function): a fresh namespace, deleted after the test. Finalizers the
  test left behind (its operator stopped before its objects went) are removed first, so
  the namespace does not stay ``Terminating``; the end of the run lists them. An operator
  ``run_operator`` starts in such a test watches only this namespace.

And one option: ``--setpoint-blocked-loop=SECONDS`` (or ``setpoint_blocked_loop = SECONDS``
in the ini options) fails every async test during which the event loop blocked for longer
than ``SECONDS``: an ``async def`` that calls something blocking (``time.sleep``, a
synchronous SDK), caught by :class:`~setpoint.observability.runtime.BlockedLoopDetector`,
whose report (the reconcile and the blocking stack) becomes the failure. It watches the
loop of the test's fixtures (``asyncio_default_fixture_loop_scope``); a test on a loop of
another scope is not watched.

And ``--setpoint-nodes=N`` (or ``setpoint_nodes = N`` in the ini options): the session's
plane gets N worker nodes (``ControlPlaneOptions(nodes=N)``, real kubelets running real
containers, :mod:`setpoint.testing.nodes`; as root, one such plane per host), for end-to-end
tests that deploy the operator's image (a scaffolded project's ``make test-e2e``).
``control_plane.nodes.load_image(ARCHIVE)`` loads an image into every node. When the session
ends, the plane stops and a node that left something on the host (a process, mount,
namespace, cgroup) fails the session's teardown. The option has no effect with
``SETPOINT_USE_EXISTING_CLUSTER=1``: that cluster brings its own nodes.

There is no skipping: if the plane cannot start, every test that needs it
errors with the reason (missing binaries, a component's log tail). A run where
the integration suite silently did nothing is worse than a red one.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
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

from setpoint._extras import ExtraNotInstalled
from setpoint.api import kinds
from setpoint.api.kinds import ResourceInfo
from setpoint.client.client import Client
from setpoint.client.errors import ClientError, NotFound
from setpoint.client.kubeconfig import load_kubeconfig
from setpoint.client.patch import MergePatch
from setpoint.observability.logging import FIELDS_ATTR
from setpoint.observability.runtime import BlockedLoopDetector
from setpoint.testing._test_scope import current_test_namespace, set_test_namespace
from setpoint.testing.controlplane import ControlPlane, ControlPlaneError, ControlPlaneOptions
from setpoint.testing.nodes import MAX_NODES

__all__ = [
    "ExistingCluster",
    "FieldsFormatter",
    "check_node_leftovers",
    "node_count",
    "release_finalizers",
]

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
    """Register setpoint's markers; refuse a ``--setpoint-nodes`` that is not 0 to 9."""
    config.addinivalue_line("markers", "integration: runs against a real Kubernetes API server")
    node_count(config)


def node_count(config: pytest.Config) -> int:
    """The nodes the session's plane gets: ``--setpoint-nodes`` (wins), else the ini, else 0.

    Raises:
        pytest.UsageError: not a whole number from 0 to :data:`~setpoint.testing.nodes.MAX_NODES`
            (pytest then exits with its usage error, before collecting anything).

    """
    raw = config.getoption("setpoint_nodes", None) or config.getini("setpoint_nodes")
    text = str(raw).strip() if raw is not None else ""
    if not text:
        return 0
    try:
        count = int(text)
    except ValueError:
        count = -1
    if not 0 <= count <= MAX_NODES:
        raise pytest.UsageError(
            f"--setpoint-nodes={text!r}: give a number of worker nodes from 0 to {MAX_NODES}"
        )
    return count


_BLOCKED_LOOP_FIXTURE = "_setpoint_blocked_loop"
_WATCHED = pytest.StashKey["BlockedLoopDetector"]()
_STALLS_FAILED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--setpoint-blocked-loop=SECONDS`` and ``--setpoint-nodes=N``, and their ini twins."""
    help = (
        "fail an async test during which the event loop was blocked for more than SECONDS "
        "(a blocking call in async code); the failure names the blocking stack. 0: off"
    )
    group = parser.getgroup("setpoint")
    group.addoption(
        "--setpoint-blocked-loop", dest="setpoint_blocked_loop", metavar="SECONDS", help=help
    )
    parser.addini("setpoint_blocked_loop", help, default="")
    nodes_help = (
        f"start the session's control plane with N worker nodes (0 to {MAX_NODES}; real "
        "kubelets running containers, as root; `setpoint controlplane build --nodes` builds "
        "them). Default 0: no nodes"
    )
    group.addoption("--setpoint-nodes", dest="setpoint_nodes", metavar="N", help=nodes_help)
    parser.addini("setpoint_nodes", nodes_help, default="")


def _blocked_loop_threshold(config: pytest.Config) -> float | None:
    """The option's seconds (the command line wins over the ini), or ``None`` when off."""
    raw = config.getoption("setpoint_blocked_loop", None) or config.getini("setpoint_blocked_loop")
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise pytest.UsageError(
            f"--setpoint-blocked-loop={raw!r}: give a number of seconds (0.1), or 0 for off"
        ) from None
    if not seconds >= 0 or math.isinf(seconds):
        raise pytest.UsageError(f"--setpoint-blocked-loop={raw!r}: seconds must be finite, >= 0")
    return seconds or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--setpoint-blocked-loop``, watch the event loop of every async test."""
    if _blocked_loop_threshold(config) is None:
        return
    for item in items:
        function = getattr(item, "obj", None)
        names = getattr(item, "fixturenames", None)
        if (
            inspect.iscoroutinefunction(function)
            and isinstance(names, list)
            and _BLOCKED_LOOP_FIXTURE not in names
        ):
            names.insert(0, _BLOCKED_LOOP_FIXTURE)  # first up, last down: covers the others


class FieldsFormatter(logging.Formatter):
    """Wraps pytest's log formatter so setpoint's key/value fields show in test reports.

    setpoint logs a short message plus fields (``List/watch failed; retrying`` with
    ``error=...``, ``kind=...``); pytest's formatters print only the message, which hides
    the reason. This appends ``[key=value ...]`` to the first line of each record that has
    fields; records without fields are formatted exactly as before.
    """

    def __init__(self, inner: logging.Formatter) -> None:
        """Wrap ``inner``, the formatter pytest set on a handler."""
        super().__init__()
        self.inner = inner
        """The formatter pytest configured (its format, colours and indentation)."""

    def format(self, record: logging.LogRecord) -> str:
        """The text pytest would show, with the record's fields after its first line."""
        text = self.inner.format(record)
        fields = getattr(record, FIELDS_ATTR, None)
        if not fields:
            return text
        shown = " ".join(f"{key}={value!s}" for key, value in fields.items())
        first, newline, rest = text.partition("\n")
        return f"{first} [{shown}]{newline}{rest}"


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Show setpoint's log fields in failure reports, live logs and log files.

    The ``caplog`` fixture's text is left alone, so assertions on it see messages only.
    """
    plugin = session.config.pluginmanager.get_plugin("logging-plugin")
    for name in ("report_handler", "log_cli_handler", "log_file_handler"):
        handler = getattr(plugin, name, None)
        formatter = getattr(handler, "formatter", None)
        if (
            isinstance(handler, logging.Handler)
            and isinstance(formatter, logging.Formatter)
            and not isinstance(formatter, FieldsFormatter)
        ):
            handler.setFormatter(FieldsFormatter(formatter))


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane | ExistingCluster]:
    """A real control plane for the whole session (see the module docstring).

    With ``--setpoint-nodes=N``, it has N worker nodes (``plane.nodes``); stopping them
    must leave nothing on the host, or the session's teardown fails with what was left.
    """
    if _use_existing():
        path = os.environ.get("KUBECONFIG")
        if not path:
            raise ControlPlaneError(
                "SETPOINT_USE_EXISTING_CLUSTER=1 needs KUBECONFIG to point at the cluster's "
                "kubeconfig"
            )
        yield ExistingCluster(Path(path.split(os.pathsep)[0]))
        return
    plane = ControlPlane(ControlPlaneOptions(nodes=node_count(request.config)))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
        check_node_leftovers(plane)


def check_node_leftovers(plane: ControlPlane) -> None:
    """Fail when stopping ``plane``'s nodes left host state behind.

    Raises:
        ControlPlaneError: listing what is left (:attr:`ControlPlane.node_leftovers`) and how
            to remove it.

    """
    if plane.node_leftovers:
        left = "\n".join(f"  {line}" for line in plane.node_leftovers)
        raise ControlPlaneError(
            "stopping the plane's nodes left this on the host; `setpoint controlplane down "
            f"--clean` (as root) removes it:\n{left}"
        )


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
            raise ExtraNotInstalled(f"the {func.__name__!r} fixture", "testing", ["pytest-asyncio"])

        return fixture

    return missing


@_async_fixture(scope="session", loop_scope="session")
async def k8s(kubeconfig_path: Path) -> AsyncIterator[Client]:
    """An async client with admin rights on the session's control plane."""
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    try:
        yield client
    finally:
        # The namespaces' teardowns run in the background; let them finish first.
        await asyncio.gather(*_TEARDOWNS, return_exceptions=True)
        await client.close()


_TEARDOWNS: set[asyncio.Task[None]] = set()
"""Namespace teardowns still running (they overlap with the next tests)."""

RELEASED: list[str] = []
"""What namespace teardowns had to release, one line per namespace; printed at the end."""


async def _dispose(client: Client, name: str) -> None:
    """Release what the test left in namespace ``name``, then delete the namespace."""
    try:
        released = await release_finalizers(client, name)
    except ClientError as exc:
        RELEASED.append(f"{name}: could not look for leftover finalizers: {exc}")
    else:
        if released:
            RELEASED.append(f"{name}: {'; '.join(released)}")
    with contextlib.suppress(NotFound):
        await client.delete(kinds.Namespace, name)


def _namespace_name(test_name: str) -> str:
    base = "".join(c if c.isalnum() else "-" for c in test_name.lower())[:40].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Name the test's namespace before its fixtures run (``run_operator`` watches it)."""
    uses = "namespace" in getattr(item, "fixturenames", ())
    set_test_namespace(_namespace_name(item.name) if uses else None)


@_async_fixture(loop_scope="session")
async def namespace(k8s: Client, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh namespace for one test, named after it; deleted (not awaited) afterwards.

    An operator the test starts with :func:`~setpoint.testing.run_operator` watches only
    this namespace (its ``namespaces`` argument says otherwise).

    First, finalizers the test left on its objects are removed (their controller stopped
    with the test, so nothing else would, and the namespace would stay ``Terminating``);
    the end of the run lists each one (see :func:`release_finalizers`). This happens in the
    background, while the next tests run.
    """
    name = current_test_namespace() or _namespace_name(request.node.name)
    set_test_namespace(name)
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
        set_test_namespace(None)
        task = asyncio.create_task(_dispose(k8s, name), name=f"setpoint-teardown-{name}")
        _TEARDOWNS.add(task)
        task.add_done_callback(_TEARDOWNS.discard)


def _stalls_message(detector: BlockedLoopDetector, first: int = 0) -> str:
    stalls = "\n".join(f"  {stall.describe()}" for stall in detector.stalls[first:])
    return (
        f"the event loop was blocked for more than {detector.threshold:g}s during this test "
        "(--setpoint-blocked-loop): something in async code blocks (time.sleep, a "
        "synchronous SDK call); await it, or run it in a thread (a plain 'def' reconciler "
        f"runs in one)\n{stalls}"
    )


@_async_fixture()
async def _setpoint_blocked_loop(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Watch the test's event loop; fail the test if it blocked past the option's seconds.

    A stall during the test's call fails the test itself (``pytest_runtest_makereport``);
    one during its fixtures' set-up or teardown fails the teardown.
    """
    threshold = _blocked_loop_threshold(request.config)
    if threshold is None:
        yield
        return
    detector = BlockedLoopDetector(threshold=threshold)
    detector.start()
    request.node.stash[_WATCHED] = detector
    try:
        yield
    finally:
        detector.stop()
    failed = request.node.stash.get(_STALLS_FAILED, 0)
    if len(detector.stalls) > failed:
        pytest.fail(_stalls_message(detector, failed), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Turn a passing call into a failure when the event loop blocked during it."""
    outcome: Any = yield
    detector = item.stash.get(_WATCHED, None)
    if call.when != "call" or detector is None or not detector.stalls:
        return
    report = outcome.get_result()
    item.stash[_STALLS_FAILED] = len(detector.stalls)
    if report.passed:
        report.outcome = "failed"
        report.longrepr = _stalls_message(detector)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say which finalizers the namespace fixture had to remove, and why."""
    if not RELEASED:
        return
    terminalreporter.write_sep("=", "setpoint: finalizers left behind by tests were removed")
    terminalreporter.write_line(
        "These objects kept finalizers after their test ended (its operator stopped before "
        "they went), which would have kept their namespace Terminating; the namespace "
        "fixture removed them. Delete such objects inside the run_operator block to let "
        "their cleanups run."
    )
    for line in RELEASED:
        terminalreporter.write_line(f"  {line}")


def _cluster_finalizer(name: str) -> bool:
    """Finalizers Kubernetes itself removes (``orphan``, ``kubernetes.io/pvc-protection``)."""
    if "/" not in name:
        return True
    domain = name.split("/", 1)[0]
    return domain in ("kubernetes.io", "k8s.io") or domain.endswith((".kubernetes.io", ".k8s.io"))


_NOT_SCANNED = frozenset({("", "Endpoints")})
"""(group, kind) the teardown scan skips: v1 Endpoints is deprecated (the API server warns on
every request for it, Kubernetes 1.33+); the EndpointSlices that replace it are scanned."""


async def release_finalizers(client: Client, namespace: str) -> list[str]:
    """Remove every finalizer Kubernetes does not handle itself from objects in ``namespace``.

    For test teardown: once a test's operator stopped, nothing removes its finalizers, and
    the namespace could not be deleted. Every namespaced kind the server serves is listed
    (preferred versions; kinds that cannot be listed are skipped, and v1 Endpoints, deprecated,
    whose EndpointSlices are listed instead). Returns
    ``"<Kind> <name>: <finalizers>"`` for each object changed.
    """
    mapper = client.mapper
    await mapper.refresh()
    infos = []
    for info in mapper.known():
        if (info.gvk.group, info.gvk.kind) in _NOT_SCANNED:
            continue
        if info.namespaced and info.gvk.version == await mapper.preferred_version(
            info.gvk.group, info.gvk.kind
        ):
            infos.append(info)
    limit = asyncio.Semaphore(32)

    async def one(info: ResourceInfo) -> list[str]:
        async with limit:
            try:
                listed = await client.list(info.gvk, namespace=namespace)
            except ClientError:
                return []  # not listable (bindings, reviews), or gone meanwhile
        released = []
        for obj in listed.items:
            finalizers = list(obj.get("metadata", {}).get("finalizers") or ())
            kept = [f for f in finalizers if _cluster_finalizer(f)]
            if kept == finalizers:
                continue
            obj_name = obj["metadata"]["name"]
            with contextlib.suppress(NotFound):
                await client.patch(
                    info.gvk,
                    obj_name,
                    MergePatch({"metadata": {"finalizers": kept or None}}),
                    namespace=namespace,
                )
                removed = [f for f in finalizers if f not in kept]
                released.append(f"{info.gvk.kind} {obj_name}: {', '.join(removed)}")
        return released

    results = await asyncio.gather(*(one(info) for info in infos))
    return [line for lines in results for line in lines]
