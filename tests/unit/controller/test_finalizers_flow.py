"""Finalizer handlers on a running controller, over the fake client.

The scenarios live in tests/_support/finalizer_flow.py;
tests/integration/finalizers/test_finalizers_parity.py runs the same ones against the fake
and the real API server.
"""

from __future__ import annotations

import pytest

from tests._support import finalizer_flow as flow
from tests._support.finalizer_flow import Backend


@pytest.fixture
def backend() -> Backend:
    """The fake, with the test CRDs and a namespace."""
    return flow.fake_backend()


async def test_finalizer_is_in_place_before_reconcile_runs(backend: Backend) -> None:
    await flow.finalizer_is_in_place_before_reconcile_runs(backend)


async def test_delete_runs_cleanup_removes_finalizer_and_skips_reconcile(backend: Backend) -> None:
    await flow.delete_runs_cleanup_removes_finalizer_and_skips_reconcile(backend)


async def test_failing_cleanup_is_recorded_retried_with_backoff_then_completes(
    backend: Backend,
) -> None:
    await flow.failing_cleanup_is_recorded_retried_with_backoff_then_completes(backend)


async def test_credentials_in_a_cleanup_error_are_masked(backend: Backend) -> None:
    await flow.credentials_in_a_cleanup_error_are_masked(backend)


async def test_hanging_cleanup_hits_its_deadline_and_is_retried(backend: Backend) -> None:
    await flow.hanging_cleanup_hits_its_deadline_and_is_retried(backend)


async def test_kind_without_status_subresource_gets_the_annotation_only(backend: Backend) -> None:
    await flow.kind_without_status_subresource_gets_the_annotation_only(backend)


async def test_no_finalizer_is_added_to_an_object_already_being_deleted(backend: Backend) -> None:
    await flow.no_finalizer_is_added_to_an_object_already_being_deleted(backend)


async def test_cleanup_pending_from_before_a_restart_runs_on_start(backend: Backend) -> None:
    await flow.cleanup_pending_from_before_a_restart_runs_on_start(backend)


async def test_two_finalizers_of_one_controller_clean_up_last_registered_first(
    backend: Backend,
) -> None:
    await flow.two_finalizers_of_one_controller_clean_up_last_registered_first(backend)


async def test_cleanup_of_a_typed_kind_receives_a_typed_object(backend: Backend) -> None:
    await flow.cleanup_of_a_typed_kind_receives_a_typed_object(backend)


async def test_two_controllers_with_different_finalizers_on_one_kind(backend: Backend) -> None:
    await flow.two_controllers_with_different_finalizers_on_one_kind(backend)
