"""Liveness and readiness checks, served as ``/healthz`` and ``/readyz``.

The HTTP behaviour is Kubernetes' (and controller-runtime's):

- ``GET /readyz``: 200 ``ok`` when every check passes; otherwise 500 with one line per check
  (``[+]ping ok``, ``[-]informer-sync failed: reason withheld``) and ``readyz check failed``.
- ``?verbose`` lists every check on success too; ``?exclude=<name>`` (repeatable) skips checks.
- ``GET /readyz/<name>``: that check alone: 200 ``ok`` or 500 ``internal server error: <reason>``;
  404 for an unknown name.

Failure reasons are withheld on every path (``reason withheld``) unless the request comes
over loopback (``kubectl port-forward``, ``kubectl exec ... curl localhost``) or
``show_reasons`` is set: the probe port has no authentication and the kubelet reaches it
over the pod network, and a reason is an exception message that may carry anything. They are
always logged.

A check is any callable taking no arguments, sync or async. It passes by returning ``None`` or
``True``, and fails by returning ``False`` or raising (the exception's message is the reason).
Async checks run on the event loop; sync checks run in a worker thread, so a slow one cannot
stall the loop. Every check has a timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Final

from setpoint.manager.errors import DuplicateCheckError
from setpoint.server.http import HttpRequest, HttpResponse

__all__ = ["Check", "HealthChecks"]

log = logging.getLogger("setpoint.manager")

Check = Callable[[], object]
"""A health or readiness check: returns ``None``/``True`` (healthy), ``False`` or raises
(unhealthy); may be a coroutine function."""

_CHECK_NAME: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_WITHHELD: Final = "reason withheld"


class HealthChecks:
    """A named set of checks served under one path (``/healthz`` or ``/readyz``)."""

    def __init__(self, endpoint: str, *, timeout: float, show_reasons: bool = False) -> None:
        self.endpoint = endpoint
        """``"healthz"`` or ``"readyz"``; the path prefix and the word in the failure line."""
        self.show_reasons = show_reasons
        """Serve failure reasons to every caller, not only over loopback."""
        self._timeout = timeout
        self._checks: dict[str, Check] = {}

    @property
    def names(self) -> list[str]:
        """The registered check names, sorted."""
        return sorted(self._checks)

    def add(self, name: str, check: Check) -> None:
        """Register ``check`` as ``name``.

        Raises:
            DuplicateCheckError: ``name`` is taken (checks are never silently replaced).
            ValueError: ``name`` is not usable as a URL path segment.
            TypeError: ``check`` is not callable.

        """
        if not _CHECK_NAME.match(name):
            raise ValueError(
                f"{self.endpoint} check name {name!r} must be letters, digits, '-', '_' and '.' "
                f"(it becomes the path /{self.endpoint}/{name})"
            )
        if not callable(check):
            raise TypeError(f"{self.endpoint} check {name!r} must be callable, got {check!r}")
        if name in self._checks:
            raise DuplicateCheckError(
                f"a {self.endpoint} check named {name!r} is already registered; choose another "
                "name (checks are never replaced, so no component's check disappears silently)"
            )
        self._checks[name] = check

    async def run(self, name: str) -> str | None:
        """Run one check; return ``None`` if it passed, else the reason it failed.

        Raises:
            KeyError: no check has this name.

        """
        check = self._checks[name]
        try:
            result = await asyncio.wait_for(self._call(check), timeout=self._timeout)
        except TimeoutError:
            return f"no answer within {self._timeout:g}s"
        except Exception as exc:
            return str(exc) or type(exc).__name__
        if result is False:
            return "check returned False"
        return None

    async def _call(self, check: Check) -> object:
        if _is_async(check):
            result = check()
        else:
            # Sync user code may block (file reads, locks): keep it off the event loop.
            result = await asyncio.to_thread(check)
        if inspect.isawaitable(result):
            result = await _awaited(result)
        return result

    async def handle(self, request: HttpRequest, subpath: str) -> HttpResponse:
        """Answer ``GET /<endpoint>`` (``subpath`` empty) or ``/<endpoint>/<name>``."""
        if request.method not in ("GET", "HEAD"):
            return HttpResponse.text(405, "method not allowed\n")
        name = subpath.strip("/")
        if name:
            if name not in self._checks:
                return HttpResponse.text(404, "404 page not found\n")
            reason = await self.run(name)
            if reason is None:
                return HttpResponse.text(200, "ok")
            log.info("%s check failed: %s: %s", self.endpoint, name, reason)
            shown = reason if self._may_show(request) else _WITHHELD
            return HttpResponse.text(500, f"internal server error: {shown}\n")
        return await self._aggregate(request)

    def _may_show(self, request: HttpRequest) -> bool:
        return self.show_reasons or request.is_loopback

    async def _aggregate(self, request: HttpRequest) -> HttpResponse:
        excluded = set(request.query.get("exclude", ()))
        names = self.names
        included = [name for name in names if name not in excluded]
        reasons = await asyncio.gather(*(self.run(name) for name in included))
        failures = {name: reason for name, reason in zip(included, reasons, strict=True) if reason}
        verbose = "verbose" in request.query
        if not failures and not verbose:
            return HttpResponse.text(200, "ok")
        lines: list[str] = []
        for name in names:
            if name in excluded:
                lines.append(f"[+]{name} excluded: ok")
            elif name in failures:
                shown = failures[name] if self._may_show(request) else _WITHHELD
                lines.append(f"[-]{name} failed: {shown}")
            else:
                lines.append(f"[+]{name} ok")
        unknown = sorted(excluded - set(names))
        if unknown:
            quoted = ",".join(f'"{name}"' for name in unknown)
            lines.append(f"warn: some health checks cannot be excluded: no matches for {quoted}")
        if failures:
            log.info(
                "%s check failed: %s",
                self.endpoint,
                "; ".join(f"{name}: {reason}" for name, reason in sorted(failures.items())),
            )
            lines.append(f"{self.endpoint} check failed")
        else:
            lines.append(f"{self.endpoint} check passed")
        return HttpResponse.text(500 if failures else 200, "\n".join(lines) + "\n")


def _is_async(check: Check) -> bool:
    if inspect.iscoroutinefunction(check):
        return True
    call = getattr(check, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return inspect.iscoroutinefunction(call)


async def _awaited(awaitable: Awaitable[object]) -> object:
    return await awaitable
