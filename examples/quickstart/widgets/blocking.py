"""The Widget operator with a plain ``def`` reconcile: the blocking variant.

The same operator as :mod:`widgets`, written for code that calls synchronous libraries (a
cloud SDK, a database driver): the controller runs ``reconcile`` in a thread of its own
(``max_concurrent_reconciles`` of them), and ``ctx`` is a ``setpoint.SyncContext`` whose
reader and client need no ``await``. The async safe-write helpers are reached with
``ctx.run``. Run it with ``setpoint run widgets.blocking``; docs/guide/blocking-code.md
says when to choose which.
"""

from __future__ import annotations

import setpoint as sp
from setpoint import kinds
from setpoint.api.kinds import apps_v1

from . import FIELD_MANAGER, Widget, converge

__all__ = ["FIELD_MANAGER", "reconcile", "setup"]


@sp.rbac.for_kind(kinds.ConfigMap, verbs=["get", "list", "watch", "create", "patch"])
@sp.rbac.for_kind(apps_v1.Deployment, verbs=["get", "list", "watch", "create", "patch"])
def reconcile(ctx: sp.SyncContext, request: sp.Request) -> sp.Result | None:
    """Reconcile one Widget from a worker thread; the event loop runs on meanwhile.

    A synchronous SDK call would go where the comment is: it blocks this thread only.
    """
    try:
        widget = ctx.reader.get(Widget, request.name, namespace=request.namespace)
    except sp.NotFound:
        return None
    # ... a blocking call (boto3, a database driver) may run here ...
    ctx.run(converge(ctx.async_context.client, widget))
    return None


def setup(manager: sp.Manager) -> None:
    """Register the blocking Widget controller (what ``setpoint run widgets.blocking`` calls)."""
    builder = manager.controller("widget").for_(Widget).owns(kinds.ConfigMap)
    builder.owns(apps_v1.Deployment).max_concurrent_reconciles(2).build(reconcile)
