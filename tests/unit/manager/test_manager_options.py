"""ManagerOptions and LeaderElectionOptions: defaults and the rules checked at construction."""

from __future__ import annotations

from typing import Any

import pytest

from setpoint.manager import LeaderElectionOptions, LeadershipLossPolicy, ManagerOptions
from setpoint.server import BindAddress, parse_bind_address


def test_leader_election_defaults_are_client_go_defaults() -> None:
    options = LeaderElectionOptions(name="my-operator")
    assert (options.lease_duration, options.renew_deadline, options.retry_period) == (15, 10, 2)
    assert options.effective_request_timeout == 5.0
    assert options.release_on_cancel is False
    assert options.on_lost is LeadershipLossPolicy.FAIL
    assert options.namespace is None and options.identity is None and options.lock is None


def test_short_test_timings_are_accepted() -> None:
    options = LeaderElectionOptions(
        name="x", lease_duration=4, renew_deadline=3, retry_period=1, request_timeout=1.5
    )
    assert options.effective_request_timeout == 1.5


def test_renew_deadline_not_shorter_than_lease_duration_is_rejected() -> None:
    with pytest.raises(ValueError) as info:
        LeaderElectionOptions(name="x", lease_duration=10, renew_deadline=10)
    message = str(info.value)
    assert "renew_deadline (10 s) must be shorter than lease_duration (10 s)" in message
    assert "before other candidates may consider the lease expired" in message


def test_retry_period_not_shorter_than_renew_deadline_is_rejected() -> None:
    with pytest.raises(ValueError) as info:
        LeaderElectionOptions(name="x", lease_duration=15, renew_deadline=10, retry_period=10)
    message = str(info.value)
    assert "retry_period (10 s) is too long for renew_deadline (10 s)" in message
    assert "retry a failed renewal at least once" in message


def test_retry_period_within_client_go_jitter_of_deadline_is_rejected() -> None:
    # 1.2 x 2.5 = 3.0: no room for one jittered retry before a 3 s deadline.
    with pytest.raises(ValueError, match=r"1\.2 x retry_period"):
        LeaderElectionOptions(name="x", lease_duration=4, renew_deadline=3, retry_period=2.5)


def test_request_timeout_that_can_outlast_the_renew_deadline_is_rejected() -> None:
    with pytest.raises(ValueError) as info:
        LeaderElectionOptions(name="x", request_timeout=10)
    message = str(info.value)
    assert "request_timeout (10 s) must be shorter than renew_deadline (10 s)" in message
    assert "outlast the renew deadline" in message


def test_fractional_lease_duration_is_rejected_because_the_lease_stores_seconds() -> None:
    with pytest.raises(ValueError, match="whole number of seconds"):
        LeaderElectionOptions(name="x", lease_duration=4.5, renew_deadline=3, retry_period=1)


@pytest.mark.parametrize("attr", ["lease_duration", "renew_deadline", "retry_period"])
def test_non_positive_durations_are_rejected(attr: str) -> None:
    with pytest.raises(ValueError, match=f"{attr} must be a positive number"):
        zero: dict[str, Any] = {attr: 0}
        LeaderElectionOptions(name="x", **zero)


@pytest.mark.parametrize("name", ["", "Upper", "under_score", "-dash", "a" * 254])
def test_lease_name_must_be_a_dns_subdomain(name: str) -> None:
    with pytest.raises(ValueError, match="valid Lease name"):
        LeaderElectionOptions(name=name)


def test_empty_identity_is_rejected() -> None:
    with pytest.raises(ValueError, match="identity must not be empty"):
        LeaderElectionOptions(name="x", identity="")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":8080", BindAddress(None, 8080)),
        ("127.0.0.1:0", BindAddress("127.0.0.1", 0)),
        ("[::1]:9443", BindAddress("::1", 9443)),
        ("localhost:8081", BindAddress("localhost", 8081)),
        ("0", None),
    ],
)
def test_bind_addresses_parse(text: str, expected: BindAddress | None) -> None:
    assert parse_bind_address(text, option="metrics_bind_address") == expected


@pytest.mark.parametrize("text", ["", "8080", ":http", ":70000", "::1:80", "[::1:80", "[x]:80"])
def test_bad_bind_addresses_name_the_option(text: str) -> None:
    with pytest.raises(ValueError, match=r"ManagerOptions\.health_probe_bind_address="):
        ManagerOptions(health_probe_bind_address=text)


def test_manager_defaults() -> None:
    options = ManagerOptions()
    assert options.metrics_bind_address == "127.0.0.1:8080"
    assert options.health_probe_bind_address == ":8081"
    assert options.graceful_shutdown_timeout == 30.0
    assert options.cache_sync_timeout == 120.0
    assert options.leader_election is None
    assert options.handle_signals is True


def test_servers_on_the_same_fixed_address_are_rejected() -> None:
    with pytest.raises(ValueError, match="give the servers different ports"):
        ManagerOptions(metrics_bind_address=":9000", health_probe_bind_address=":9000")
    # Port 0 means "any free port", so the same text gives two different ports.
    ManagerOptions(metrics_bind_address="127.0.0.1:0", health_probe_bind_address="127.0.0.1:0")


@pytest.mark.parametrize(
    "attr",
    [
        "graceful_shutdown_timeout",
        "cache_sync_timeout",
        "health_check_timeout",
        "failure_check_interval",
    ],
)
def test_manager_durations_must_be_positive(attr: str) -> None:
    with pytest.raises(ValueError, match=f"ManagerOptions.{attr}="):
        zero: dict[str, Any] = {attr: 0}
        ManagerOptions(**zero)


def test_options_are_frozen_and_keyword_only() -> None:
    options = ManagerOptions()
    with pytest.raises(AttributeError):
        options.metrics_bind_address = "0"  # type: ignore[misc]
    with pytest.raises(TypeError):
        LeaderElectionOptions("positional")  # type: ignore[call-arg]  # the point of the test
