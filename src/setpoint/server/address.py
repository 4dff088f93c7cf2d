"""Where a server listens: ``host:port`` as controller-runtime writes bind addresses."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Final

__all__ = ["DISABLED", "BindAddress", "free_port", "parse_bind_address"]

DISABLED: Final = "0"
"""The bind address that turns a server off (controller-runtime's convention)."""


@dataclass(frozen=True, slots=True)
class BindAddress:
    """A parsed ``host:port``; ``host`` is ``None`` for every interface (``":8080"``)."""

    host: str | None
    port: int

    def __str__(self) -> str:
        host = self.host or ""
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{self.port}"


def parse_bind_address(value: str, *, option: str) -> BindAddress | None:
    """Parse a bind address as controller-runtime writes them; ``"0"`` gives ``None`` (off).

    Accepted: ``":8080"`` (every interface), ``"127.0.0.1:8080"``, ``"[::1]:8080"``,
    ``"localhost:0"`` (port 0: the OS picks a free port; read it back after start).
    ``option`` names the setting in messages (``"ManagerOptions.metrics_bind_address"``).

    Raises:
        ValueError: naming ``option`` and the accepted forms.

    """
    if value == DISABLED:
        return None
    host, sep, port_text = value.rpartition(":")
    problem = ""
    if not sep or not port_text.isdigit():
        problem = "it needs a port"
    elif int(port_text) > 65535:
        problem = "the port must be 0-65535"
    elif host.startswith("[") != host.endswith("]"):
        problem = "an IPv6 host needs both brackets"
    elif ":" in host and not host.startswith("["):
        problem = "an IPv6 host must be in brackets"
    if problem:
        raise ValueError(
            f"{option}={value!r} is not a bind address ({problem}): use "
            f"':8080' (all interfaces), '127.0.0.1:8080', '[::1]:8080', a port of 0 for any "
            f"free port, or '{DISABLED}' to disable the server"
        )
    if host.startswith("["):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(
                f"{option}={value!r}: {host!r} in brackets is not an IPv6 address"
            ) from None
    return BindAddress(host or None, int(port_text))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now (bound to port 0, then released).

    For a process about to be told where to listen (a control plane, a webhook, a test
    server). Another process may take the port between this call and its use; a server
    that binds itself should ask for port 0 and read the port back instead.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
