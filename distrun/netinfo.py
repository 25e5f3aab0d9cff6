"""What the network looks like from this node: which interface and local address reach an
address, and whether a TCP port is free. Shared by `launch` (GLOO_SOCKET_IFNAME /
NCCL_SOCKET_IFNAME, --local-addr, the master port) and `doctor` (to report them). Linux
only; elsewhere no interface is found and nothing is set."""

from __future__ import annotations

import fcntl
import socket
import struct

_SIOCGIFADDR = 0x8915


def interfaces() -> dict[str, str]:
    """IPv4 address of every interface that has one (Linux ioctl; empty elsewhere)."""
    found: dict[str, str] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                     struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            found[name] = socket.inet_ntoa(packed[20:24])
    return found


def route_source(address: str) -> str | None:
    """The local address the kernel would send from to reach `address`."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))  # UDP connect: picks a route, sends nothing
            return str(sock.getsockname()[0])
    except OSError:
        return None


def route(address: str) -> tuple[str | None, str | None]:
    """(interface, local address) the kernel would use to reach `address`."""
    source = route_source(address)
    if source is None:
        return None, None
    return next((name for name, ip in interfaces().items() if ip == source), None), source


def interface_for(address: str) -> str | None:
    return route(address)[0]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def bind_error(host: str, port: int) -> OSError | None:
    """Why a TCP server could not listen on `host`:`port` here (None: it could)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1" if host == "localhost" else host, port))
        except OSError as err:
            return err
    return None
