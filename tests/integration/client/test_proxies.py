"""The client through HTTP CONNECT and SOCKS5 proxies, to the real API server."""

import asyncio
import dataclasses
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from setpoint.api import kinds
from setpoint.client import Client
from setpoint.client.errors import ConnectionFailed
from setpoint.client.kubeconfig import load_kubeconfig
from tests._support.proxies import Proxy


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["connect", "socks5"])
async def test_requests_and_watches_go_through_a_proxy(
    kubeconfig_path: Path, namespace: str, kind: str
) -> None:
    """Writes, reads and a watch reach the API server through a proxy with a login.

    TLS to the API server runs inside the proxy's tunnel (the server's certificate and the
    kubeconfig's credentials are checked end to end); a wrong proxy password fails at once
    with ConnectionFailed, naming the server and the proxy's refusal.
    """
    config = load_kubeconfig(str(kubeconfig_path))
    server = urlsplit(config.server)
    proxy = await Proxy(kind).start()  # type: ignore[arg-type]
    client = Client(dataclasses.replace(config, proxy_url=proxy.url()))
    try:
        async with client.watch(
            kinds.ConfigMap, namespace=namespace, fields={"metadata.name": "proxied"}
        ) as watch:
            await client.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "proxied", "namespace": namespace},
                    "data": {"via": kind},
                }
            )
            event = await asyncio.wait_for(anext(watch), 30)
        assert (event.type, event.object["metadata"]["name"]) == ("ADDED", "proxied")
        got = await client.get(kinds.ConfigMap, "proxied", namespace=namespace)
        assert got["data"] == {"via": kind}
        before = len(proxy.logins)
        refused = Client(dataclasses.replace(config, proxy_url=proxy.url("wrong")))
        with pytest.raises(ConnectionFailed) as info:
            await refused.get(kinds.ConfigMap, "proxied", namespace=namespace)
        await refused.close()
        assert config.server in str(info.value)
        assert "user and password" in str(info.value)
        assert "wrong" not in str(info.value), "the proxy password is never shown"
        refusals = proxy.logins[before:]
        # Discovery asks /api and /apis at once; neither is sent again after the refusal.
        assert refusals in (["u:wrong"], ["u:wrong", "u:wrong"])
    finally:
        await client.close()
        proxy.close()
    assert set(proxy.tunnels) == {(server.hostname, server.port)}
    assert set(proxy.logins[:before]) == {"u:p"}
