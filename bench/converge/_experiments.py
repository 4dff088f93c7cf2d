"""Experiments the converge benchmark can switch on in its Python processes (not settings).

``ignore_environment()`` makes every aiohttp session ignore the environment
(``trust_env=False``). With the environment trusted, which is what setpoint's transport asks
for when the kubeconfig names no proxy, aiohttp looks up ``~/.netrc`` (``run_in_executor``)
and the proxy variables (``asyncio.to_thread``) in worker threads on every request; the
experiment measures what those two thread hops per request cost.
"""

from __future__ import annotations

from typing import Any


def ignore_environment() -> None:
    """Make every aiohttp session created from now on use ``trust_env=False``."""
    import aiohttp

    original = aiohttp.ClientSession.__init__

    def init(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        kwargs["trust_env"] = False
        original(self, *args, **kwargs)

    aiohttp.ClientSession.__init__ = init  # type: ignore[method-assign]
