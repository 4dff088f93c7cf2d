"""``setpoint generate webhook``: webhook configurations from validators and defaulters."""

from __future__ import annotations

import argparse
import base64
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import setpoint as sp
from setpoint.api.admission import admission_spec_of
from setpoint.cli.generate import register
from setpoint.crd import WebhookClientConfig, find_admission_webhooks, webhook_configurations
from setpoint.tls.certs import CertificateAuthority
from tests._support import vessels
from tests._support.vessels import Vessel, VesselDefaulter, VesselValidator

SPECS = [admission_spec_of(VesselValidator), admission_spec_of(VesselDefaulter)]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="setpoint")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_configurations_follow_the_declarations() -> None:
    """One configuration per kind of webhook; rules, policies and paths as declared."""
    mutating, validating = webhook_configurations(SPECS)
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert mutating["metadata"]["name"] == "mutating-webhook-configuration"
    assert validating["metadata"]["name"] == "validating-webhook-configuration"
    (hook,) = validating["webhooks"]
    assert hook["name"] == "vvessel-v1.admission.test.setpoint.dev"
    assert hook["clientConfig"] == {
        "service": {
            "name": "webhook-service",
            "namespace": "system",
            "path": "/validate-admission-test-setpoint-dev-v1-vessel",
            "port": 443,
        }
    }
    assert hook["rules"] == [
        {
            "apiGroups": ["admission.test.setpoint.dev"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["vessels"],
            "scope": "Namespaced",
        }
    ]
    assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
        "Fail",
        "None",
        10,
    )
    assert hook["admissionReviewVersions"] == ["v1"]
    assert "reinvocationPolicy" not in hook
    assert mutating["webhooks"][0]["reinvocationPolicy"] == "Never"


def test_a_url_client_config_appends_each_webhooks_path() -> None:
    """--webhook-url gives scheme, host and port; the path is the webhook's; caBundle as given."""
    ca = CertificateAuthority().cert_pem
    config = WebhookClientConfig(url="https://127.0.0.1:9443/convert", ca_bundle=ca)
    (validating,) = webhook_configurations(SPECS[:1], client_config=config)
    client = validating["webhooks"][0]["clientConfig"]
    assert client == {
        "url": "https://127.0.0.1:9443/validate-admission-test-setpoint-dev-v1-vessel",
        "caBundle": base64.b64encode(ca).decode(),
    }


def test_selectors_and_policies_are_written() -> None:
    """Options beyond the defaults reach the configuration."""

    class Strict(sp.CustomValidator[Vessel]):
        webhook_options = sp.AdmissionOptions(
            name="strict.vessels.example.com",
            failure_policy="Ignore",
            timeout_seconds=3,
            namespace_selector={"matchLabels": {"guarded": "yes"}},
            object_selector={"matchExpressions": [{"key": "x", "operator": "Exists"}]},
            operations=("DELETE",),
            path="/strict",
        )

        def validate_delete(self, obj: Vessel) -> sp.Warnings:
            return None

    (validating,) = webhook_configurations([admission_spec_of(Strict)])
    (hook,) = validating["webhooks"]
    assert hook["name"] == "strict.vessels.example.com"
    assert hook["clientConfig"]["service"]["path"] == "/strict"
    assert hook["rules"][0]["operations"] == ["DELETE"]
    assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Ignore", 3)
    assert hook["namespaceSelector"] == {"matchLabels": {"guarded": "yes"}}
    assert hook["objectSelector"]["matchExpressions"][0]["key"] == "x"


def test_find_admission_webhooks_refuses_two_with_one_name() -> None:
    """Two classes declaring the same webhook name are named in the error."""
    module = type(sys)("twins")
    same = sp.AdmissionOptions(name="same.vessels.example.com")

    class First(sp.CustomValidator[Vessel]):
        webhook_options = same

        def validate_create(self, obj: Vessel) -> sp.Warnings:
            return None

    class Second(First):
        webhook_options = sp.AdmissionOptions(name="same.vessels.example.com", path="/other")

    for cls in (First, Second):
        cls.__module__ = module.__name__
        setattr(module, cls.__name__, cls)
    with pytest.raises(ValueError, match=r"both declare the webhook name 'same\.vessels"):
        find_admission_webhooks([module])


@pytest.fixture
def isolated_imports() -> Iterator[None]:
    """Undo sys.path and sys.modules changes made by importing user code."""
    path = list(sys.path)
    modules = set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        del sys.modules[name]


def test_generate_webhook_writes_the_manifest_and_checks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command writes config/webhook/manifests.yaml; --check passes, then catches a change."""
    out = tmp_path / "config"
    assert run(["generate", "webhook", vessels.__name__, "--output-dir", str(out)]) == 0
    path = out / "webhook" / "manifests.yaml"
    documents = list(yaml.safe_load_all(path.read_text()))
    assert [d["kind"] for d in documents] == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    assert run(["generate", "webhook", vessels.__name__, "--output-dir", str(out), "--check"]) == 0
    path.write_text(path.read_text().replace("timeoutSeconds: 10", "timeoutSeconds: 5"))
    capsys.readouterr()
    assert run(["generate", "webhook", vessels.__name__, "--output-dir", str(out), "--check"]) == 1
    assert "OUT OF DATE" in capsys.readouterr().out


def test_generate_webhook_without_webhooks_says_so(
    tmp_path: Path, isolated_imports: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A module without validators or defaulters is an error naming it."""
    name = f"empty_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("X = 1\n"))
    assert run(["generate", "webhook", str(tmp_path / f"{name}.py")]) == 1
    assert "no sp.CustomValidator or sp.CustomDefaulter classes found" in capsys.readouterr().err
    assert run(["generate", "webhook", vessels.__name__, "--webhook-ca-file", "x.pem"]) == 1
    assert "--webhook-ca-file goes with --webhook-url" in capsys.readouterr().err
