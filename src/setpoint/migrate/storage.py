"""Storage-version migration: rewrite stored objects at the storage version, forget old ones.

A CRD lists in ``status.storedVersions`` every version objects may still be
stored at in etcd. A version can leave ``spec.versions`` only once no object
is stored at it, and the API server refuses a CRD that drops a version still
listed there. :func:`migrate_storage` does the two steps that make a version
removable (``setpoint crd migrate-storage KIND``).

Expected Flow:
    1. Read the CRD; note its ``generation`` and ``resourceVersion`` (the guard).
       Nothing to do when ``storedVersions`` is already the storage version alone.
    2. Move every object to the storage version, by one of two methods:

       * ``in-tree`` (where the cluster serves ``storagemigration.k8s.io/v1``,
         KEP-4192, GA in Kubernetes 1.37 and run by kube-controller-manager's
         ``storage-version-migrator-controller``): create a
         StorageVersionMigration for the resource and follow its conditions
         (its Running message carries the count of objects left);
       * ``writes`` (anywhere else, or when the in-tree migration fails): list
         the objects page by page at the storage version and send each a no-op
         merge patch carrying its resourceVersion. The server re-encodes the
         object at the storage version; a conflict means someone else wrote it
         (so it is re-encoded already), a 404 that it is gone. Writes are
         rate-limited (``qps``) and each finished page is checkpointed under
         ``~/.cache/setpoint/storage-migrations/``, so an interrupted run
         resumes after the last object it finished.

    3. Re-read the CRD. If its generation changed (someone edited its spec,
       maybe the storage version) or, for ``writes``, its resourceVersion
       changed, stop with :class:`StorageMigrationError`: run it again. Else set
       ``status.storedVersions`` to the storage version alone, with that
       resourceVersion as precondition, so a change in between makes the
       write fail rather than forget a version still in use. (The in-tree
       controller cleans ``storedVersions`` itself under the same kind of
       guard; setpoint checks the result and finishes the job if it did not.)

Guarantees:
    - ``storedVersions`` is only ever narrowed after every object listed at the
      start was rewritten (or found rewritten by someone else, or deleted),
      and only if the CRD is unchanged since the migration started.
    - Objects' content is never changed: the write is an empty patch.
    - A resumed run never redoes finished pages of the same CRD (same uid and
      storage version); a checkpoint of another CRD or version is ignored.

Caveats:
    - Objects created during the migration are written at the storage version
      already, so they need no rewrite.
    - The in-tree migrator starts only once the garbage collector watches the
      resource (it rescans every 30 s), and retries with a doubling backoff
      until then; for a CRD created moments ago it starts after about 3, 5, 10,
      20, 41 or 82 s (measured on the local plane, v1.37.2; docs/guide/crd-tools.md).
    - ``writes`` needs ``list`` and ``patch`` on the resource and ``update`` on
      ``customresourcedefinitions/status``.

Errors:
    - :class:`StorageMigrationError`: the CRD is unknown, changed meanwhile, or
      the in-tree migration and the fallback both failed; the message says
      what to do.
    - Client errors of the writes (other than conflict and not-found) propagate
      after the checkpoint is saved, so a rerun resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from setpoint.api import kinds
from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject
from setpoint.client import Client
from setpoint.client.errors import Conflict, NotFound, UnknownKind
from setpoint.client.patch import MergePatch

__all__ = [
    "MigrationProgress",
    "StorageMigrationError",
    "StorageMigrationOptions",
    "StorageMigrationResult",
    "find_crd",
    "migrate_storage",
]

Method = Literal["auto", "in-tree", "writes"]
log = logging.getLogger("setpoint.migrate")

_SVM = GroupVersionKind("storagemigration.k8s.io", "v1", "StorageVersionMigration")
_LEFT = re.compile(r"(\d+)/(\d+) objects not yet migrated")
_VERIFIED = re.compile(r"(\d+) objects verified migrated")


class StorageMigrationError(SetpointError, RuntimeError):
    """The storage migration cannot go on; the message names the CRD and what to do."""


@dataclass(frozen=True, kw_only=True)
class StorageMigrationOptions:
    """How :func:`migrate_storage` moves objects. Every default is documented here."""

    method: Method = "auto"
    """``auto``: the in-tree StorageVersionMigration where the cluster serves it, else
    no-op writes; ``in-tree`` or ``writes`` force one (``in-tree`` still falls back
    to writes if the migration fails)."""
    page_size: int = 500
    """Objects per list page in the ``writes`` method (and per checkpoint)."""
    qps: float = 100.0
    """At most this many writes per second in the ``writes`` method."""
    concurrency: int = 4
    """Writes in flight at once in the ``writes`` method."""
    timeout: float = 900.0
    """Seconds to wait for the in-tree migration before falling back to writes."""
    checkpoint_dir: Path | None = None
    """Where ``writes`` checkpoints go; ``None``: ``~/.cache/setpoint/storage-migrations``."""

    def __post_init__(self) -> None:
        if self.method not in ("auto", "in-tree", "writes"):
            raise ValueError(
                f"StorageMigrationOptions.method: {self.method!r} is not auto, in-tree or writes"
            )
        if self.page_size < 1 or self.concurrency < 1:
            raise ValueError("StorageMigrationOptions: page_size and concurrency must be >= 1")
        if self.qps <= 0 or self.timeout <= 0:
            raise ValueError("StorageMigrationOptions: qps and timeout must be > 0")


@dataclass(frozen=True, kw_only=True)
class MigrationProgress:
    """A progress report: ``done`` of ``total`` objects (``total`` may be unknown)."""

    crd: str
    method: Literal["in-tree", "writes"]
    done: int
    total: int | None

    def __str__(self) -> str:
        if self.total:
            share = 100 * self.done // self.total
            return (
                f"{self.crd}: {self.done}/{self.total} objects migrated ({share}%, {self.method})"
            )
        return f"{self.crd}: {self.done} objects migrated ({self.method})"


@dataclass(frozen=True, kw_only=True)
class StorageMigrationResult:
    """What :func:`migrate_storage` did."""

    crd: str
    storage_version: str
    method: Literal["in-tree", "writes", "none"]
    """How objects were moved (``none``: storedVersions was already clean)."""
    objects: int
    """Objects rewritten (or verified) by this run."""
    stored_versions_before: tuple[str, ...]
    stored_versions_after: tuple[str, ...]
    resumed: bool = False
    """A checkpoint of an interrupted run was found and continued."""
    notes: tuple[str, ...] = ()
    """What happened on the way (fallbacks, who cleaned storedVersions)."""


async def find_crd(client: Client, kind: str) -> dict[str, Any]:
    """The CRD for ``kind``: a CRD name (``widgets.demo.io``), a plural, or a kind name.

    Raises:
        StorageMigrationError: no CRD matches, or several do.

    """
    try:
        crd: dict[str, Any] = await client.get(kinds.CustomResourceDefinition, kind)
        return crd
    except NotFound:
        pass
    matches = [
        crd
        for crd in await client.list(kinds.CustomResourceDefinition)
        if kind.lower()
        in {
            str(crd["spec"]["names"].get("plural", "")).lower(),
            str(crd["spec"]["names"].get("kind", "")).lower(),
            str(crd["spec"]["names"].get("singular", "")).lower(),
        }
    ]
    if len(matches) == 1:
        return dict(matches[0])
    if not matches:
        raise StorageMigrationError(
            f"no CRD named {kind!r} or serving a kind or plural {kind!r}; "
            "pass the CRD name, e.g. widgets.demo.example.com"
        )
    names = sorted(c["metadata"]["name"] for c in matches)
    raise StorageMigrationError(f"{kind!r} matches several CRDs {names}; pass the CRD name")


def _storage_version(crd: Mapping[str, Any]) -> str:
    for version in crd["spec"]["versions"]:
        if version.get("storage"):
            return str(version["name"])
    raise StorageMigrationError(f"CRD {crd['metadata']['name']} has no storage version")


async def migrate_storage(
    client: Client,
    kind: str,
    *,
    options: StorageMigrationOptions | None = None,
    progress: Callable[[MigrationProgress], None] | None = None,
) -> StorageMigrationResult:
    """Move every stored object of ``kind`` to the storage version; clean storedVersions.

    See the module docstring for the flow, guarantees and errors.
    """
    options = options or StorageMigrationOptions()
    report = progress or (lambda _: None)
    crd = await find_crd(client, kind)
    name = str(crd["metadata"]["name"])
    storage = _storage_version(crd)
    before = tuple(crd.get("status", {}).get("storedVersions") or ())
    if before == (storage,):
        return StorageMigrationResult(
            crd=name,
            storage_version=storage,
            method="none",
            objects=0,
            stored_versions_before=before,
            stored_versions_after=before,
        )
    generation = crd["metadata"].get("generation")
    notes: list[str] = []
    method: Literal["in-tree", "writes"] = "writes"
    objects = 0
    resumed = False
    checkpoint = _Checkpoint.load(options, crd, storage)
    guard_rv = checkpoint.data.get("crdResourceVersion") or crd["metadata"]["resourceVersion"]
    use_in_tree = not checkpoint.exists and (
        options.method == "in-tree" or (options.method == "auto" and await _serves_svm(client))
    )
    if use_in_tree:
        try:
            objects = await _in_tree(client, crd, options, report)
            method = "in-tree"
        except StorageMigrationError as exc:
            notes.append(f"in-tree migration failed ({exc}); fell back to no-op writes")
            # The in-tree controller writes the CRD's StorageMigrating condition: guard
            # against changes from here on, as long as the spec is still the one we started on.
            current = await client.get(kinds.CustomResourceDefinition, name)
            if current["metadata"].get("generation") != generation:
                raise StorageMigrationError(
                    f"CRD {name} changed during the migration; run it again"
                ) from None
            guard_rv = current["metadata"]["resourceVersion"]
    if method == "writes":
        resumed = checkpoint.exists
        checkpoint.data.setdefault("crdResourceVersion", guard_rv)
        objects = await _writes(
            client, crd, storage, options=options, checkpoint=checkpoint, report=report
        )
    after = await _finish(
        client,
        name,
        storage,
        generation=generation,
        guard_rv=guard_rv,
        method=method,
        notes=notes,
    )
    checkpoint.remove()
    return StorageMigrationResult(
        crd=name,
        storage_version=storage,
        method=method,
        objects=objects,
        stored_versions_before=before,
        stored_versions_after=after,
        resumed=resumed,
        notes=tuple(notes),
    )


async def _serves_svm(client: Client) -> bool:
    try:
        await client.resource_info(_SVM)
    except UnknownKind:
        log.info(
            "the cluster does not serve %s (the in-tree storage-version migrator is served by "
            "default from Kubernetes v1.37): migrating with no-op writes instead",
            _SVM.api_version,
        )
        return False
    return True


# --------------------------------------------------------------------------- in-tree


async def _in_tree(
    client: Client,
    crd: Mapping[str, Any],
    options: StorageMigrationOptions,
    report: Callable[[MigrationProgress], None],
) -> int:
    name = str(crd["metadata"]["name"])
    spec = crd["spec"]
    migration: JsonObject = {
        "apiVersion": _SVM.api_version,
        "kind": _SVM.kind,
        "metadata": {"generateName": f"{spec['names']['plural']}-"[:58]},
        "spec": {"resource": {"group": spec["group"], "resource": spec["names"]["plural"]}},
    }
    svm = await client.create(migration)
    svm_name = svm["metadata"]["name"]
    deadline = time.monotonic() + options.timeout
    # The controller reports counts only now and then (and clears them when it is done):
    # count the objects once, so progress always has a total.
    counted = await _count(client, crd)
    report(MigrationProgress(crd=name, method="in-tree", done=0, total=counted))
    last_done = 0
    while True:
        current = await client.get(_SVM, svm_name)
        conditions = {
            c.get("type"): c for c in (current.get("status") or {}).get("conditions") or ()
        }
        running = conditions.get("Running", {})
        done, total = _counts(str(running.get("message", "")))
        if conditions.get("Succeeded", {}).get("status") == "True":
            final = total or counted
            report(MigrationProgress(crd=name, method="in-tree", done=final, total=final))
            return final
        failed = conditions.get("Failed", {})
        if failed.get("status") == "True":
            raise StorageMigrationError(
                f"StorageVersionMigration {svm_name} failed: {failed.get('message', '')}"
            )
        if done != last_done and total:
            report(MigrationProgress(crd=name, method="in-tree", done=done, total=total))
            last_done = done
        if time.monotonic() >= deadline:
            raise StorageMigrationError(
                f"StorageVersionMigration {svm_name} did not finish within {options.timeout:.0f}s "
                f"(last: {running.get('message', 'not started')})"
            )
        await asyncio.sleep(0.5)


async def _count(client: Client, crd: Mapping[str, Any]) -> int:
    """How many objects of the CRD exist (one small list request)."""
    gvk = GroupVersionKind(
        crd["spec"]["group"], _storage_version(crd), crd["spec"]["names"]["kind"]
    )
    page = await client.list_page(gvk, limit=1)
    if page.continue_token is None:
        return len(page.items)
    if page.remaining_item_count is not None:
        return len(page.items) + int(page.remaining_item_count)
    return len(await client.list(gvk))


def _counts(message: str) -> tuple[int, int | None]:
    """(done, total) from the in-tree controller's Running message."""
    left = _LEFT.search(message)
    if left:
        remaining, total = int(left.group(1)), int(left.group(2))
        return total - remaining, total
    verified = _VERIFIED.search(message)
    if verified:
        total = int(verified.group(1))
        return total, total
    return 0, None


# --------------------------------------------------------------------------- writes


class _Checkpoint:
    """Progress of a ``writes`` run: the last object finished, per CRD uid and storage version."""

    def __init__(self, path: Path, data: dict[str, Any], *, exists: bool) -> None:
        self.path = path
        self.data = data
        self.exists = exists

    @classmethod
    def load(
        cls, options: StorageMigrationOptions, crd: Mapping[str, Any], storage: str
    ) -> _Checkpoint:
        directory = options.checkpoint_dir or _cache_root() / "storage-migrations"
        path = directory / f"{crd['metadata']['name']}.json"
        identity = {"uid": crd["metadata"].get("uid"), "storageVersion": storage}
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls(path, dict(identity), exists=False)
        if not isinstance(data, dict) or any(data.get(k) != v for k, v in identity.items()):
            return cls(path, dict(identity), exists=False)
        return cls(path, data, exists=True)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _cache_root() -> Path:
    """The cache root: ``$SETPOINT_CACHE_DIR``, else ``$XDG_CACHE_HOME/setpoint`` or ~/.cache."""
    explicit = os.environ.get("SETPOINT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "setpoint"


class _RateLimiter:
    def __init__(self, qps: float) -> None:
        self.interval = 1.0 / qps
        self.next_at = time.monotonic()
        self.lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self.lock:
            now = time.monotonic()
            if self.next_at > now:
                await asyncio.sleep(self.next_at - now)
            self.next_at = max(self.next_at, now) + self.interval


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


async def _writes(
    client: Client,
    crd: Mapping[str, Any],
    storage: str,
    *,
    options: StorageMigrationOptions,
    checkpoint: _Checkpoint,
    report: Callable[[MigrationProgress], None],
) -> int:
    name = str(crd["metadata"]["name"])
    gvk = GroupVersionKind(crd["spec"]["group"], storage, crd["spec"]["names"]["kind"])
    last_key = str(checkpoint.data.get("lastKey") or "")
    done = int(checkpoint.data.get("done") or 0)
    limiter = _RateLimiter(options.qps)
    semaphore = asyncio.Semaphore(options.concurrency)
    token: str | None = None
    total: int | None = None

    async def rewrite(obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        async with semaphore:
            await limiter.wait()
            # Conflict: written by someone else since (so re-encoded); NotFound: deleted.
            with contextlib.suppress(Conflict, NotFound):
                await client.patch(
                    gvk,
                    meta["name"],
                    MergePatch({"metadata": {"resourceVersion": meta["resourceVersion"]}}),
                    namespace=meta.get("namespace"),
                )

    while True:
        page = await client.list_page(gvk, limit=options.page_size, continue_token=token)
        if total is None and page.remaining_item_count is not None:
            total = done + len(page.items) + int(page.remaining_item_count)
        todo = [o for o in page.items if not last_key or _key(o) > last_key]
        await asyncio.gather(*(rewrite(o) for o in todo))
        if page.items:
            done += len(todo)
            last_key = max(last_key, _key(page.items[-1]))
            checkpoint.data.update(lastKey=last_key, done=done)
            checkpoint.save()
        token = page.continue_token
        if total is None and not token:
            total = done  # the last page: now the total is known
        report(MigrationProgress(crd=name, method="writes", done=done, total=total or None))
        if not token:
            return done


# --------------------------------------------------------------------------- storedVersions


async def _finish(
    client: Client,
    name: str,
    storage: str,
    *,
    generation: Any,
    guard_rv: str,
    method: str,
    notes: list[str],
) -> tuple[str, ...]:
    """Narrow storedVersions to the storage version, guarded (see the module docstring).

    After an in-tree migration, kube-controller-manager's migration runner cleans
    storedVersions itself moments after the migration succeeds, writing the CRD's
    status: a conflict with it is waited out (the generation guard still holds),
    not reported. After setpoint's own writes, any change of the CRD is an error.
    """
    deadline = time.monotonic() + _IN_TREE_CLEANUP_WAIT
    while True:
        crd = await client.get(kinds.CustomResourceDefinition, name)
        stored = tuple(crd.get("status", {}).get("storedVersions") or ())
        if crd["metadata"].get("generation") != generation or _storage_version(crd) != storage:
            raise StorageMigrationError(
                f"CRD {name} changed during the migration (generation {generation} -> "
                f"{crd['metadata'].get('generation')}); storedVersions left as {list(stored)}. "
                "Run `setpoint crd migrate-storage` again"
            )
        if stored == (storage,):
            if method == "in-tree":
                notes.append("the in-tree controller set storedVersions")
            return stored
        if method == "writes" and crd["metadata"]["resourceVersion"] != guard_rv:
            raise StorageMigrationError(
                f"CRD {name} changed during the migration (resourceVersion {guard_rv} -> "
                f"{crd['metadata']['resourceVersion']}); storedVersions left as {list(stored)}. "
                "Run `setpoint crd migrate-storage` again"
            )
        in_tree_busy = method == "in-tree" and _storage_migrating(crd)
        if not in_tree_busy:
            updated = {**crd, "status": {**crd.get("status", {}), "storedVersions": [storage]}}
            try:
                written = await client.replace_status(updated)
            except Conflict:
                if method != "in-tree":
                    raise StorageMigrationError(
                        f"CRD {name} changed while storedVersions was being written; run the "
                        "migration again"
                    ) from None
            else:
                return tuple(written.get("status", {}).get("storedVersions") or ())
        if time.monotonic() >= deadline:
            raise StorageMigrationError(
                f"CRD {name}: the in-tree migration succeeded but storedVersions is still "
                f"{list(stored)}; run `setpoint crd migrate-storage` again"
            )
        await asyncio.sleep(0.2)


_IN_TREE_CLEANUP_WAIT = 30.0
"""Seconds to let kube-controller-manager finish its own storedVersions cleanup."""


def _storage_migrating(crd: Mapping[str, Any]) -> bool:
    """Whether the in-tree migration runner still marks the CRD as migrating."""
    for condition in crd.get("status", {}).get("conditions") or ():
        if condition.get("type") == "StorageMigrating":
            return bool(condition.get("status") == "True")
    return False
