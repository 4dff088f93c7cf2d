"""Blocking (plain ``def``) reconcilers on the real control plane (issue 30)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.client import Client, load_kubeconfig
from setpoint.client.patch import MergePatch
from setpoint.controller import Context, Request
from setpoint.controller.blocking import SyncContext
from setpoint.manager import LeaderElectionOptions, Manager, ManagerOptions
from setpoint.observability.metrics import Metrics
from setpoint.testing.waits import eventually

SLEEPS = 1200  # time.sleep(0.05) calls the blocked reconcile makes at most (a minute)


async def test_a_reconcile_blocked_in_time_sleep_leaves_the_loop_to_the_rest(
    kubeconfig_path: Path, k8s: Client, namespace: str
) -> None:
    """A plain def reconcile blocked in time.sleep stalls neither other keys nor the lease.

    An elected manager (leader election on, renewing every 0.5 s) runs a controller whose
    reconcile is a plain function with two workers. The reconcile of ConfigMap "slow"
    blocks in time.sleep until the test releases it; meanwhile ConfigMap "fast" is
    reconciled through the same synchronous client and converges, the leader Lease's
    renewTime moves on, and /healthz answers. Once released, "slow" converges too. Both
    reconciles ran in the controller's own threads, never on the event loop.
    """
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    lease = f"blocking-{uuid.uuid4().hex[:8]}"
    manager = Manager(
        client,
        ManagerOptions(
            leader_election=LeaderElectionOptions(
                name=lease,
                namespace=namespace,
                lease_duration=4.0,
                renew_deadline=3.0,
                retry_period=0.5,
            ),
            metrics=Metrics(CollectorRegistry()),
            metrics_bind_address="0",
            health_probe_bind_address="127.0.0.1:0",
            handle_signals=False,
        ),
    )
    entered, release = threading.Event(), threading.Event()
    threads: dict[str, str] = {}

    def reconcile(ctx: SyncContext, request: Request) -> None:
        if request.namespace != namespace or request.name not in {"slow", "fast"}:
            return  # kube-controller-manager's kube-root-ca.crt, other tests' ConfigMaps
        ctx.reader.get(kinds.ConfigMap, request.name, namespace=namespace)
        threads[request.name] = threading.current_thread().name
        if request.name == "slow":
            entered.set()
            for _ in range(SLEEPS):  # a blocking SDK call, as a kopf user would write it
                if release.is_set():
                    break
                time.sleep(0.05)
        patch = MergePatch({"data": {"reconciled": "yes"}})
        ctx.client.patch(kinds.ConfigMap, request.name, patch, namespace=namespace)

    manager.controller("blocking").for_(kinds.ConfigMap).max_concurrent_reconciles(2).build(
        reconcile
    )

    async def reconciled(name: str) -> bool:
        cm: dict[str, Any] = await k8s.get(kinds.ConfigMap, name, namespace=namespace)
        return (cm.get("data") or {}).get("reconciled") == "yes"

    async def renew_time() -> str:
        held: dict[str, Any] = await k8s.get(kinds.Lease, lease, namespace=namespace)
        return str(held["spec"].get("renewTime"))

    task = asyncio.create_task(manager.run())
    try:
        await manager.wait_elected(timeout=60)
        await k8s.create(config_map("slow", namespace))
        await eventually(entered.is_set, timeout=60, description="slow blocks in time.sleep")
        renewed_before = await renew_time()
        await k8s.create(config_map("fast", namespace))
        await eventually(
            lambda: reconciled("fast"), timeout=60, description="fast converges meanwhile"
        )

        async def lease_renewed() -> bool:
            return await renew_time() != renewed_before

        await eventually(lease_renewed, timeout=30, description="the lease is renewed meanwhile")
        probes = manager.health_probe_address
        assert probes is not None
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://{probes[0]}:{probes[1]}/healthz") as resp,
        ):
            assert resp.status == 200
        assert not release.is_set() and not await reconciled("slow")
        assert manager.is_leader

        release.set()
        await eventually(lambda: reconciled("slow"), timeout=60, description="slow converges")
        assert set(threads) == {"slow", "fast"}
        assert all(name.startswith("setpoint-blocking") for name in threads.values()), threads
    finally:
        release.set()
        manager.stop()
        await asyncio.wait_for(task, 60)
        await client.close()


def config_map(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
    }


async def test_an_async_reconcile_that_blocks_is_named_with_its_stack(
    kubeconfig_path: Path, k8s: Client, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An async reconcile calling time.sleep is logged with its object and blocking line.

    The manager's blocked-loop detector (threshold 0.1 s) sees the loop stall while an
    ``async def`` reconcile sleeps 0.5 s without awaiting, as a kopf user would write a
    blocking SDK call: one warning names the controller, the ConfigMap's key and the
    function that blocks, and setpoint_event_loop_blocked_total counts it.
    """
    caplog.set_level(logging.WARNING, logger="setpoint.runtime")
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    metrics = Metrics(CollectorRegistry())
    manager = Manager(
        client,
        ManagerOptions(
            metrics=metrics,
            metrics_bind_address="0",
            health_probe_bind_address="0",
            handle_signals=False,
            blocked_loop_threshold=0.1,
        ),
    )
    done: list[str] = []

    def a_blocking_sdk_call() -> None:
        time.sleep(0.5)  # what a synchronous SDK does inside an async def

    async def reconcile(ctx: Context, request: Request) -> None:
        if request.namespace != namespace or request.name != "sleepy":
            return
        if not done:
            a_blocking_sdk_call()
        done.append(request.name)

    manager.controller("sleeper").for_(kinds.ConfigMap).build(reconcile)
    task = asyncio.create_task(manager.run())
    try:
        await manager.wait_elected(timeout=60)
        await k8s.create(config_map("sleepy", namespace))
        await eventually(lambda: done, timeout=60, description="the reconcile ran")

        def named() -> list[str]:
            return [
                r.getMessage()
                for r in caplog.records
                if "event loop is blocked" in r.getMessage()
                and f"controller=sleeper key={namespace}/sleepy" in r.getMessage()
            ]

        [line] = await eventually(named, timeout=30, description="the stall is logged")
        assert "in a_blocking_sdk_call" in line, line
        assert metrics.value("setpoint_event_loop_blocked_total") >= 1
    finally:
        manager.stop()
        await asyncio.wait_for(task, 60)
        await client.close()
