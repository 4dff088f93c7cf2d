"""Certificate rotation while the API server converts continuously: not one failed conversion.

The webhook server's certificate comes from :class:`SelfManagedCertificates` with validities
of seconds instead of years, so that within a quarter of a minute the serving certificate is
renewed several times and the CA once (the new CA joins the caBundle, takes over after the handover,
and the old one leaves the bundle when it expires). Meanwhile a reader lists and gets Beacons
at ``v1beta1``, which the API server can only answer by calling the webhook.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time

from setpoint.api import kinds
from setpoint.client import Client, NotFound
from setpoint.crd import WebhookClientConfig, crd_for
from setpoint.observability.metrics import Metrics
from setpoint.testing import eventually
from setpoint.tls.certs import read_certificates
from setpoint.tls.pem import KeyPair
from setpoint.webhook import WebhookServer, WebhookServerOptions
from setpoint.webhook.certificates import SelfManagedCertificates, SelfManagedCertificatesOptions
from tests._support.beacons import Beacon, BeaconV1Beta1
from tests._support.cert_targets import ca_bundles
from tests._support.crd_server import is_established

SECOND = dt.timedelta(seconds=1)
OBJECTS = 10


async def test_rotation_under_continuous_conversion_fails_no_conversion(
    k8s: Client, namespace: str
) -> None:
    """Serving renewals, a CA renewal with handover and the old CA's removal: 0 failures."""
    crd_name = f"beacons.{Beacon.declaration().gvk.group}"
    certs = SelfManagedCertificates(
        k8s,
        SelfManagedCertificatesOptions(
            hosts=("127.0.0.1",),
            secret_name="beacon-webhook-cert",
            secret_namespace=namespace,
            crds=(crd_name,),
            # Serving certificates every 2 s (5 s valid, renewed 3 s early); the CA renewed at
            # 9 s, taking over at 11 s (the handover keeps the 2 s the API server needs to see
            # the new caBundle), the old CA out of the bundle when it expires at 12 s.
            ca_validity=12 * SECOND,
            cert_validity=5 * SECOND,
            renew_before=3 * SECOND,
            ca_handover=2 * SECOND,
            resync_interval=60 * SECOND,
        ),
    )
    server = WebhookServer(
        WebhookServerOptions(bind_address="127.0.0.1:0", certificate=certs),
        metrics=Metrics.isolated(),
    )
    server.add_conversion(Beacon, BeaconV1Beta1)
    await server.start()
    try:
        crd = crd_for(
            Beacon, BeaconV1Beta1, webhook=WebhookClientConfig(url=server.url("/convert"))
        )
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.CustomResourceDefinition, crd_name)
        await k8s.create(crd)

        async def converting() -> bool:
            got = await k8s.get(kinds.CustomResourceDefinition, crd_name)
            if not is_established(got) or ca_bundles(got) != [certs.ca_bundle]:
                return False
            await k8s.list(BeaconV1Beta1, namespace=namespace)
            return True

        await eventually(converting, timeout=60, description="CRD injected and converting")
        for i in range(OBJECTS):
            await k8s.create(
                {
                    "apiVersion": Beacon.declaration().gvk.api_version,
                    "kind": "Beacon",
                    "metadata": {"name": f"b{i}", "namespace": namespace},
                    "spec": {"frequencyHz": (i + 1) * 1000},
                }
            )
        first_ca = read_certificates(certs.ca_bundle)[0].fingerprint
        served: list[KeyPair] = [server.tls.certificate]
        bundle_sizes: set[int] = set()
        failures: list[str] = []
        reads = 0
        done = asyncio.Event()

        async def reader() -> None:
            nonlocal reads
            while not done.is_set():
                try:
                    listed = await k8s.list(BeaconV1Beta1, namespace=namespace)
                    frequencies = sorted(b.spec.frequency_khz for b in listed)
                    assert frequencies == list(range(1, OBJECTS + 1)), frequencies
                    one = await k8s.get(BeaconV1Beta1, "b0", namespace=namespace)
                    assert one.spec.frequency_khz == 1
                    reads += 2
                except Exception as exc:
                    failures.append(f"{time.monotonic():.1f} {type(exc).__name__}: {exc}")

        async def rotated_through_a_new_ca() -> bool:
            if server.tls.certificate != served[-1]:
                served.append(server.tls.certificate)
            cas = [c.fingerprint for c in read_certificates(certs.ca_bundle)]
            bundle_sizes.add(len(cas))
            if first_ca in cas or len(served) < 4:
                return False
            # The old CA has left the bundle: wait until the CRD says so too.
            got = await k8s.get(kinds.CustomResourceDefinition, crd_name)
            return ca_bundles(got) == [certs.ca_bundle]

        task = asyncio.create_task(reader())
        try:
            await eventually(
                rotated_through_a_new_ca,
                timeout=90,
                interval=0.2,
                description="serving renewals and a complete CA rotation",
            )
        finally:
            done.set()
            await task
        print(
            f"rotation: {reads} reads, {len(served)} serving certificates, {certs.rotations} stores"
        )
        assert failures == []
        assert reads >= 20
        assert bundle_sizes == {1, 2}  # the new CA sat beside the old one, then alone
        assert certs.rotations >= 4
        assert server.failure() is None
    finally:
        await server.stop(5.0)
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.CustomResourceDefinition, crd_name)
