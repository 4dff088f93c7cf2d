"""Kubeconfigs from outside the operator's own configuration, and hostile kubeconfig input.

Issue 18, item 5 (unbounded reprs of wrong values), item 11 (a YAML date in an exec
extension) and "untrusted kubeconfigs" (a restricted loading mode, the default for
kubeconfigs kept in the cluster).
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.api import kinds
from setpoint.client import load_kubeconfig
from setpoint.client.config import ConfigError
from setpoint.client.kubeconfig import (
    MAX_KUBECONFIG_DEPTH,
    kubeconfig_from_secret,
    load_kubeconfig_data,
)
from setpoint.testing import FakeClient

SERVER = "https://127.0.0.1:6443"

LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
clusters: [{name: c, cluster: {server: *h}}]
contexts: [{name: x, context: {cluster: c}}]
current-context: x
"""


def doc(user: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None) -> str:
    return yaml.safe_dump(
        {
            "clusters": [{"name": "c", "cluster": cluster or {"server": SERVER}}],
            "users": [{"name": "u", "user": user or {"token": "t0k"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )


def error(text: str, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load_kubeconfig_data(text, **kwargs)
    assert info.value.__cause__ is None
    return str(info.value)


# --- hostile YAML -------------------------------------------------------------------------


def test_billion_laughs_fails_fast_without_expanding(tmp_path: Path) -> None:
    """A 500-byte document of nested aliases is refused in well under a second (was 59 s)."""
    assert len(LAUGHS) < 600
    path = tmp_path / "config"
    path.write_text(LAUGHS)
    started = time.process_time()
    with pytest.raises(ConfigError) as info:
        load_kubeconfig(path)
    assert time.process_time() - started < 2
    assert "values when its YAML aliases are expanded" in str(info.value)
    assert len(str(info.value)) < 500


def test_self_referential_alias_is_refused() -> None:
    """An alias that contains itself stops at the depth limit instead of recursing away."""
    text = "clusters: &loop [{name: c, cluster: {server: *loop}}]\n"
    msg = error(text)
    assert f"more than {MAX_KUBECONFIG_DEPTH} levels deep" in msg


def test_deep_nesting_is_refused() -> None:
    """Deeply nested flow collections: a ConfigError, never a RecursionError."""
    for depth in (100, 5000):
        msg = error("a: " + "[" * depth + "]" * depth + "\n")
        assert "levels deep" in msg or "nesting depth" in msg


@pytest.mark.parametrize(
    ("user", "secret"),
    [
        ({"token": 12345678901234567890123}, "12345678901234567890123"),
        ({"token": ["SECRET-IN-A-LIST"]}, "SECRET-IN-A-LIST"),
        ({"token": {"value": "SECRET-IN-A-MAP"}}, "SECRET-IN-A-MAP"),
        ({"client-key-data": ["PRIVATE-KEY-DATA"]}, "PRIVATE-KEY-DATA"),
        (
            {
                "exec": {
                    "command": "x",
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "interactiveMode": "Never",
                    "env": [{"name": "K", "value": ["ENV-SECRET"]}],
                }
            },
            "ENV-SECRET",
        ),
        ({"as-groups": [["SECRET-GROUP"]]}, "SECRET-GROUP"),
    ],
)
def test_wrong_types_are_named_not_echoed(user: dict[str, Any], secret: str) -> None:
    """A value of the wrong type is reported by its type; the value never appears."""
    msg = error(doc(user), restricted=False)
    assert "must be" in msg or "64-bit" in msg
    assert secret not in msg


def test_explicit_yaml_types_that_are_not_json_are_refused() -> None:
    """``!!binary`` and ``!!set`` values: a ConfigError naming the field, not a TypeError later."""
    text = doc(cluster={"server": SERVER}).replace(
        f"server: {SERVER}",
        f"server: {SERVER}\n    extensions: [{{name: e, extension: !!binary aGk=}}]",
    )
    msg = error(text)
    assert "clusters[0].cluster.extensions[0].extension" in msg
    assert "bytes" in msg


def test_date_in_exec_extension_stays_a_string(tmp_path: Path) -> None:
    """A YAML date in the exec extension reaches the plugin as its text (client-go's behaviour)."""
    text = (
        doc(
            user={
                "exec": {
                    "command": "plugin",
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "interactiveMode": "Never",
                    "provideClusterInfo": True,
                }
            },
            cluster={
                "server": SERVER,
                "extensions": [
                    {"name": "client.authentication.k8s.io/exec", "extension": {"since": "DATE"}}
                ],
            },
        )
        .replace("'DATE'", "2024-01-31")
        .replace("DATE", "2024-01-31")
    )
    assert "since: 2024-01-31" in text  # a plain YAML date, not a quoted string
    path = tmp_path / "config"
    path.write_text(text)
    config = load_kubeconfig(path)
    assert config.exec is not None
    assert config.exec.cluster_config == {"since": "2024-01-31"}


# --- restricted mode ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "cluster", "field", "words"),
    [
        (
            {
                "exec": {
                    "command": "sh",
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "interactiveMode": "Never",
                }
            },
            None,
            "users[name=u].user.exec",
            "runs a credential plugin",
        ),
        (
            {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"},
            None,
            "users[name=u].user.tokenFile",
            "inline as token",
        ),
        (
            {"client-certificate": "/etc/cert.pem", "client-key": "/etc/key.pem"},
            None,
            "users[name=u].user.client-certificate",
            "inline as client-certificate-data",
        ),
        (
            None,
            {"server": SERVER, "certificate-authority": "/etc/ssl/private/ca.pem"},
            "clusters[name=c].cluster.certificate-authority",
            "inline as certificate-authority-data",
        ),
    ],
)
def test_restricted_mode_refuses_exec_and_file_references(
    user: dict[str, Any] | None, cluster: dict[str, Any] | None, field: str, words: str
) -> None:
    """Content from outside (the default for load_kubeconfig_data): no commands, no files."""
    msg = error(doc(user, cluster), source="Secret ns/kc, key value")
    assert msg.startswith(f"Secret ns/kc, key value: {field}:")
    assert "restricted kubeconfig may not use" in msg
    assert words in msg


def test_restricted_mode_accepts_inline_credentials() -> None:
    """Inline token and data fields load as usual in restricted mode."""
    config = load_kubeconfig_data(doc({"token": "abc", "as": "alice"}))
    assert config.server == SERVER
    assert config.token == "abc"
    assert config.impersonate_user == "alice"
    assert config.exec is None
    assert config.token_file is None


def test_unrestricted_data_may_reference_files(tmp_path: Path) -> None:
    """restricted=False is an explicit choice, and then file references work."""
    token = tmp_path / "token"
    token.write_text("from-file")
    config = load_kubeconfig_data(doc({"tokenFile": str(token)}), restricted=False)
    assert config.token_file == str(token)


def secret(data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "prod-kubeconfig", "namespace": "fleet"},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


async def test_kubeconfig_from_secret_is_restricted_by_default() -> None:
    """A kubeconfig kept in a Secret loads restricted: its exec plugin is refused."""
    exec_user = {
        "exec": {
            "command": "sh",
            "apiVersion": "client.authentication.k8s.io/v1",
            "interactiveMode": "Never",
        }
    }
    client = FakeClient(
        objects=[
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleet"}},
            secret({"value": doc(exec_user).encode(), "safe": doc().encode()}),
        ]
    )
    with pytest.raises(ConfigError) as info:
        await kubeconfig_from_secret(client, "prod-kubeconfig", namespace="fleet")
    assert "Secret fleet/prod-kubeconfig, key value" in str(info.value)
    assert "restricted kubeconfig" in str(info.value)
    config = await kubeconfig_from_secret(client, "prod-kubeconfig", namespace="fleet", key="safe")
    assert config.token == "t0k"
    with pytest.raises(ConfigError, match="has no data key 'missing' \\(it has: safe, value\\)"):
        await kubeconfig_from_secret(client, "prod-kubeconfig", namespace="fleet", key="missing")
    assert kinds.Secret.kind == "Secret"


def test_not_utf8_data_is_a_config_error() -> None:
    """Bytes that are not UTF-8: a ConfigError naming the source."""
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_kubeconfig_data(b"\xff\xfe\x00", source="upload")
