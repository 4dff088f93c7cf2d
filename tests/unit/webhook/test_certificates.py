"""Self-managed webhook certificates: the renewal plan, the Secret, caBundle injection."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.client.errors import Conflict
from setpoint.testing import FakeClient
from setpoint.testing.waits import eventually
from setpoint.tls.certs import CertificateAuthority, issued_by, read_certificates
from setpoint.tls.pem import CertificateError, KeyPair
from setpoint.webhook.certificates import (
    CA_KEY_KEY,
    MANAGED_ANNOTATION,
    CertificateState,
    SelfManagedCertificates,
    SelfManagedCertificatesOptions,
    inject_ca_bundle,
    plan,
    service_hosts,
)
from tests._support.cert_targets import ca_bundles, crd_with_webhook, validating_configuration
from tests._support.stored import stored

DAY = dt.timedelta(days=1)
T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
HOSTS = service_hosts("webhook-service", "system")
OPTIONS = SelfManagedCertificatesOptions(hosts=HOSTS)


def cas_of(state: CertificateState) -> list[str]:
    return [info.fingerprint for info in read_certificates(state.ca_bundle)]


def serving_info(state: CertificateState) -> Any:
    return read_certificates(state.serving.cert_pem)[0]


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"hosts": ()}, "hosts=()"),
        ({"hosts": HOSTS, "renew_before": dt.timedelta(days=400)}, "shorter than cert_validity"),
        ({"hosts": HOSTS, "cert_validity": dt.timedelta(days=4000)}, "cannot outlive"),
        ({"hosts": HOSTS, "ca_validity": dt.timedelta(0)}, "ca_validity=0:00:00 must be a"),
        ({"hosts": HOSTS, "ca_handover": dt.timedelta(days=91)}, "ca_handover"),
        ({"hosts": HOSTS, "secret_namespace": ""}, "secret_namespace must not be empty"),
    ],
)
def test_options_refuse_settings_that_cannot_work(kwargs: dict[str, Any], fragment: str) -> None:
    """Each bad option is refused with a message naming it."""
    with pytest.raises(ValueError, match="SelfManagedCertificatesOptions") as info:
        SelfManagedCertificatesOptions(**kwargs)
    assert fragment in str(info.value)


def test_defaults_are_cert_controllers() -> None:
    """CA ten years, serving one year, renewed 90 days ahead."""
    assert OPTIONS.ca_validity == dt.timedelta(days=3650)
    assert OPTIONS.cert_validity == dt.timedelta(days=365)
    assert OPTIONS.renew_before == dt.timedelta(days=90)


# --------------------------------------------------------------------------- plan


def test_first_plan_makes_a_ca_and_a_serving_certificate_for_every_host() -> None:
    """From nothing: one CA in the bundle, a serving certificate it signed, for each host."""
    first = plan(None, OPTIONS, T0)
    assert first.changed
    state = first.state
    assert len(cas_of(state)) == 1
    info = serving_info(state)
    assert all(info.covers(h) for h in HOSTS)
    assert issued_by(state.serving.cert_pem, state.ca_bundle) is not None
    assert info.not_after == T0 + dt.timedelta(days=365)
    assert read_certificates(state.ca_bundle)[0].not_after == T0 + dt.timedelta(days=3650)
    assert first.next_check == T0 + dt.timedelta(days=365 - 90)


def test_a_current_state_is_left_alone() -> None:
    """Nothing is due: the plan changes nothing and says when to look again."""
    state = plan(None, OPTIONS, T0).state
    again = plan(state, OPTIONS, T0 + 100 * DAY)
    assert not again.changed
    assert again.state == state
    assert again.reasons == ()


def test_serving_certificate_is_renewed_ahead_of_expiry_with_the_same_ca() -> None:
    """90 days before expiry the serving certificate is re-issued; the caBundle is unchanged."""
    state = plan(None, OPTIONS, T0).state
    due = T0 + dt.timedelta(days=365 - 90)
    assert not plan(state, OPTIONS, due - dt.timedelta(seconds=1)).changed
    renewed = plan(state, OPTIONS, due)
    assert renewed.changed
    assert renewed.state.ca_bundle == state.ca_bundle
    assert renewed.state.serving != state.serving
    assert serving_info(renewed.state).not_after == due + dt.timedelta(days=365)
    assert any("serving certificate issued" in r for r in renewed.reasons)


def test_ca_renewal_hands_over_without_an_untrusted_moment() -> None:
    """A renewed CA joins the bundle first; serving switches to it only after the handover."""
    options = SelfManagedCertificatesOptions(hosts=HOSTS, ca_handover=dt.timedelta(minutes=5))
    state = plan(None, options, T0).state
    ca_due = T0 + dt.timedelta(days=3650 - 90)
    # The serving certificate was renewed along the way; it is current at ca_due - 1 day.
    before = plan(state, options, ca_due - 200 * DAY).state
    step1 = plan(before, options, ca_due)
    assert step1.changed
    old_ca, new_ca = (
        read_certificates(before.ca_bundle)[0],
        read_certificates(step1.state.ca_bundle)[0],
    )
    assert cas_of(step1.state) == [new_ca.fingerprint, old_ca.fingerprint]
    # Still served by the old CA, which the bundle still trusts.
    assert step1.state.serving == before.serving
    assert issued_by(step1.state.serving.cert_pem, step1.state.ca_bundle) == old_ca
    assert step1.next_check == ca_due + dt.timedelta(minutes=5)
    # During the handover nothing changes ...
    assert not plan(step1.state, options, ca_due + dt.timedelta(minutes=4)).changed
    # ... after it, serving moves to the new CA; the old CA stays trusted until it expires.
    step2 = plan(step1.state, options, ca_due + dt.timedelta(minutes=5))
    assert step2.changed
    assert issued_by(step2.state.serving.cert_pem, step2.state.ca_bundle) == new_ca
    assert cas_of(step2.state) == [new_ca.fingerprint, old_ca.fingerprint]
    # Once the old CA has expired, it leaves the bundle.
    later = plan(step2.state, options, old_ca.not_after + dt.timedelta(seconds=1))
    assert cas_of(later.state) == [new_ca.fingerprint]


def test_an_unusable_serving_certificate_is_replaced_at_once() -> None:
    """A serving certificate missing a host, expired or foreign is re-issued immediately."""
    state = plan(None, OPTIONS, T0).state
    more_hosts = SelfManagedCertificatesOptions(hosts=(*HOSTS, "127.0.0.1"))
    fixed = plan(state, more_hosts, T0 + DAY)
    assert fixed.changed and serving_info(fixed.state).covers("127.0.0.1")
    assert any("does not cover 127.0.0.1" in r for r in fixed.reasons)

    foreign = CertificateAuthority("someone-else", now=T0).serving_cert("x", HOSTS, now=T0)
    replaced = plan(CertificateState(state.ca_bundle, state.ca_key, foreign), OPTIONS, T0 + DAY)
    assert any("no CA in the bundle signed it" in r for r in replaced.reasons)
    assert issued_by(replaced.state.serving.cert_pem, replaced.state.ca_bundle) is not None

    expired = plan(state, OPTIONS, T0 + 400 * DAY)
    assert serving_info(expired.state).valid_at(T0 + 400 * DAY)


def test_a_ca_key_that_does_not_match_starts_afresh() -> None:
    """A damaged state (CA key of another CA) gets a new CA and certificate, with the reason."""
    state = plan(None, OPTIONS, T0).state
    damaged = CertificateState(state.ca_bundle, CertificateAuthority().key_pem, state.serving)
    fresh = plan(damaged, OPTIONS, T0)
    assert fresh.changed
    assert cas_of(fresh.state) != cas_of(state)
    assert any("stored CA is unusable" in r for r in fresh.reasons)


def test_secret_data_round_trip_and_errors() -> None:
    """The state survives the Secret's base64 data; a missing key is named."""
    state = plan(None, OPTIONS, T0).state
    assert CertificateState.from_secret_data(state.to_secret_data()) == state
    data = state.to_secret_data()
    del data[CA_KEY_KEY]
    with pytest.raises(CertificateError, match=r"has no 'ca\.key'"):
        CertificateState.from_secret_data(data)


# --------------------------------------------------------------------------- injection


GROUP = "test.setpoint.dev"
CRD_NAME = f"probes.{GROUP}"
HOOKS_NAME = "probe-validating"


def crd(strategy: str = "Webhook") -> dict[str, Any]:
    return crd_with_webhook(GROUP, strategy=strategy)


def vwc() -> dict[str, Any]:
    return validating_configuration(HOOKS_NAME, GROUP, hooks=2)


def test_inject_ca_bundle_writes_every_client_config() -> None:
    """Every webhook of a configuration, and a CRD's conversion webhook, get the caBundle."""
    bundle = CertificateAuthority().cert_pem
    encoded = base64.b64encode(bundle).decode()
    hooks = vwc()
    assert inject_ca_bundle(hooks, bundle)
    assert [w["clientConfig"]["caBundle"] for w in hooks["webhooks"]] == [encoded, encoded]
    assert not inject_ca_bundle(hooks, bundle)
    definition = crd()
    assert inject_ca_bundle(definition, bundle)
    assert definition["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] == encoded
    assert not inject_ca_bundle(crd("None"), bundle)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def source(
    client: FakeClient, clock: Clock | None = None, **kwargs: Any
) -> SelfManagedCertificates:
    options = SelfManagedCertificatesOptions(
        hosts=("127.0.0.1",),
        secret_namespace="system",
        crds=(CRD_NAME,),
        validating_webhook_configurations=(HOOKS_NAME,),
        **kwargs,
    )
    return SelfManagedCertificates(client, options, now=clock or Clock())


def ns(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def test_load_creates_the_secret_and_injects_the_ca() -> None:
    """load() makes the Secret (kubernetes.io/tls, marked as ours) and fills every caBundle."""
    client = FakeClient(objects=[ns("system"), crd(), vwc()])
    certs = source(client)
    pair = await certs.load()
    secret = stored(client, kinds.Secret, "webhook-server-cert", namespace="system")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["annotations"][MANAGED_ANNOTATION] == "true"
    state = CertificateState.from_secret_data(secret["data"])
    assert state.serving == pair
    assert ca_bundles(stored(client, kinds.CustomResourceDefinition, CRD_NAME)) == [state.ca_bundle]
    assert (
        ca_bundles(stored(client, kinds.ValidatingWebhookConfiguration, HOOKS_NAME))
        == [state.ca_bundle] * 2
    )
    assert set(certs.injection.values()) == {"injected"}
    assert certs.ready()


async def test_replicas_starting_together_share_one_certificate() -> None:
    """Five replicas load at once: one Secret, one CA, the same pair everywhere."""
    client = FakeClient(objects=[ns("system"), crd(), vwc()])
    replicas = [source(client) for _ in range(5)]
    pairs = await asyncio.gather(*(r.load() for r in replicas))
    assert len({p.cert_pem for p in pairs}) == 1
    assert sum(r.rotations for r in replicas) == 1
    bundle = {r.ca_bundle for r in replicas}
    assert len(bundle) == 1


async def test_a_renewal_race_is_won_by_one_replica() -> None:
    """Two replicas due for renewal at once: one writes, the other adopts what it wrote."""
    client = FakeClient(objects=[ns("system")])
    clock = Clock()
    a, b = source(client, clock), source(client, clock)
    await a.load()
    await b.load()
    clock.now = T0 + dt.timedelta(days=300)
    await asyncio.gather(a.sync(), b.sync())
    assert a.rotations + b.rotations == 2  # one creation, one renewal
    assert a.state == b.state
    assert a.state is not None
    assert serving_info(a.state).not_after == clock.now + dt.timedelta(days=365)


async def test_a_secret_someone_else_made_is_refused_not_overwritten() -> None:
    """A cert-manager-style Secret (tls.crt, no ca.key) is left alone, with a clear error."""
    pair = CertificateAuthority().serving_cert("x", ("127.0.0.1",))
    foreign = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "webhook-server-cert", "namespace": "system"},
        "data": {
            "tls.crt": base64.b64encode(pair.cert_pem).decode(),
            "tls.key": base64.b64encode(pair.key_pem).decode(),
        },
    }
    client = FakeClient(objects=[ns("system"), foreign])
    with pytest.raises(CertificateError, match=r"did not make.*CertificateDirectory"):
        await source(client).load()
    assert (
        stored(client, kinds.Secret, "webhook-server-cert", namespace="system")["data"]
        == foreign["data"]
    )


async def test_an_empty_secret_made_in_advance_is_adopted() -> None:
    """An empty Opaque Secret (made by the manifests for RBAC by name) is filled in."""
    empty = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "webhook-server-cert", "namespace": "system"},
    }
    client = FakeClient(objects=[ns("system"), empty])
    pair = await source(client).load()
    secret = stored(client, kinds.Secret, "webhook-server-cert", namespace="system")
    assert CertificateState.from_secret_data(secret["data"]).serving == pair


async def test_missing_targets_and_crds_without_webhook_conversion_are_reported() -> None:
    """A target that does not exist yet is "not found"; a CRD converting with None is skipped."""
    client = FakeClient(objects=[ns("system"), crd("None")])
    certs = source(client)
    await certs.load()
    assert sorted(certs.injection.values()) == ["no webhook conversion", "not found"]


async def test_watch_reinjects_an_overwritten_ca_bundle_and_serves_a_renewal() -> None:
    """The watch loop writes a caBundle back after someone clears it, and hands renewals on."""
    client = FakeClient(objects=[ns("system"), crd(), vwc()])
    clock = Clock()
    certs = source(client, clock, resync_interval=dt.timedelta(seconds=30))
    pair = await certs.load()
    served: list[KeyPair] = []
    task = asyncio.create_task(certs.watch(served.append))
    try:
        hooks = stored(client, kinds.ValidatingWebhookConfiguration, HOOKS_NAME)
        for hook in hooks["webhooks"]:
            hook["clientConfig"].pop("caBundle")
        await client.update(hooks)

        def reinjected() -> bool:
            obj = stored(client, kinds.ValidatingWebhookConfiguration, HOOKS_NAME)
            return ca_bundles(obj) == [certs.ca_bundle] * 2

        await eventually(reinjected, timeout=5, description="caBundle re-injected")

        # Another replica renews the Secret: this one serves the new pair.
        clock.now = T0 + dt.timedelta(days=300)
        other = source(client, clock)
        await other.sync()
        assert other.state is not None and other.state.serving != pair

        await eventually(lambda: served, timeout=5, description="renewal handed on")
        assert served == [other.state.serving]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_writer_fighting_over_the_secret_is_reported() -> None:
    """When every update conflicts, load() gives up with a Conflict naming the Secret."""
    client = FakeClient(objects=[ns("system")])
    clock = Clock()
    certs = source(client, clock)
    await certs.load()
    clock.now = T0 + dt.timedelta(days=300)
    client.faults.fail_next("update", kind=kinds.Secret, error=Conflict, times=None)
    with pytest.raises(Conflict, match="system/webhook-server-cert kept changing"):
        await certs.sync()


async def test_readiness_needs_a_valid_serving_certificate() -> None:
    """Not ready before load, ready after, not ready once the certificate has expired."""
    client = FakeClient(objects=[ns("system")])
    clock = Clock()
    certs = source(client, clock)
    with pytest.raises(CertificateError, match="no serving certificate yet"):
        certs.ready()
    await certs.load()
    assert certs.ready()
    clock.now = T0 + dt.timedelta(days=400)
    with pytest.raises(CertificateError, match="is not valid now"):
        certs.ready()
