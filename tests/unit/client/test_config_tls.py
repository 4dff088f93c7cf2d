"""TLS material: real certificates (made with ``cryptography``), real handshakes.

Also in-cluster config and ``load_config``, which need a real CA bundle.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import os
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from setpoint.client import config as config_module
from setpoint.client import load_config, load_kubeconfig
from setpoint.client.config import (
    EXEC_API_V1,
    ClientConfig,
    ConfigError,
    ExecConfig,
    load_incluster_config,
)
from setpoint.client.credentials import credentials_for
from setpoint.tls.certs import CertificateAuthority

SERVER_NAME = "kubernetes.default.svc"


@dataclass(frozen=True)
class Pair:
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class Pki:
    ca: bytes
    other_ca: bytes
    server: Pair
    client: Pair
    stranger_key: bytes
    encrypted_client_key: bytes


def _encrypted(key_pem: bytes, password: bytes) -> bytes:
    """The same private key, encrypted with ``password`` (as a kubeconfig may carry it)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password),
    )


@pytest.fixture(scope="module")
def pki() -> Pki:
    """Two CAs, a serving and a client certificate, made by the library's own CA code."""
    ca = CertificateAuthority("test-ca")
    # Deliberately not 127.0.0.1: connecting by IP then needs tls_server_name.
    server = ca.serving_cert("apiserver", (SERVER_NAME,))
    client = ca.client_cert("alice", ("devs",))
    return Pki(
        ca=ca.cert_pem,
        other_ca=CertificateAuthority("other-ca").cert_pem,
        server=Pair(server.cert_pem, server.key_pem),
        client=Pair(client.cert_pem, client.key_pem),
        stranger_key=CertificateAuthority("stranger").key_pem,
        encrypted_client_key=_encrypted(client.key_pem, b"hunter2"),
    )


@dataclass
class TlsServer:
    port: int
    peers: list[dict[str, Any] | None]


@pytest.fixture
async def tls_server(pki: Pki, tmp_path: Path) -> AsyncIterator[TlsServer]:
    """A TLS server on 127.0.0.1 that asks for (but does not require) a client cert."""
    (tmp_path / "srv.crt").write_bytes(pki.server.cert)
    (tmp_path / "srv.key").write_bytes(pki.server.key)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    ctx.load_verify_locations(cadata=pki.ca.decode())
    ctx.verify_mode = ssl.CERT_OPTIONAL
    peers: list[dict[str, Any] | None] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peercert"))
        writer.write(b"hello\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        yield TlsServer(port, peers)
    finally:
        server.close()
        await server.wait_closed()


async def handshake(cfg: ClientConfig, port: int, ctx: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(
            "127.0.0.1",
            port,
            ssl=ctx or cfg.ssl_context(),
            server_hostname=cfg.tls_server_name or "127.0.0.1",
        ),
        timeout=10,
    )
    try:
        return await asyncio.wait_for(reader.readline(), timeout=10)
    finally:
        writer.close()


def peer_common_name(peer: dict[str, Any] | None) -> str | None:
    if not peer:
        return None
    for rdn in peer["subject"]:
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(config_module, "SERVICE_ACCOUNT_DIR", str(tmp_path / "no-sa"))
    return home


# --- ssl_context -------------------------------------------------------------------


def test_ssl_context_verifies_by_default(pki: Pki) -> None:
    ctx = ClientConfig(server="https://h", ca_data=pki.ca).ssl_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "test-ca"),),)]


def test_ssl_context_without_ca_uses_system_store() -> None:
    ctx = ClientConfig(server="https://h").ssl_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname


def test_ssl_context_insecure() -> None:
    ctx = ClientConfig(server="https://h", insecure_skip_tls_verify=True).ssl_context()
    assert ctx.verify_mode == ssl.CERT_NONE
    assert not ctx.check_hostname


async def test_handshake_with_server_name_override(pki: Pki, tls_server: TlsServer) -> None:
    cfg = ClientConfig(
        server=f"https://127.0.0.1:{tls_server.port}", ca_data=pki.ca, tls_server_name=SERVER_NAME
    )
    assert await handshake(cfg, tls_server.port) == b"hello\n"
    assert tls_server.peers == [None]  # no client certificate configured


async def test_handshake_fails_without_server_name_override(
    pki: Pki, tls_server: TlsServer
) -> None:
    cfg = ClientConfig(server=f"https://127.0.0.1:{tls_server.port}", ca_data=pki.ca)
    with pytest.raises(ssl.SSLCertVerificationError, match=r"127\.0\.0\.1"):
        await handshake(cfg, tls_server.port)


async def test_handshake_fails_with_wrong_ca(pki: Pki, tls_server: TlsServer) -> None:
    cfg = ClientConfig(
        server="https://127.0.0.1", ca_data=pki.other_ca, tls_server_name=SERVER_NAME
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        await handshake(cfg, tls_server.port)


async def test_handshake_insecure_accepts_unknown_server(tls_server: TlsServer) -> None:
    cfg = ClientConfig(server="https://127.0.0.1", insecure_skip_tls_verify=True)
    assert await handshake(cfg, tls_server.port) == b"hello\n"


async def test_client_certificate_is_presented(pki: Pki, tls_server: TlsServer) -> None:
    cfg = ClientConfig(
        server="https://127.0.0.1",
        ca_data=pki.ca,
        tls_server_name=SERVER_NAME,
        client_cert_data=pki.client.cert,
        client_key_data=pki.client.key,
    )
    assert await handshake(cfg, tls_server.port) == b"hello\n"
    assert [peer_common_name(p) for p in tls_server.peers] == ["alice"]


def test_client_cert_argument_replaces_configured_pair(pki: Pki) -> None:
    cfg = ClientConfig(
        server="https://h",
        ca_data=pki.ca,
        client_cert_data=pki.client.cert,
        client_key_data=pki.stranger_key,  # would not load
    )
    with pytest.raises(ConfigError):
        cfg.ssl_context()
    assert cfg.ssl_context(client_cert=(pki.client.cert, pki.client.key)) is not None


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: {"ca_data": b"not pem"}, "certificate authority"),
        (lambda p: {"ca_data": p.ca.replace(b"M", b"*", 3)}, "certificate authority"),
        (
            lambda p: {"client_cert_data": p.client.cert, "client_key_data": p.stranger_key},
            "match each other",
        ),
        (
            lambda p: {"client_cert_data": p.client.cert, "client_key_data": b"garbage"},
            "client certificate",
        ),
        (
            lambda p: {
                "client_cert_data": p.client.cert,
                "client_key_data": p.encrypted_client_key,
            },
            "encrypted",
        ),
    ],
)
def test_ssl_context_errors_are_config_errors(
    pki: Pki, make: Callable[[Pki], dict[str, Any]], words: str
) -> None:
    cfg = ClientConfig(server="https://h", source="kubeconfig k (context dev)", **make(pki))
    with pytest.raises(ConfigError) as info:
        cfg.ssl_context()
    assert words in str(info.value)
    assert "kubeconfig k (context dev)" in str(info.value)
    assert info.value.__cause__ is None


def test_client_key_never_written_to_disk_with_memfd(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    original = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: str, keyfile: str | None = None, **kw: Any) -> None:
        seen.extend([certfile, str(keyfile)])
        original(self, certfile, keyfile, **kw)

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cfg = ClientConfig(
        server="https://h", client_cert_data=pki.client.cert, client_key_data=pki.client.key
    )
    cfg.ssl_context()
    assert len(seen) == 2
    assert all(p.startswith("/proc/self/fd/") for p in seen)
    assert list(scratch.iterdir()) == []


def test_client_key_temp_file_fallback_is_private_and_removed(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: list[int] = []
    original = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: str, keyfile: str | None = None, **kw: Any) -> None:
        modes.extend(os.stat(p).st_mode & 0o777 for p in (certfile, str(keyfile)))
        modes.append(os.stat(os.path.dirname(certfile)).st_mode & 0o777)
        original(self, certfile, keyfile, **kw)

    monkeypatch.delattr(os, "memfd_create")  # as on macOS
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cfg = ClientConfig(
        server="https://h", client_cert_data=pki.client.cert, client_key_data=pki.client.key
    )
    cfg.ssl_context()
    assert modes == [0o600, 0o600, 0o700]
    assert list(scratch.iterdir()) == []


# --- kubeconfig with certificates --------------------------------------------------------


def kubeconfig_doc(cluster: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **cluster}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": user}],
        "current-context": "dev",
    }


def write_doc(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_kubeconfig_data_fields(pki: Pki, tmp_path: Path) -> None:
    doc = kubeconfig_doc(
        {"certificate-authority-data": b64(pki.ca), "tls-server-name": SERVER_NAME},
        {
            "client-certificate-data": b64(pki.client.cert),
            # Wrapped base64, as people paste it: newlines are ignored.
            "client-key-data": "\n".join(
                b64(pki.client.key)[i : i + 64] for i in range(0, len(b64(pki.client.key)), 64)
            ),
        },
    )
    cfg = load_kubeconfig(write_doc(tmp_path / "kc", doc))
    assert (cfg.ca_data, cfg.client_cert_data, cfg.client_key_data) == (
        pki.ca,
        pki.client.cert,
        pki.client.key,
    )


def test_kubeconfig_file_fields_relative_to_kubeconfig(pki: Pki, tmp_path: Path) -> None:
    certs = tmp_path / "kube" / "pki"
    certs.mkdir(parents=True)
    (certs / "ca.crt").write_bytes(pki.ca)
    (certs / "alice.crt").write_bytes(pki.client.cert)
    (certs / "alice.key").write_bytes(pki.client.key)
    doc = kubeconfig_doc(
        {"certificate-authority": "pki/ca.crt"},
        {"client-certificate": "pki/alice.crt", "client-key": str(certs / "alice.key")},
    )
    cfg = load_kubeconfig(write_doc(tmp_path / "kube" / "config", doc))
    assert (cfg.ca_data, cfg.client_cert_data, cfg.client_key_data) == (
        pki.ca,
        pki.client.cert,
        pki.client.key,
    )


def test_kubeconfig_data_wins_over_file(pki: Pki, tmp_path: Path) -> None:
    doc = kubeconfig_doc(
        {"certificate-authority-data": b64(pki.ca), "certificate-authority": "never-read.crt"},
        {"token": "t"},
    )
    assert load_kubeconfig(write_doc(tmp_path / "kc", doc)).ca_data == pki.ca


def test_kubeconfig_mismatched_client_pair_names_fields(pki: Pki, tmp_path: Path) -> None:
    doc = kubeconfig_doc(
        {},
        {"client-certificate-data": b64(pki.client.cert), "client-key-data": b64(pki.stranger_key)},
    )
    path = write_doc(tmp_path / "kc", doc)
    with pytest.raises(ConfigError) as info:
        load_kubeconfig(path)
    msg = str(info.value)
    assert info.value.field == "users[name=u].user"
    assert "users[name=u].user.client-certificate-data" in msg
    assert "users[name=u].user.client-key-data" in msg
    assert str(path) in msg


def test_kubeconfig_insecure_with_ca_is_rejected(pki: Pki, tmp_path: Path) -> None:
    doc = kubeconfig_doc(
        {"certificate-authority-data": b64(pki.ca), "insecure-skip-tls-verify": True},
        {"token": "t"},
    )
    path = write_doc(tmp_path / "kc", doc)
    with pytest.raises(ConfigError) as info:
        load_kubeconfig(path)
    assert info.value.file == str(path)
    assert info.value.field == "contexts[name=dev].context"
    assert "insecure-skip-tls-verify" in str(info.value)


# --- exec plugin returning a client certificate ------------------------------------------


async def test_exec_plugin_client_certificate(
    pki: Pki, tmp_path: Path, tls_server: TlsServer
) -> None:
    out = tmp_path / "credential.json"
    out.write_text(
        json.dumps(
            {
                "apiVersion": EXEC_API_V1,
                "kind": "ExecCredential",
                "status": {
                    "clientCertificateData": pki.client.cert.decode(),
                    "clientKeyData": pki.client.key.decode(),
                    "expirationTimestamp": "2099-01-01T00:00:00Z",
                },
            }
        )
    )
    cfg = ClientConfig(
        server=f"https://127.0.0.1:{tls_server.port}",
        ca_data=pki.ca,
        tls_server_name=SERVER_NAME,
        exec=ExecConfig(
            command=sys.executable,
            args=("-S", "-c", "import sys; sys.stdout.write(open(sys.argv[1]).read())", str(out)),
        ),
    )
    creds = credentials_for(cfg)
    pair = await creds.client_certificate()
    assert pair == (pki.client.cert, pki.client.key)
    assert await creds.headers() == {}

    assert await handshake(cfg, tls_server.port, cfg.ssl_context(client_cert=pair)) == b"hello\n"
    assert [peer_common_name(p) for p in tls_server.peers] == ["alice"]


# --- in-cluster ------------------------------------------------------------------------------


def service_account(directory: Path, pki: Pki, *, namespace: str | None = "operators") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text("sa-token\n")
    (directory / "ca.crt").write_bytes(pki.ca)
    if namespace is not None:
        (directory / "namespace").write_text(namespace)
    return directory


def in_pod(monkeypatch: pytest.MonkeyPatch, host: str = "10.96.0.1", port: str = "443") -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)


async def test_incluster(pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_pod(monkeypatch)
    sa = service_account(tmp_path / "sa", pki)
    cfg = load_incluster_config(service_account_dir=sa)
    assert cfg.server == "https://10.96.0.1:443"
    assert cfg.namespace == "operators"
    assert cfg.ca_data == pki.ca
    assert cfg.token_file == str(sa / "token")
    assert cfg.token is None
    assert str(sa) in cfg.source
    assert await credentials_for(cfg).headers() == {"Authorization": "Bearer sa-token"}


def test_incluster_ipv6_and_default_namespace(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_pod(monkeypatch, host="fd00::1", port="6443")
    sa = service_account(tmp_path / "sa", pki, namespace=None)
    cfg = load_incluster_config(service_account_dir=sa)
    assert cfg.server == "https://[fd00::1]:6443"
    assert ipaddress.ip_address("fd00::1")  # the host stays a valid literal inside brackets
    assert cfg.namespace == "default"


def test_incluster_outside_a_pod(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_incluster_config(service_account_dir=tmp_path)
    msg = str(info.value)
    assert "$KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT are not set" in msg


def test_incluster_only_port_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    with pytest.raises(ConfigError, match=r"\$KUBERNETES_SERVICE_PORT is not set"):
        load_incluster_config(service_account_dir=tmp_path)


@pytest.mark.parametrize(("missing", "words"), [("token", "token"), ("ca.crt", "CA bundle")])
def test_incluster_missing_files(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str, words: str
) -> None:
    in_pod(monkeypatch)
    sa = service_account(tmp_path / "sa", pki)
    (sa / missing).unlink()
    with pytest.raises(ConfigError) as info:
        load_incluster_config(service_account_dir=sa)
    assert str(sa / missing) in str(info.value)
    assert words in str(info.value)


def test_incluster_bad_ca_and_port(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_pod(monkeypatch)
    sa = service_account(tmp_path / "sa", pki)
    (sa / "ca.crt").write_text("nonsense")
    with pytest.raises(ConfigError, match="not usable PEM"):
        load_incluster_config(service_account_dir=sa)
    (sa / "ca.crt").write_bytes(pki.ca)
    in_pod(monkeypatch, port="https")
    with pytest.raises(ConfigError, match="not a port number"):
        load_incluster_config(service_account_dir=sa)


# --- load_config: the order of places ---------------------------------------------------------


def test_load_config_prefers_kubeconfig_env(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    in_pod(monkeypatch)
    monkeypatch.setattr(
        config_module, "SERVICE_ACCOUNT_DIR", str(service_account(tmp_path / "sa", pki))
    )
    write_doc(clean_env / ".kube" / "config", kubeconfig_doc({}, {"token": "home"}))
    env_file = write_doc(tmp_path / "env-kc", kubeconfig_doc({}, {"token": "env"}))
    monkeypatch.setenv("KUBECONFIG", str(env_file))
    assert load_config().token == "env"


def test_load_config_home_before_incluster(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    in_pod(monkeypatch)
    monkeypatch.setattr(
        config_module, "SERVICE_ACCOUNT_DIR", str(service_account(tmp_path / "sa", pki))
    )
    write_doc(clean_env / ".kube" / "config", kubeconfig_doc({}, {"token": "home"}))
    assert load_config().token == "home"


def test_load_config_falls_back_to_incluster(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_pod(monkeypatch)
    sa = service_account(tmp_path / "sa", pki)
    monkeypatch.setattr(config_module, "SERVICE_ACCOUNT_DIR", str(sa))
    cfg = load_config()
    assert cfg.token_file == str(sa / "token")
    with pytest.raises(ConfigError, match="context 'dev' was asked for"):
        load_config(context="dev")


def test_load_config_nothing_found_lists_every_place(clean_env: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config()
    msg = str(info.value)
    assert "$KUBECONFIG (not set)" in msg
    assert str(clean_env / ".kube" / "config") in msg
    assert "$KUBERNETES_SERVICE_HOST not set" in msg


def test_load_config_kubeconfig_env_errors_are_not_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit $KUBECONFIG that is broken fails; it does not silently go in-cluster."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    in_pod(monkeypatch)
    with pytest.raises(ConfigError, match="listed in \\$KUBECONFIG"):
        load_config()
