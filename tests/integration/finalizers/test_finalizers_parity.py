"""Finalizer handlers on a controller, against the fake and the real API server.

Each test runs the scenario of the same name in tests/_support/finalizer_flow.py
with this directory's ``backend`` fixture, once on the fake client and once on the real
control plane: a scenario that passes on the fake but fails on the server shows where the
fake is wrong (and the unit tests, which use the fake, would be lying).
"""

from __future__ import annotations

from tests._support import finalizer_flow as flow
from tests._support.finalizer_flow import Backend


async def test_finalizer_is_in_place_before_reconcile_runs(backend: Backend) -> None:
    """A live object gets the controller's finalizer before reconcile is called.

    Every object reconcile reads already carries the finalizer (added with a guarded JSON
    patch), so whatever reconcile creates outside the object is protected from the start.
    """
    await flow.finalizer_is_in_place_before_reconcile_runs(backend)


async def test_delete_runs_cleanup_removes_finalizer_and_skips_reconcile(
    backend: Backend,
) -> None:
    """Deleting runs the cleanup once, removes only our finalizer, and skips reconcile.

    Another controller's finalizer stays until its owner removes it; reconcile is never
    called for the deleting object; the object goes once the last finalizer is gone.
    """
    await flow.delete_runs_cleanup_removes_finalizer_and_skips_reconcile(backend)


async def test_failing_cleanup_is_recorded_retried_with_backoff_then_completes(
    backend: Backend,
) -> None:
    """A failing cleanup is recorded four ways and retried with backoff until it succeeds.

    The failure shows as the cleanup.setpoint.dev annotation, a status condition, a Warning
    Event and setpoint_finalizer_cleanup_failures_total; retries keep CleanupRetry's
    doubling delays although recording the failure writes the object; once the cleanup
    succeeds the object goes and the pending-objects gauge returns to zero.
    """
    await flow.failing_cleanup_is_recorded_retried_with_backoff_then_completes(backend)


async def test_hanging_cleanup_hits_its_deadline_and_is_retried(backend: Backend) -> None:
    """A cleanup that hangs is cancelled at its deadline, recorded, and retried.

    The record says CleanupDeadlineExceeded with the deadline; the cleanup sees the
    cancellation; when it stops hanging, the object goes.
    """
    await flow.hanging_cleanup_hits_its_deadline_and_is_retried(backend)


async def test_kind_without_status_subresource_gets_the_annotation_only(
    backend: Backend,
) -> None:
    """Without a status subresource, a cleanup failure is recorded in the annotation only.

    No status is written (there is no status subresource to write it through); the
    annotation, which every kind has, carries the error.
    """
    await flow.kind_without_status_subresource_gets_the_annotation_only(backend)


async def test_no_finalizer_is_added_to_an_object_already_being_deleted(
    backend: Backend,
) -> None:
    """An object deleting before the controller first sees it gets no finalizer.

    The controller adds nothing (the server would refuse it), runs no cleanup and does not
    reconcile it; another controller's finalizer is untouched.
    """
    await flow.no_finalizer_is_added_to_an_object_already_being_deleted(backend)


async def test_cleanup_pending_from_before_a_restart_runs_on_start(backend: Backend) -> None:
    """An object left deleting with our finalizer is finalized when the controller starts.

    This is what a restarted operator meets after a crash: the cleanup runs from the initial
    list, the finalizer is removed and the object goes, without a reconcile.
    """
    await flow.cleanup_pending_from_before_a_restart_runs_on_start(backend)


async def test_two_finalizers_of_one_controller_clean_up_last_registered_first(
    backend: Backend,
) -> None:
    """Two finalizers of one controller are both added, and cleaned up in reverse order.

    Both are on the object before reconcile runs; on deletion the last registered cleanup
    runs first and each cleanup runs exactly once (the cache is told that removing the last
    finalizer deleted the object, so no stale read runs a cleanup again).
    """
    await flow.two_finalizers_of_one_controller_clean_up_last_registered_first(backend)


async def test_cleanup_of_a_typed_kind_receives_a_typed_object(backend: Backend) -> None:
    """With for_(TypedClass), the cleanup receives an instance of that class.

    The instance is built from the deleting object (deletionTimestamp set).
    """
    await flow.cleanup_of_a_typed_kind_receives_a_typed_object(backend)


async def test_two_controllers_with_different_finalizers_on_one_kind(backend: Backend) -> None:
    """Two controllers add and remove their finalizers on the same objects concurrently.

    Twelve objects, four workers per controller: both finalizers end up on every object,
    each controller's cleanup runs for every object, and all objects go. Had either
    controller dropped the other's finalizer, an object would have vanished before the
    other cleanup ran.
    """
    await flow.two_controllers_with_different_finalizers_on_one_kind(backend)
