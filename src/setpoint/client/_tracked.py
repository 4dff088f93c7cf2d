"""Deleting the children an owner tracks by label (see :mod:`setpoint.api.tracking`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from setpoint.api.meta import metadata_of
from setpoint.api.tracking import owner_selector
from setpoint.api.types import Kind, TypedObject, is_typed
from setpoint.client._safebase import SafeClient
from setpoint.client.errors import NotFound

__all__ = ["delete_tracked_children"]


async def delete_tracked_children(
    client: SafeClient, owner: Mapping[str, Any] | TypedObject, *kinds: Kind[object]
) -> int:
    """Delete every object of ``kinds``, in any namespace, that tracks ``owner``; return how many.

    The finalizer recipe for children the garbage collector cannot own (in another
    namespace than their owner, or cluster-scoped under a namespaced owner): they carry
    the owner's UID in a label (:func:`~setpoint.api.tracking.track_owner`), and the
    owner's cleanup calls this before its finalizer is removed::

        async def remove_copies(ctx, mirror):
            await delete_tracked_children(ctx.client, mirror, kinds.Secret)

    Expected Flow:
        1. List each kind across all namespaces with the label selector
           ``setpoint.dev/owner-uid=<owner's uid>`` (the server filters).
        2. Delete each object listed (background propagation: its own dependents go
           with it).

    Guarantees:
        - Idempotent: an object already gone (404) counts as deleted, so a cleanup that
          ran halfway, crashed and runs again finishes the job.
        - Only objects carrying this owner's UID are touched; a new owner with the same
          name has another UID.

    Caveats:
        - Deleting is asking: a child with finalizers of its own stays until they are
          removed. The owner's finalizer may go first.
        - A child created by a reconcile still in flight after the list is not seen; a
          finalizer handler runs instead of reconcile for a deleting owner, so none is.

    Errors:
        ClientError: a list or delete failed (other than 404); the cleanup is retried.

    """
    selector = owner_selector(owner.to_object() if is_typed(owner) else owner)
    deleted = 0
    for kind in kinds:
        listed = await client.list(kind, labels=selector)
        results = await asyncio.gather(*(_delete(client, kind, item) for item in listed.items))
        deleted += sum(results)
    return deleted


async def _delete(client: SafeClient, kind: Kind[object], item: Any) -> int:
    m = metadata_of(item.to_object() if is_typed(item) else item)
    with contextlib.suppress(NotFound):  # gone already: deleted all the same
        await client.delete(kind, m["name"], namespace=m.get("namespace") or None)
    return 1
