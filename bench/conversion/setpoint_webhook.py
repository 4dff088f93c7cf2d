"""The setpoint side of the conversion benchmark: the tenants example's /convert, served alone.

A :class:`~setpoint.webhook.WebhookServer` with ``add_conversion(Tenant, TenantV1Alpha1)``
and the certificate in ``--cert-dir``, as ``setpoint run examples/tenants/tenants`` serves it,
without the operator's controllers (so only conversion is measured). Prints ``started`` once
it listens; stops on SIGTERM.

    .venv/bin/python bench/conversion/setpoint_webhook.py --port 9443 --cert-dir DIR
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from setpoint.crd import import_targets
from setpoint.observability.metrics import Metrics
from setpoint.webhook import CertificateDirectory, WebhookServer, WebhookServerOptions

TENANTS = Path(__file__).resolve().parents[2] / "examples" / "tenants" / "tenants"


async def serve(port: int, cert_dir: str) -> None:
    """Serve /convert until SIGTERM or SIGINT."""
    package = import_targets([str(TENANTS)])[0]  # the package, then its submodules
    server = WebhookServer(
        WebhookServerOptions(
            bind_address=f"127.0.0.1:{port}", certificate=CertificateDirectory(cert_dir)
        ),
        metrics=Metrics.isolated(),
    )
    server.add_conversion(package.Tenant, package.TenantV1Alpha1)
    await server.start()
    print("started", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(2.0)


def main() -> None:
    """Parse the flags and serve."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.cert_dir))


if __name__ == "__main__":
    main()
