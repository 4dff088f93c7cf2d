"""A real Prometheus (built by `make prometheus`) scraping test operators, and its query API."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from setpoint.testing import free_port

VERSION = "3.16.0"
"""The Prometheus release `make prometheus` builds (scripts/build_prometheus.py)."""


def binary() -> Path:
    """The cached Prometheus binary; fails the test (never skips) when it was not built."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "setpoint" / "prometheus" / VERSION / "bin" / "prometheus"
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"Prometheus {VERSION} is not built ({path} is missing): run `make prometheus` "
            "first (about 5 CPU minutes once, cached afterwards)",
            pytrace=False,
        )
    return path


class Prometheus:
    """A running Prometheus: its base URL, its log and its process."""

    def __init__(self, url: str, log: Path, process: subprocess.Popen[bytes]) -> None:
        self.url = url
        self.log = log
        self.process = process

    def log_tail(self, chars: int = 3000) -> str:
        """The end of Prometheus's own log, for failure messages."""
        return self.log.read_text(errors="replace")[-chars:]

    async def get(self, path: str, **params: str) -> dict[str, Any]:
        """GET an API path; the decoded ``data`` of a ``success`` answer."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, params=params) as response,
        ):
            body = await response.json()
        assert body.get("status") == "success", f"{path} {params}: {body}"
        data: dict[str, Any] = body["data"]
        return data

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """Evaluate ``expr`` now (``/api/v1/query``); its result samples."""
        data = await self.get("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result


@contextmanager
def running(
    tmp: Path, targets: Sequence[str], rules: dict[str, Any], *, interval: str = "1s"
) -> Iterator[Prometheus]:
    """Start Prometheus scraping ``targets`` (host:port) every ``interval`` with ``rules``.

    Does not wait (the operators share this event loop): ``await wait_ready(...)``. Stops it
    at the end.
    """
    (tmp / "rules.yaml").write_text(yaml.safe_dump(rules))
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(tmp / "rules.yaml")],
        "scrape_configs": [
            {"job_name": "setpoint", "static_configs": [{"targets": list(targets)}]}
        ],
    }
    (tmp / "prometheus.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(binary()),
                f"--config.file={tmp / 'prometheus.yaml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    prometheus = Prometheus(f"http://127.0.0.1:{port}", log, process)
    try:
        yield prometheus
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_ready(prometheus: Prometheus, timeout: float = 30.0) -> None:
    """Wait until ``/-/ready`` answers 200 (the TSDB is open and rules are loaded)."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while True:
            exited = prometheus.process.poll() is not None
            assert not exited, f"Prometheus exited:\n{prometheus.log_tail()}"
            try:
                async with session.get(prometheus.url + "/-/ready") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, f"Prometheus not ready:\n{prometheus.log_tail()}"
            await asyncio.sleep(0.2)
