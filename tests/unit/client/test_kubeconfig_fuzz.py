"""The kubeconfig loader on random input: a ClientConfig or a ConfigError, nothing else.

Random kubeconfig-shaped documents (every field holding a value of any YAML type) and
random YAML-ish text built from the pieces that break parsers (anchors, aliases, explicit
tags, deep flow collections, dates, huge numbers). SETPOINT_FUZZ_EXAMPLES sets the number
of examples (small in CI; ``make fuzz`` runs thousands).
"""

from __future__ import annotations

import base64
import os
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setpoint.client.config import ClientConfig, ConfigError
from setpoint.client.kubeconfig import load_kubeconfig_data

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "300"))

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "https://127.0.0.1:6443",
            "http://[::1]:8080/prefix/",
            "https://user:pw@host",
            "ftp://x",
            "socks5://proxy:1080",
            "client.authentication.k8s.io/v1",
            "client.authentication.k8s.io/v1beta1",
            "client.authentication.k8s.io/v1alpha1",
            "Never",
            "IfAvailable",
            "Always",
            base64.b64encode(
                b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
            ).decode(),
            "not base64!",
            "c",
            "u",
            "x",
            "tok\nen",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)

CLUSTER_KEYS = [
    "server",
    "certificate-authority-data",
    "certificate-authority",
    "insecure-skip-tls-verify",
    "tls-server-name",
    "proxy-url",
    "extensions",
]
USER_KEYS = [
    "token",
    "tokenFile",
    "client-certificate-data",
    "client-key-data",
    "client-certificate",
    "as",
    "as-groups",
    "exec",
    "auth-provider",
    "username",
]
EXEC_KEYS = ["command", "args", "env", "apiVersion", "interactiveMode", "provideClusterInfo"]


def section(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys), values, max_size=5)


user = st.one_of(
    section(USER_KEYS),
    st.builds(lambda u, e: {**u, "exec": e}, section(USER_KEYS), section(EXEC_KEYS)),
)


@st.composite
def kubeconfigs(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "clusters": draw(
            st.one_of(
                values,
                st.lists(
                    st.fixed_dictionaries(
                        {"name": st.sampled_from(["c", "d"]), "cluster": section(CLUSTER_KEYS)}
                    ),
                    max_size=2,
                ),
            )
        ),
        "users": draw(
            st.one_of(
                values,
                st.lists(
                    st.fixed_dictionaries({"name": st.sampled_from(["u", 1]), "user": user}),
                    max_size=2,
                ),
            )
        ),
        "contexts": draw(
            st.one_of(
                values,
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "name": st.just("x"),
                            "context": section(["cluster", "user", "namespace"])
                            | st.just({"cluster": "c", "user": "u"}),
                        }
                    ),
                    max_size=2,
                ),
            )
        ),
        "current-context": draw(st.sampled_from(["x", "y", None, 3])),
    }


def load(text: str | bytes, *, restricted: bool = True) -> None:
    try:
        config = load_kubeconfig_data(text, restricted=restricted)
    except ConfigError as exc:
        assert exc.__cause__ is None  # no chained library traceback
        return
    assert isinstance(config, ClientConfig)


# Half the examples: each one builds and dumps a whole document (the slowest of the fuzz tests).
@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kubeconfigs())
def test_random_kubeconfig_documents(doc: dict[str, Any]) -> None:
    """Any kubeconfig-shaped document loads or raises ConfigError, restricted or not."""
    text = yaml.safe_dump(doc)
    load(text)
    load(text, restricted=False)


PIECES = [
    "clusters:",
    "users:",
    "contexts:",
    "current-context: x",
    "- name: c",
    "  cluster:",
    "    server: https://h",
    "    extensions:",
    "user: {token: t}",
    "context: {cluster: c, user: u}",
    "&a",
    "*a",
    "&b [*a, *a, *a]",
    "[",
    "]",
    "{",
    "}",
    ":",
    ",",
    "- ",
    "\n",
    "  ",
    "!!binary aGk=",
    "!!set {a, b}",
    "!!timestamp 2024-01-01",
    "!!python/object:os.system",
    "!!omap [a: 1]",
    "2024-01-31",
    "~",
    "0x1F",
    "1e999",
    "9" * 40,
    "'quoted'",
    '"\\u0000"',
    "? [a]",
    "%YAML 1.1\n---",
    "\t",
    "\x00",
    "\ufeff",
]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=40).map(" ".join))
def test_random_yaml_text(text: str) -> None:
    """Any text (anchors, tags, dates, junk) loads or raises ConfigError."""
    load(text)
    load(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=EXAMPLES // 3, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    """Arbitrary bytes load or raise ConfigError."""
    load(data)
