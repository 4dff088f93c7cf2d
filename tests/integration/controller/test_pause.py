"""``setpoint.dev/paused`` on the real server: an object left alone, then reconciled again.

The scenarios are tests/_support/pause_flow.py's, which the unit tests run on the fake.
"""

from __future__ import annotations

import pytest

from setpoint.client import Client
from tests._support import pause_flow
from tests._support.finalizer_flow import Backend


@pytest.fixture
def backend(test_crds: None, k8s: Client, namespace: str) -> Backend:
    """The real control plane, with the test CRDs and a namespace of the test's own."""
    return Backend(k8s, namespace, "real")


async def test_paused_object_is_left_alone_then_resumes(backend: Backend) -> None:
    """A paused object is not reconciled, is reported once, and converges when resumed.

    The controller filters on GenerationChanged and has a finalizer. Annotating the object
    setpoint.dev/paused=true sets a Paused condition (reason PausedByAnnotation) and one
    Normal Event; a spec change and an explicit requeue while paused reconcile nothing and
    report nothing more. Removing the annotation passes the predicate, removes the
    condition, writes one Resumed Event and reconciles the changed spec; the object can
    then be deleted.
    """
    await pause_flow.paused_object_is_left_alone_then_resumes(backend)


async def test_paused_object_being_deleted_still_runs_its_cleanup(backend: Backend) -> None:
    """Deleting a paused object still runs its finalizer cleanup, and the object goes.

    The pause stops reconciles only: the cleanup runs once, the finalizer is removed and
    the server deletes the object, and reconcile is not called for it meanwhile.
    """
    await pause_flow.paused_object_being_deleted_still_runs_its_cleanup(backend)


async def test_paused_deletion_holds_the_cleanup_until_the_pause_ends(
    backend: Backend,
) -> None:
    """With setpoint.dev/paused-deletion=true the cleanup waits for the pause to end.

    The deleted object stays, deletionTimestamp set and finalizer held, with no cleanup
    run; removing setpoint.dev/paused (on the deleting object) runs the cleanup and the
    object goes.
    """
    await pause_flow.paused_deletion_holds_the_cleanup_until_the_pause_ends(backend)


async def test_the_doctor_lists_paused_objects(backend: Backend) -> None:
    """setpoint doctor paused lists the paused objects the server holds, and for whom.

    Of three Gizmos (one plain, one paused for every controller, one paused for two named
    controllers with its deletion held), the metadata-only scan finds the two paused ones
    with their controllers; the held one shows as a problem once it is being deleted.
    """
    await pause_flow.the_doctor_lists_paused_objects(backend)
