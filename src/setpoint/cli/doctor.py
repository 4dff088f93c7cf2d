"""``setpoint doctor``: diagnose a cluster's setpoint operators from the outside.

``setpoint doctor finalizers`` lists objects stuck in deletion: their ``deletionTimestamp``
is older than ``--older-than`` (5 minutes by default) and finalizers still hold them. For
each finalizer it shows how long the object has waited, the last cleanup error the
controller recorded on the object (the ``cleanup.setpoint.dev/...`` annotation, see
:mod:`setpoint.controller.finalizers`), and whether the controller that owns the finalizer
is running: a setpoint manager with leader election writes the finalizers its controllers
handle on its Lease (``setpoint.dev/finalizers``), and a Lease renewed within its
``leaseDurationSeconds`` means its holder is alive. So one command tells "the cleanup keeps
failing with X" from "nobody is running the cleanup".

Which kinds it scans: every resource discovery lists (the RESTMapper), in the version the
server prefers, each with one paginated *metadata-only* list (``PartialObjectMetadataList``:
names, timestamps, finalizers and annotations, no spec or status). There is no server-side
filter on ``deletionTimestamp``, so the cost is one LIST per resource type and the metadata
of every object: trivial on a local control plane, seconds and tens of megabytes on a large
cluster. ``--kind`` (repeatable) and ``-n`` narrow the scan.

Exit status: 0 when the scan ran (stuck objects or not), 1 on an error (unreachable server,
unknown ``--kind``, bad duration).

``setpoint doctor webhooks`` is in :mod:`setpoint.cli.doctor_webhooks`, ``setpoint doctor
leader-election`` in :mod:`setpoint.cli.doctor_leases`, ``setpoint doctor crds`` in
:mod:`setpoint.cli.doctor_crds`, ``setpoint doctor shards`` in :mod:`setpoint.cli.doctor_shards`,
``setpoint doctor paused`` in :mod:`setpoint.cli.doctor_paused` (it reads the same listing
as this check), ``setpoint doctor rollout`` in :mod:`setpoint.cli.doctor_rollout` (the
same listing).
A bare ``setpoint doctor`` runs every check and prints one line per check, then each problem
found (:func:`run_all`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import orjson

from setpoint.api import kinds
from setpoint.api.errors import SetpointError
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import finalizers_of, metadata_of
from setpoint.api.metadata import METADATA_LIST_ACCEPT
from setpoint.client.client import Client, check_continue_token
from setpoint.client.errors import ApiError, ClientError, Expired, MethodNotAllowed, NotFound
from setpoint.client.kubeconfig import load_kubeconfig
from setpoint.controller.finalizers import (
    ADVERTISES_FINALIZERS_LABEL,
    CleanupRecord,
    parse_owned_finalizers,
    read_cleanup_records,
)

__all__ = [
    "CHECK_MODULES",
    "CheckSummary",
    "FinalizerReport",
    "ObjectListing",
    "OwnerStatus",
    "StuckFinalizer",
    "StuckObject",
    "add_check",
    "add_connection_options",
    "add_output_option",
    "add_scope_options",
    "connect",
    "diagnose",
    "epoch_seconds",
    "format_duration",
    "list_objects",
    "main",
    "owner_status",
    "parse_duration",
    "print_report",
    "problem_lines",
    "register",
    "render_summary",
    "render_table",
    "run_all",
    "run_check",
    "scan",
    "table_lines",
]

_PAGE = 500
_CONCURRENT_LISTS = 8
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> float:
    """Seconds in ``"90"``, ``"45s"``, ``"5m"``, ``"1h30m"`` or ``"2d"``.

    Raises:
        ValueError: naming the text and the accepted forms.

    """
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _DURATION.finditer(value):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(value) or not value:
            raise ValueError(
                f"duration {text!r} is not valid: use seconds (90) or units like 45s, 5m, 1h30m, 2d"
            ) from None
    if seconds < 0:
        raise ValueError(f"duration {text!r} must not be negative")
    return seconds


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--kubeconfig`` and ``--context``, which every doctor check takes."""
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default $KUBECONFIG)")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: current)")


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """Add ``-o/--output`` (``table`` or ``json``), which every doctor check takes."""
    parser.add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="output format"
    )


def add_scope_options(parser: argparse.ArgumentParser) -> None:
    """Add ``-n``, ``-A`` and ``--kind``, which narrow a check's :func:`list_objects` scan."""
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", "--namespace", default=None, help="scan only namespaced kinds in this namespace"
    )
    scope.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="scan every namespace and cluster-scoped kinds (the default)",
    )
    parser.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help="scan only this resource (plural, singular, short or kind name, optionally "
        "name.group); repeatable",
    )


def print_report(output: str, data: Any, table: Callable[[], str]) -> None:
    """Print a check's report: ``data`` as indented JSON, or the text ``table()`` renders."""
    if output == "json":
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(table())


@contextlib.asynccontextmanager
async def connect(args: argparse.Namespace) -> AsyncIterator[Client]:
    """A client for the cluster ``--kubeconfig`` and ``--context`` name, closed on exit.

    Errors:
        ConfigError: the kubeconfig or context cannot be used; the message names the
            command line's option (``--context NAME``, ``--kubeconfig``), not the Python
            API's parameter.

    """
    config = load_kubeconfig(
        args.kubeconfig,
        context=args.context,
        context_option="--context NAME",
        path_option="--kubeconfig",
    )
    client = Client(config)
    try:
        yield client
    finally:
        await client.close()


_Report = TypeVar("_Report")


def run_check(
    args: argparse.Namespace,
    scan: Callable[[Client], Awaitable[_Report]],
    to_json: Callable[[_Report], Any],
    render: Callable[[_Report], str],
) -> int:
    """Run one ``setpoint doctor`` check: connect (:func:`connect`), ``scan``, print.

    The report is printed as ``-o`` asks: ``to_json(report)`` as indented JSON, or the
    table ``render(report)`` draws. Returns 0: the check ran, whatever it found; an error
    (unreachable server, bad kubeconfig) is raised for the CLI to print as one line.
    """

    async def scan_once() -> _Report:
        async with connect(args) as client:
            return await scan(client)

    report = asyncio.run(scan_once())
    print_report(args.output, to_json(report), lambda: render(report))
    return 0


def add_check(
    checks: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    *,
    help: str,
    description: str,
    run: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """Add the check ``setpoint doctor <name>`` with the options every check takes.

    Those are ``--kubeconfig``, ``--context`` and ``-o``; ``run`` (usually a call of
    :func:`run_check`) runs it. The check's own options go on the parser returned.
    """
    parser = checks.add_parser(name, help=help, description=description)
    add_connection_options(parser)
    add_output_option(parser)
    parser.set_defaults(func=run)
    return parser


def table_lines(rows: Sequence[Sequence[str]], *, gap: int = 2) -> list[str]:
    """``rows`` (the header first) as left-aligned columns ``gap`` spaces apart.

    Each column is as wide as its longest cell; lines carry no trailing blanks.
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    spacer = " " * gap
    return [
        spacer.join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def problem_lines(problems: Sequence[str], healthy: str) -> list[str]:
    """A check's closing lines: a blank line, then every problem, or ``healthy``."""
    if not problems:
        return ["", healthy]
    return ["", f"{len(problems)} problem(s):", *(f"- {p}" for p in problems)]


def format_duration(seconds: float) -> str:
    """``"3d4h"``, ``"2h5m"``, ``"4m10s"`` or ``"12s"``: two units at most, as kubectl does."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def epoch_seconds(value: object) -> float | None:
    """An API timestamp (RFC 3339, ``renewTime``) in epoch seconds; ``None`` if unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


# -- the model ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class OwnerStatus:
    """Whether the controller handling one finalizer is running, as its Lease says."""

    state: str
    """``running`` (a Lease advertising the finalizer is fresh), ``stopped`` (advertised
    only by expired or released Leases) or ``unknown`` (no Lease advertises it)."""
    detail: str
    """One sentence for humans: which Lease, who holds it, how fresh, or why unknown."""
    controller: str | None = None
    """The controller's name, from the Lease."""
    lease: str | None = None
    """``namespace/name`` of the Lease."""
    holder: str | None = None
    """The Lease's ``holderIdentity``."""
    renewed_seconds_ago: float | None = None
    """Seconds since ``renewTime`` (by this machine's clock)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (camelCase keys)."""
        return {
            "state": self.state,
            "detail": self.detail,
            "controller": self.controller,
            "lease": self.lease,
            "holder": self.holder,
            "renewedSecondsAgo": (
                round(self.renewed_seconds_ago, 3) if self.renewed_seconds_ago is not None else None
            ),
        }


@dataclass(frozen=True, kw_only=True)
class StuckFinalizer:
    """One finalizer holding a stuck object."""

    name: str
    """The finalizer."""
    last_error: CleanupRecord | None
    """The last cleanup failure recorded on the object for it, if any."""
    owner: OwnerStatus
    """Whether its controller runs."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        error = self.last_error
        return {
            "name": self.name,
            "lastError": (
                {
                    "error": error.error,
                    "reason": error.reason,
                    "controller": error.controller,
                    "failures": error.failures,
                    "firstFailure": error.first_failure,
                    "lastFailure": error.last_failure,
                }
                if error is not None
                else None
            ),
            "owner": self.owner.to_json(),
        }


@dataclass(frozen=True, kw_only=True)
class StuckObject:
    """An object whose deletion waits on finalizers for longer than the threshold."""

    api_version: str
    """Its apiVersion."""
    kind: str
    """Its kind."""
    namespace: str
    """Its namespace (empty when cluster-scoped)."""
    name: str
    """Its name."""
    uid: str
    """Its UID."""
    deletion_timestamp: str
    """When deletion was requested (RFC 3339)."""
    waiting_seconds: float
    """Seconds since then, by this machine's clock."""
    finalizers: tuple[StuckFinalizer, ...]
    """The finalizers still on it, in the object's order."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "deletionTimestamp": self.deletion_timestamp,
            "waitingSeconds": round(self.waiting_seconds, 3),
            "finalizers": [f.to_json() for f in self.finalizers],
        }


@dataclass(kw_only=True)
class FinalizerReport:
    """What ``setpoint doctor finalizers`` found."""

    older_than: float
    """The threshold, in seconds."""
    namespace: str | None
    """The namespace scanned, or ``None`` for all."""
    stuck: list[StuckObject] = field(default_factory=list)
    """Objects stuck in deletion, the longest-waiting first."""
    resources_scanned: int = 0
    """Resource types listed."""
    objects_scanned: int = 0
    """Objects seen in those lists."""
    not_listable: int = 0
    """Resource types that do not support list (``tokenreviews``, ``bindings``, ...)."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(resource, why)`` for resources that support list but failed (``Forbidden``, ...)."""
    leases_note: str | None = None
    """Why Lease information is missing, when it is."""
    seconds: float = 0.0
    """How long the scan took."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form printed by ``-o json``."""
        return {
            "olderThanSeconds": self.older_than,
            "namespace": self.namespace,
            "stuck": [s.to_json() for s in self.stuck],
            "resourcesScanned": self.resources_scanned,
            "objectsScanned": self.objects_scanned,
            "notListable": self.not_listable,
            "skipped": [{"resource": r, "reason": why} for r, why in self.skipped],
            "leasesNote": self.leases_note,
            "seconds": round(self.seconds, 3),
        }


# -- pure diagnosis ---------------------------------------------------------------------------


_NO_LEASE = (
    "no Lease advertises this finalizer: its controller runs without leader election (then "
    "there is no Lease to read), is not a setpoint controller, or has not run on this cluster"
)


def _builtin(finalizer: str) -> bool:
    return "/" not in finalizer or finalizer.split("/", 1)[0].endswith("kubernetes.io")


def owner_status(
    finalizer: str,
    leases: Iterable[Mapping[str, Any]],
    now: float,
    *,
    namespace: str = "",
) -> OwnerStatus:
    """Whether a controller handling ``finalizer`` runs, judged from the managers' Leases.

    A Lease whose ``setpoint.dev/finalizers`` annotation names the finalizer is *fresh* when
    it has a holder and ``renewTime + leaseDurationSeconds`` is not in the past (by this
    machine's clock: a skew between it and the operator's shifts the verdict by that much).
    When several Leases name it (one operator deployed per namespace, say), those in the
    stuck object's ``namespace`` are considered first.
    """
    stale: OwnerStatus | None = None
    ordered = sorted(leases, key=lambda lease: metadata_of(lease).get("namespace") != namespace)
    for lease in ordered:
        owned = parse_owned_finalizers(lease)
        if owned is None or finalizer not in owned:
            continue
        raw_spec = lease.get("spec")
        spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
        where = f"{metadata_of(lease).get('namespace', '')}/{metadata_of(lease).get('name', '')}"
        holder = str(spec.get("holderIdentity") or "")
        duration = spec.get("leaseDurationSeconds")
        duration = duration if isinstance(duration, int | float) else 0
        renewed = epoch_seconds(spec.get("renewTime"))
        ago = now - renewed if renewed is not None else None
        controller = owned[finalizer]
        if holder and ago is not None and ago <= duration:
            return OwnerStatus(
                state="running",
                detail=(
                    f"controller {controller!r} is running: Lease {where} held by {holder}, "
                    f"renewed {format_duration(ago)} ago"
                ),
                controller=controller,
                lease=where,
                holder=holder,
                renewed_seconds_ago=ago,
            )
        if not holder:
            why = "was released (its holder shut down cleanly)"
        elif ago is None:
            why = "has never been renewed"
        else:
            why = (
                f"expired {format_duration(ago - duration)} ago (last renewed by {holder} "
                f"{format_duration(ago)} ago)"
            )
        stale = OwnerStatus(
            state="stopped",
            detail=f"controller {controller!r} is not running: Lease {where} {why}",
            controller=controller,
            lease=where,
            holder=holder or None,
            renewed_seconds_ago=ago,
        )
    if stale is not None:
        return stale
    detail = _NO_LEASE
    if _builtin(finalizer):
        detail = "a Kubernetes finalizer, handled by the API server or kube-controller-manager"
    return OwnerStatus(state="unknown", detail=detail)


def diagnose(
    objects: Iterable[Mapping[str, Any]],
    leases: Sequence[Mapping[str, Any]],
    *,
    now: float,
    older_than: float,
) -> list[StuckObject]:
    """The stuck objects among ``objects`` (JSON or metadata-only), longest-waiting first.

    An object is stuck when it has a ``deletionTimestamp`` at least ``older_than`` seconds
    old and still lists finalizers.
    """
    stuck: list[StuckObject] = []
    for obj in objects:
        data = metadata_of(obj)
        since = epoch_seconds(data.get("deletionTimestamp"))
        names = finalizers_of(obj)
        if since is None or not names or now - since < older_than:
            continue
        records = read_cleanup_records(obj)
        stuck.append(
            StuckObject(
                api_version=str(obj.get("apiVersion") or ""),
                kind=str(obj.get("kind") or ""),
                namespace=str(data.get("namespace") or ""),
                name=str(data.get("name") or ""),
                uid=str(data.get("uid") or ""),
                deletion_timestamp=str(data.get("deletionTimestamp")),
                waiting_seconds=now - since,
                finalizers=tuple(
                    StuckFinalizer(
                        name=name,
                        last_error=records.get(name),
                        owner=owner_status(
                            name, leases, now, namespace=str(data.get("namespace") or "")
                        ),
                    )
                    for name in names
                ),
            )
        )
    stuck.sort(key=lambda s: (-s.waiting_seconds, s.kind, s.namespace, s.name))
    return stuck


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(report: FinalizerReport) -> str:
    """The human-readable report: one row per stuck object and finalizer, then notes."""
    scope = f"namespace {report.namespace}" if report.namespace else "all namespaces"
    lines: list[str] = []
    if not report.stuck:
        lines.append(
            f"No objects stuck in deletion for more than {format_duration(report.older_than)} "
            f"({scope})."
        )
    else:
        header = ("KIND", "NAMESPACE", "NAME", "FINALIZER", "WAITING", "OWNER", "LAST ERROR")
        rows: list[tuple[str, ...]] = []
        for obj in report.stuck:
            group = obj.api_version.rpartition("/")[0]
            kind = f"{obj.kind}.{group}" if group else obj.kind
            for fin in obj.finalizers:
                error = fin.last_error
                last = (
                    f"{error.error} ({error.failures}x, last {error.last_failure})"
                    if error is not None
                    else "-"
                )
                rows.append(
                    (
                        kind,
                        obj.namespace or "-",
                        obj.name,
                        fin.name,
                        format_duration(obj.waiting_seconds),
                        fin.owner.state,
                        _truncate(last, 100),
                    )
                )
        lines.extend(table_lines([header, *rows], gap=3))
        lines.append("")
        lines.append("Owners:")
        seen: set[str] = set()
        for obj in report.stuck:
            for fin in obj.finalizers:
                if fin.name not in seen:
                    seen.add(fin.name)
                    lines.append(f"  {fin.name}: {fin.owner.state}: {fin.owner.detail}")
    lines.append("")
    lines.append(
        f"Scanned {report.objects_scanned} objects of {report.resources_scanned} resource types "
        f"in {report.seconds:.1f}s ({scope}; metadata-only lists; narrow with --kind / -n; "
        f"{report.not_listable} types do not support list)."
    )
    if report.leases_note:
        lines.append(f"Leases: {report.leases_note}")
    if report.skipped:
        lines.append(f"Skipped {len(report.skipped)} resource types that could not be listed:")
        lines.extend(f"  {resource}: {why}" for resource, why in report.skipped)
    return "\n".join(lines)


# -- I/O ----------------------------------------------------------------------------------------


def _collection_path(info: ResourceInfo, namespace: str | None) -> str:
    gvk = info.gvk
    base = f"/api/{gvk.version}" if not gvk.group else f"/apis/{gvk.group}/{gvk.version}"
    if info.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{info.plural}"


def _resource_name(info: ResourceInfo) -> str:
    group = info.gvk.group
    return (
        f"{info.plural}.{info.gvk.version}.{group}"
        if group
        else f"{info.plural}.{info.gvk.version}"
    )


async def _list_metadata(
    client: Client, info: ResourceInfo, namespace: str | None
) -> list[dict[str, Any]]:
    """Every object of ``info`` as metadata only, following ``continue`` tokens."""
    path = _collection_path(info, namespace)
    items: list[dict[str, Any]] = []
    token: str | None = None
    seen_tokens: set[str] = set()
    while True:
        params = {"limit": str(_PAGE)}
        if token:
            params["continue"] = token
        try:
            response = await client.transport.request(
                "GET", path, params=params, accept=METADATA_LIST_ACCEPT
            )
        except Expired:
            if token is None:
                raise
            # The snapshot expired mid-way: start over from a fresh one, unpaginated.
            items.clear()
            token = None
            response = await client.transport.request("GET", path, accept=METADATA_LIST_ACCEPT)
        body = response.body if isinstance(response.body, dict) else {}
        for item in body.get("items") or []:
            if isinstance(item, dict):
                # Metadata-only items say PartialObjectMetadata; name the real kind.
                item["apiVersion"] = info.gvk.api_version
                item["kind"] = info.gvk.kind
                items.append(item)
        token = (body.get("metadata") or {}).get("continue") or None
        if not isinstance(token, str) or not token:
            return items
        check_continue_token(token, seen_tokens, url=f"{client.transport.server}{path}")


async def _resources(client: Client, kinds_wanted: Sequence[str]) -> list[ResourceInfo]:
    mapper = client.mapper
    if kinds_wanted:
        found: dict[Any, ResourceInfo] = {}
        for name in kinds_wanted:
            matches = await mapper.lookup(name)
            if not matches:
                raise ValueError(
                    f"--kind {name!r}: the server serves no such resource (use a plural, "
                    "singular, short or kind name, optionally as name.group, as in "
                    "'kubectl api-resources')"
                )
            for info in matches:
                preferred = await mapper.preferred_version(info.gvk.group, info.gvk.kind)
                if info.gvk.version == preferred:
                    found[info.gvk] = info
        return list(found.values())
    await mapper.refresh()
    chosen: list[ResourceInfo] = []
    for info in mapper.known():
        preferred = await mapper.preferred_version(info.gvk.group, info.gvk.kind)
        if info.gvk.version == preferred:
            chosen.append(info)
    return sorted(chosen, key=lambda i: (i.gvk.group, i.plural))


async def _leases(client: Client) -> tuple[list[dict[str, Any]], str | None]:
    try:
        found = await client.list(kinds.Lease, labels=f"{ADVERTISES_FINALIZERS_LABEL}=true")
    except ApiError as exc:
        return [], f"could not list Leases ({exc}); controller status is unknown"
    return list(found), None


@dataclass(kw_only=True)
class ObjectListing:
    """The metadata of every object of the scanned kinds (:func:`list_objects`)."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    """Every object, metadata only, with its real ``apiVersion`` and ``kind``."""
    resources_scanned: int = 0
    """Resource types listed."""
    not_listable: int = 0
    """Resource types that do not support list."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(resource, why)`` for resources that support list but failed, sorted."""


async def list_objects(
    client: Client, *, namespace: str | None = None, kinds_wanted: Sequence[str] = ()
) -> ObjectListing:
    """One metadata-only list of every resource type served (see the module doc).

    The scan of the finalizers check and the paused check (which the bare ``setpoint
    doctor`` runs over one listing). ``namespace=None`` lists every namespace and
    cluster-scoped kinds; a namespace lists only namespaced kinds, in it. ``kinds_wanted``
    restricts the scan to those resources.
    """
    listing = ObjectListing()
    resources = await _resources(client, kinds_wanted)
    if namespace:
        resources = [r for r in resources if r.namespaced]
    limit = asyncio.Semaphore(_CONCURRENT_LISTS)

    async def one(info: ResourceInfo) -> list[dict[str, Any]] | None:
        async with limit:
            try:
                return await _list_metadata(client, info, namespace)
            except (MethodNotAllowed, NotFound):
                # Create-only resources (reviews, bindings): nothing is stored to list.
                listing.not_listable += 1
                return None
            except ClientError as exc:
                reason = f"{type(exc).__name__}: {exc}"
                listing.skipped.append((_resource_name(info), _truncate(reason, 200)))
                return None

    listed = await asyncio.gather(*(one(info) for info in resources))
    for items in listed:
        if items is not None:
            listing.resources_scanned += 1
            listing.objects.extend(items)
    listing.skipped.sort()
    return listing


async def scan(
    client: Client,
    *,
    older_than: float,
    namespace: str | None = None,
    kinds_wanted: Sequence[str] = (),
    now: float | None = None,
    listing: ObjectListing | None = None,
) -> FinalizerReport:
    """List objects stuck in deletion for at least ``older_than`` seconds (see the module doc).

    ``namespace`` and ``kinds_wanted`` narrow the scan as for :func:`list_objects`;
    ``listing``, a listing made already, replaces it.
    """
    started = time.monotonic()
    report = FinalizerReport(older_than=older_than, namespace=namespace)
    leases, report.leases_note = await _leases(client)
    if listing is None:
        listing = await list_objects(client, namespace=namespace, kinds_wanted=kinds_wanted)
    report.resources_scanned = listing.resources_scanned
    report.not_listable = listing.not_listable
    report.skipped = list(listing.skipped)
    report.objects_scanned = len(listing.objects)
    current = time.time() if now is None else now
    report.stuck = diagnose(listing.objects, leases, now=current, older_than=older_than)
    report.seconds = time.monotonic() - started
    return report


# -- the command --------------------------------------------------------------------------------


def _cmd_finalizers(args: argparse.Namespace) -> int:
    return run_check(
        args,
        lambda client: scan(
            client,
            older_than=args.older_than,
            namespace=None if args.all_namespaces else args.namespace,
            kinds_wanted=args.kind or (),
        ),
        FinalizerReport.to_json,
        render_table,
    )


@dataclass(frozen=True, kw_only=True)
class CheckSummary:
    """One line of the bare ``setpoint doctor``: a check, its verdict and its problems."""

    check: str
    """The check's name (``crds``, ``leader-election``, ``finalizers``, ``paused``,
    ``webhooks``, ``shards``, ``rollout``)."""
    ok: bool | None
    """``True``: nothing found; ``False``: problems; ``None``: the check could not run."""
    summary: str
    """One line: what was looked at and what was found."""
    problems: tuple[str, ...] = ()
    """Each problem, with what to do (or why the check could not run)."""


async def run_all(client: Client, *, older_than: float = 300.0) -> list[CheckSummary]:
    """Run every doctor check against ``client``; one :class:`CheckSummary` each.

    A check that fails (no permission to list webhooks, say) is reported as not run, with
    the error, and the others still run.
    """
    from setpoint.cli.doctor_crds import scan_crds
    from setpoint.cli.doctor_leases import scan_leases
    from setpoint.cli.doctor_paused import paused_summary, scan_paused
    from setpoint.cli.doctor_rollout import rollout_summary, scan_rollout
    from setpoint.cli.doctor_shards import scan_rings
    from setpoint.cli.doctor_webhooks import scan_webhooks

    out: list[CheckSummary] = []
    listings: list[ObjectListing] = []  # one listing for the finalizers and paused checks

    async def listing() -> ObjectListing:
        if not listings:
            listings.append(await list_objects(client))
        return listings[0]

    async def crds() -> CheckSummary:
        report = await scan_crds(client)
        problems = report.problems
        return CheckSummary(
            check="crds",
            ok=not problems,
            summary=f"{len(report.crds)} CRDs, {len(problems)} problem(s)",
            problems=tuple(problems),
        )

    async def leases() -> CheckSummary:
        report = await scan_leases(client)
        problems = report.problems
        held = sum(1 for s in report.leases if s.state == "held")
        waiting = sum(len(s.waiting) for s in report.leases if s.state == "held")
        waits = f", {waiting} optional controller(s) waiting for CRDs" if waiting else ""
        return CheckSummary(
            check="leader-election",
            ok=not problems,
            summary=f"{len(report.leases)} Leases, {held} held{waits}, {len(problems)} problem(s)",
            problems=tuple(problems),
        )

    async def finalizers() -> CheckSummary:
        report = await scan(client, older_than=older_than, listing=await listing())
        problems = [
            f"{o.kind} {o.namespace + '/' if o.namespace else ''}{o.name}: waiting "
            f"{format_duration(o.waiting_seconds)} on "
            + ", ".join(f"{f.name} (controller {f.owner.state})" for f in o.finalizers)
            for o in report.stuck
        ]
        return CheckSummary(
            check="finalizers",
            ok=not problems,
            summary=(
                f"{len(report.stuck)} object(s) stuck in deletion for more than "
                f"{format_duration(older_than)} ({report.objects_scanned} objects scanned)"
            ),
            problems=tuple(problems),
        )

    async def paused() -> CheckSummary:
        return paused_summary(await scan_paused(client, listing=await listing()))

    async def rollout() -> CheckSummary:
        return rollout_summary(await scan_rollout(client, listing=await listing()))

    async def webhooks() -> CheckSummary:
        report = await scan_webhooks(client)
        problems = [
            f"{c.endpoint.webhook} ({c.endpoint.source}): {p}"
            for c in report.checks
            for p in c.problems
        ]
        return CheckSummary(
            check="webhooks",
            ok=not problems,
            summary=f"{len(report.checks)} webhook(s), {len(problems)} problem(s)",
            problems=tuple(problems + list(report.notes)),
        )

    async def shards() -> CheckSummary:
        reports = await scan_rings(client)
        problems = [p for report in reports for p in report.problems()]
        live = sum(1 for report in reports for lease in report.leases if lease.alive)
        return CheckSummary(
            check="shards",
            ok=not problems,
            summary=f"{len(reports)} ring(s), {live} live shard(s), {len(problems)} problem(s)",
            problems=tuple(problems),
        )

    for name, check in (
        ("crds", crds),
        ("leader-election", leases),
        ("finalizers", finalizers),
        ("paused", paused),
        ("rollout", rollout),
        ("webhooks", webhooks),
        ("shards", shards),
    ):
        try:
            out.append(await check())
        except ClientError as exc:
            out.append(
                CheckSummary(check=name, ok=None, summary="could not run", problems=(str(exc),))
            )
    return out


def render_summary(results: Sequence[CheckSummary], server: str) -> str:
    """The bare ``setpoint doctor`` output: one line per check, then every problem."""
    lines = [f"setpoint doctor: {len(results)} checks against {server}", ""]
    width = max(len(r.check) for r in results)
    for result in results:
        verdict = {True: "ok", False: "PROBLEM", None: "NOT RUN"}[result.ok]
        lines.append(f"  {result.check.ljust(width)}  {verdict:<8} {result.summary}")
    for result in results:
        if result.problems:
            lines.append("")
            lines.append(f"{result.check}:")
            lines.extend(f"- {p}" for p in result.problems)
    lines.append("")
    lines.append("Details of one check: setpoint doctor <check> (-o json for data).")
    return "\n".join(lines)


def _summary_json(server: str, results: Sequence[CheckSummary]) -> dict[str, Any]:
    return {
        "server": server,
        "checks": [
            {"check": r.check, "ok": r.ok, "summary": r.summary, "problems": list(r.problems)}
            for r in results
        ],
    }


def _cmd_all(args: argparse.Namespace) -> int:
    async def every_check(client: Client) -> tuple[str, list[CheckSummary]]:
        return client.config.server, await run_all(client, older_than=args.older_than)

    return run_check(
        args,
        every_check,
        lambda report: _summary_json(*report),
        lambda report: render_summary(report[1], report[0]),
    )


CHECK_MODULES: tuple[str, ...] = (
    "setpoint.cli.doctor_webhooks",
    "setpoint.cli.doctor_leases",
    "setpoint.cli.doctor_crds",
    "setpoint.cli.doctor_shards",
    "setpoint.cli.doctor_paused",
    "setpoint.cli.doctor_rollout",
)
"""The modules of the other checks; each adds its own with ``register_checks(checks)``."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``doctor`` command group: every check, or one of them by name."""
    doctor = subparsers.add_parser(
        "doctor",
        help="diagnose setpoint operators on a cluster (CRDs, leader election, stuck "
        "finalizers, paused objects, webhooks, shards); without a check, run them all",
        description=(
            "Without a CHECK: run every check and print one line each, then the problems "
            "found. With one: that check in detail."
        ),
    )
    add_connection_options(doctor)
    doctor.add_argument(
        "--older-than",
        type=parse_duration,
        default=300.0,
        metavar="DURATION",
        help="for the finalizers check: objects deleting for at least this long (default 5m)",
    )
    add_output_option(doctor)
    doctor.set_defaults(func=_cmd_all)
    checks = doctor.add_subparsers(dest="check", required=False, metavar="CHECK")
    parser = add_check(
        checks,
        "finalizers",
        help="list objects stuck in deletion, their last cleanup error and whether the "
        "controller owning the finalizer runs",
        description=(
            "List objects whose deletion waits on finalizers for longer than --older-than. "
            "Every resource type the server serves is listed once, metadata only (one LIST "
            "per type: cheap on a local control plane, heavy on a big cluster; narrow with "
            "--kind and -n)."
        ),
        run=_cmd_finalizers,
    )
    parser.add_argument(
        "--older-than",
        type=parse_duration,
        default=300.0,
        metavar="DURATION",
        help="report objects deleting for at least this long (90, 45s, 5m, 1h30m; default 5m)",
    )
    add_scope_options(parser)
    for module in CHECK_MODULES:
        importlib.import_module(module).register_checks(checks)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m setpoint.cli.doctor finalizers ...``: the doctor without the other commands."""
    parser = argparse.ArgumentParser(prog="setpoint")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(["doctor", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except (SetpointError, ValueError, OSError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
