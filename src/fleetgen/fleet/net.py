"""Addresses and ports of replica servers: is a port free, which address reaches a server."""

from __future__ import annotations

import ipaddress
import socket

import psutil

from fleetgen.errors import PortInUseError
from fleetgen.fleet.engines import ReplicaSpec


def check_port_free(host: str, port: int) -> None:
    """Free as the server sees it: SO_REUSEADDR, so a just-killed replica's TIME_WAIT sockets do not count."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            holder = _port_holder(port)
            raise PortInUseError(
                f"port {port} on {host} is already in use{holder} ({e.strerror})",
                hint="pass another --port-base, or stop what holds the port (`fleetgen down` for a fleet)",
            ) from None


def _port_holder(port: int) -> str:
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                return f" by pid {c.pid} ({psutil.Process(c.pid).name()})"
    except (psutil.Error, OSError):
        pass
    return ""


def free_port(host: str) -> int:
    """A port the OS says is free on `host` now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def endpoint_of(spec: ReplicaSpec) -> str:
    """The URL a client on this machine uses for a server bound as `spec` says."""
    host = "127.0.0.1" if spec.host in ("0.0.0.0", "") else ("[::1]" if spec.host == "::" else spec.host)
    return f"http://{host}:{spec.port}"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost; names are not resolved (a name may point anywhere)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
