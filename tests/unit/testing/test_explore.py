"""The interleaving explorer: every ordering of two writers' requests, and the invariant."""

from __future__ import annotations

import asyncio

import pytest

from setpoint.testing import FakeClient
from setpoint.testing.interleavings import ReplayError, WriterFunc, explore
from tests._support import races

NS = "default"


async def both_names_kept(fake: FakeClient) -> None:
    got = sorted(await races.entries(fake, NS))
    assert got == ["a", "b"], f"status.entries is {got}: a write was lost"


def plain(fake: FakeClient) -> dict[str, WriterFunc]:
    races.seeded(fake, NS)
    return {"a": races.plain_writer("a", NS), "b": races.plain_writer("b", NS)}


def safe(fake: FakeClient) -> dict[str, WriterFunc]:
    races.seeded(fake, NS)
    return {"a": races.safe_writer("a", NS), "b": races.safe_writer("b", NS)}


async def test_the_explorer_finds_the_lost_update_of_two_plain_writers() -> None:
    found = await explore(plain, both_names_kept)
    # Two writers of two requests each: C(4, 2) = 6 orderings. Serial ones keep both names;
    # the four where both read before either writes lose one.
    assert (found.orderings, found.complete) == (6, True)
    assert len(found.violations) == 4
    for violation in found.violations:
        assert [s.method for s in violation.steps] == ["GET", "GET", "PUT", "PUT"]
        assert [s.status for s in violation.steps] == [200, 200, 200, 409]
        loser = violation.steps[-1].actor
        assert violation.errors == {loser: violation.errors[loser]}
        assert violation.errors[loser].startswith("Conflict:")
        assert "a write was lost" in violation.message
    text = str(found.violations[0])
    assert text.count(" | ") == 3 and "PUT default/race/status -> 409" in text


async def test_update_status_loses_no_update_in_any_ordering() -> None:
    found = await explore(safe, both_names_kept)
    assert found.complete and found.violations == []
    # The same six orderings of the first read and write; a race's loser then reads and
    # writes again, alone (the winner is done), so that adds no ordering.
    assert found.orderings == 6


async def test_the_bound_stops_exploring_and_says_so() -> None:
    found = await explore(plain, both_names_kept, max_orderings=2)
    assert (found.orderings, found.complete) == (2, False)


async def test_a_writer_awaiting_something_else_is_named() -> None:
    never = asyncio.Event()

    async def stuck(client: object) -> None:
        await never.wait()

    def setup(fake: FakeClient) -> dict[str, WriterFunc]:
        races.seeded(fake, NS)
        return {"a": races.plain_writer("a", NS), "stuck": stuck}

    with pytest.raises(ReplayError, match=r"writer\(s\) stuck neither sent a request"):
        await explore(setup, both_names_kept, stall_timeout=0.2)
