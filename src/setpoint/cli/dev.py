"""``setpoint dev <operator>``: run an operator locally with everything it needs installed.

What a scaffolded project's ``make run`` calls. In order:

1. the cluster: ``--kubeconfig`` or ``$KUBECONFIG`` when given, else a local control
   plane started for this run (its kubeconfig is printed, for kubectl in another shell);
2. the operator's CRDs, generated from its types, and, when it has webhooks, its
   webhook configurations, pointed at ``https://127.0.0.1:<port>`` with the CA of a
   loopback serving certificate made for this run;
3. ``setpoint run <operator>`` in a child process, with that certificate and port,
   until Ctrl-C or SIGTERM; then the webhook configurations are removed again (a
   stopped operator must not block writes) and the local plane, if any, is stopped.

Extra arguments after ``--`` go to ``setpoint run`` unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from setpoint.server.address import free_port

__all__ = ["DevPlan", "register", "run_dev"]

_CRD_KIND = ("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
_FIELD_MANAGER = "setpoint-dev"


class DevPlan:
    """The manifests ``setpoint dev`` installs for one operator, and how it serves webhooks."""

    def __init__(self, target: str, workdir: Path, webhook_port: int | None) -> None:
        from setpoint.crd import (
            WebhookClientConfig,
            find_admission_webhooks,
            find_resources,
            generate_crds,
            generate_webhooks,
            import_targets,
        )
        from setpoint.crd.conversion import CONVERT_PATH
        from setpoint.testing.webhook import serving_certificate

        modules = import_targets([target])
        resources = find_resources(modules)
        admission = find_admission_webhooks(modules)
        plain = [doc for m in generate_crds(resources) for doc in m.documents]
        converting = any(
            (doc.get("spec", {}).get("conversion") or {}).get("strategy") == "Webhook"
            for doc in plain
        )
        self.webhooks = bool(admission) or converting
        """Whether the operator serves webhooks (conversion or admission)."""
        self.port = webhook_port or free_port()
        """The loopback port of the webhook server."""
        self.cert_dir = workdir / "webhook-certs"
        """``tls.crt`` and ``tls.key`` for ``setpoint run --webhook-cert-dir``."""
        config = None
        if self.webhooks:
            ca, _ = serving_certificate(self.cert_dir)
            # Each admission webhook's own path replaces /convert in its configuration.
            config = WebhookClientConfig(
                url=f"https://127.0.0.1:{self.port}{CONVERT_PATH}", ca_bundle=ca.cert_pem
            )
        self.crds: list[dict[str, Any]] = [
            doc for m in generate_crds(resources, webhook=config) for doc in m.documents
        ]
        """The CRDs, their conversion webhook (if any) pointed at this run."""
        self.configurations: list[dict[str, Any]] = (
            list(generate_webhooks(admission, client_config=config).documents)
            if admission and config is not None
            else []
        )
        """The Mutating/ValidatingWebhookConfigurations pointed at this run."""

    async def install(self, kubeconfig: str) -> None:
        """Apply the CRDs and webhook configurations; wait until every CRD is Established."""
        from setpoint.api.gvk import GroupVersionKind
        from setpoint.client.client import Client
        from setpoint.client.kubeconfig import load_kubeconfig
        from setpoint.testing.waits import eventually

        crd_kind = GroupVersionKind(*_CRD_KIND)
        async with Client(load_kubeconfig(kubeconfig)) as client:
            for document in [*self.crds, *self.configurations]:
                await client.apply(document, field_manager=_FIELD_MANAGER, force=True)
            for crd in self.crds:
                name = crd["metadata"]["name"]

                async def established(name: str = name) -> bool:
                    live = await client.get(crd_kind, name)
                    conditions = (live.get("status") or {}).get("conditions") or []
                    return any(
                        c["type"] == "Established" and c["status"] == "True" for c in conditions
                    )

                await eventually(established, timeout=60, description=f"CRD {name} Established")

    async def uninstall_webhooks(self, kubeconfig: str) -> None:
        """Delete the webhook configurations this run applied (the CRDs stay)."""
        from setpoint.api.gvk import GroupVersionKind
        from setpoint.client.client import Client
        from setpoint.client.errors import NotFound
        from setpoint.client.kubeconfig import load_kubeconfig

        async with Client(load_kubeconfig(kubeconfig)) as client:
            for document in self.configurations:
                kind = GroupVersionKind.from_api_version(document["apiVersion"], document["kind"])
                with contextlib.suppress(NotFound):
                    await client.delete(kind, document["metadata"]["name"])


def _run_operator(args: argparse.Namespace, plan: DevPlan, kubeconfig: str) -> int:
    command = [
        sys.executable,
        "-m",
        "setpoint",
        "run",
        args.target,
        "--kubeconfig",
        kubeconfig,
        "--metrics-bind-address",
        f"127.0.0.1:{args.metrics_port or free_port()}",
        "--health-probe-bind-address",
        f"127.0.0.1:{args.probe_port or free_port()}",
    ]
    if plan.webhooks:
        command += [
            "--webhook-bind-address",
            f"127.0.0.1:{plan.port}",
            "--webhook-cert-dir",
            str(plan.cert_dir),
        ]
    command += list(args.run_args)
    print(f"# running: setpoint run {args.target} (Ctrl-C stops it)", flush=True)
    proc = subprocess.Popen(command)
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0 if stopping and code in (0, -signal.SIGTERM, -signal.SIGINT) else code


def run_dev(args: argparse.Namespace) -> int:
    """Run ``setpoint dev`` (see the module docstring); return the exit code."""
    from setpoint.testing.controlplane import ControlPlane

    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG") or None
    with tempfile.TemporaryDirectory(prefix="setpoint-dev-") as tmp:
        workdir = Path(tmp)
        plan = DevPlan(args.target, workdir, args.webhook_port)
        plane: ControlPlane | None = None
        if kubeconfig is None:
            plane = ControlPlane()
            print("# starting a local control plane (etcd, kube-apiserver, ...)", flush=True)
            plane.start()
            kubeconfig = str(plane.kubeconfig_path)
            print(f"# local control plane up at {plane.server}; in another shell:", flush=True)
            print(f"export KUBECONFIG={kubeconfig}", flush=True)
        try:
            asyncio.run(plan.install(kubeconfig))
            print(
                f"# installed {len(plan.crds)} CRD(s)"
                + (
                    f" and {len(plan.configurations)} webhook configuration(s) "
                    f"(webhooks on https://127.0.0.1:{plan.port})"
                    if plan.webhooks
                    else ""
                ),
                flush=True,
            )
            try:
                return _run_operator(args, plan, kubeconfig)
            finally:
                if plan.configurations:
                    asyncio.run(plan.uninstall_webhooks(kubeconfig))
        finally:
            if plane is not None:
                plane.stop()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``dev`` command."""
    parser = subparsers.add_parser(
        "dev",
        help="run an operator locally: a local control plane, its CRDs and webhooks installed",
        description=(__doc__ or "").split("\n\n", 1)[0],
    )
    parser.add_argument("target", help="the operator: a module name, a .py file or a directory")
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="cluster to run against (default: $KUBECONFIG, else a local control plane)",
    )
    parser.add_argument(
        "--webhook-port",
        type=int,
        default=None,
        help="loopback port of the webhook server (default: a free one)",
    )
    parser.add_argument("--metrics-port", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe-port", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "run_args",
        nargs=argparse.REMAINDER,
        help="after --: arguments for `setpoint run` (e.g. -- --log-level debug)",
    )
    parser.set_defaults(func=_dispatch)


def _dispatch(args: argparse.Namespace) -> int:
    run_args: Sequence[str] = args.run_args
    if run_args and run_args[0] == "--":
        args.run_args = list(run_args[1:])
    return run_dev(args)
