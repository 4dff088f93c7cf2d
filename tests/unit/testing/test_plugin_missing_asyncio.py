"""The pytest plugin without pytest-asyncio: its async fixtures say which extra is missing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from setpoint._extras import ExtraNotInstalled
from setpoint.testing import pytest_plugin


def test_an_async_fixture_without_pytest_asyncio_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pytest_plugin, "pytest_asyncio", None)

    async def cluster() -> AsyncIterator[None]:
        yield None

    fixture: Any = pytest_plugin._async_fixture(scope="session")(cluster)
    with pytest.raises(ExtraNotInstalled) as info:
        fixture.__wrapped__()
    assert info.value.extra == "testing"
    assert info.value.missing == ("pytest-asyncio",)
    assert "the 'cluster' fixture needs setpoint's 'testing' extra" in str(info.value)
