"""Network: the master address and port, the interface gloo/NCCL would use, and the
hostname-resolves-to-loopback trap that makes multi-node jobs hang at init."""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterator

from distrun.doctor.check import CheckResult, Context
from distrun.launch_rules import DEFAULT_MASTER_PORT
from distrun.netinfo import interface_for, interfaces

DEFAULT_PORT = DEFAULT_MASTER_PORT


def _is_local(ip: str) -> bool:
    return ipaddress.ip_address(ip).is_loopback or ip in interfaces().values()


def check_master(ctx: Context) -> Iterator[CheckResult]:
    addr = ctx.master_addr or "127.0.0.1"
    port = ctx.master_port or DEFAULT_PORT
    try:
        ip = str(socket.getaddrinfo(addr, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except socket.gaierror as err:
        yield CheckResult("master address", "fail", f"{addr} does not resolve: {err.strerror}",
                          "use node 0's IP address, or fix DNS / /etc/hosts")
        return
    yield CheckResult("master address", "ok", f"{addr} -> {ip}")
    if _is_local(ip):
        yield _port_free(ip, port, given=ctx.master_port is not None)
    else:
        yield _port_reachable(ip, port)


def _port_free(ip: str, port: int, given: bool = True) -> CheckResult:
    """A port given with --master-port must be free (fail); the default one (no port
    given) only matters to a multi-node job: a single-node launch picks a free port, so a
    taken default is a warning (another job on a shared machine often holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE and not given:
                return CheckResult("master port", "warn", f"{port} (the default across "
                                   "nodes) is in use here: fine on one node (distrun launch "
                                   "picks a free port); a multi-node job needs another "
                                   "--master-port", "`ss -ltnp | grep :PORT` shows what holds it")
            if err.errno == errno.EADDRINUSE:
                return CheckResult("master port", "fail", f"{port} is already in use here",
                                   "stop what holds it (`ss -ltnp | grep :PORT`) or pick "
                                   "another --master-port (distrun launch picks a free one "
                                   "on a single node)")
            return CheckResult("master port", "warn", f"cannot bind {ip}:{port}: {err.strerror}")
    return CheckResult("master port", "ok", f"{port} is free on this machine")


def _port_reachable(ip: str, port: int) -> CheckResult:
    try:
        with socket.create_connection((ip, port), timeout=3):
            return CheckResult("master port", "ok", f"{ip}:{port} accepts connections")
    except ConnectionRefusedError:
        return CheckResult("master port", "warn", f"{ip}:{port} refused the connection",
                           "fine before node 0 starts; once it runs, this port must be open")
    except OSError as err:
        return CheckResult("master port", "fail", f"{ip}:{port} is not reachable: "
                           f"{err.strerror or 'timed out'}", "check routes and firewalls "
                           "between the nodes (the port and a range of high ports)")


def check_interfaces(ctx: Context) -> Iterator[CheckResult]:
    names = interfaces()
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        value = ctx.environ.get(var)
        if value is None:
            continue
        wanted = [v for v in value.split(",") if v and not v.startswith(("^", "="))]
        missing = [v for v in wanted if v not in names and not any(n.startswith(v)
                                                                   for n in names)]
        if missing:
            yield CheckResult(var, "fail", f"{var}={value}: no interface {', '.join(missing)} "
                              f"here (have {', '.join(sorted(names))})",
                              f"set {var} to one of them, or unset it")
        else:
            yield CheckResult(var, "ok", f"{var}={value}")
    target = ctx.master_addr or "127.0.0.1"
    try:
        ip = socket.gethostbyname(target)
    except OSError:
        return
    iface = interface_for(ip)
    detail = f"traffic to {target} leaves through {iface or '?'}"
    if ctx.multi_node and iface and iface.startswith("lo") and not ipaddress.ip_address(
            ip).is_loopback:
        yield CheckResult("interface", "warn", detail, "a loopback route to another node?")
    else:
        yield CheckResult("interface", "ok", detail)


def check_hostname(ctx: Context) -> Iterator[CheckResult]:
    host = socket.gethostname()
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        yield CheckResult("hostname", "warn", f"{host} does not resolve",
                          "add it to /etc/hosts with this machine's network address")
        return
    if not ipaddress.ip_address(ip).is_loopback:
        yield CheckResult("hostname", "ok", f"{host} -> {ip}")
        return
    real = [n for n in interfaces() if not n.startswith("lo")]
    name = real[0] if real else "eth0"
    fix = f"GLOO_SOCKET_IFNAME={name} and NCCL_SOCKET_IFNAME={name} (or fix /etc/hosts)"
    detail = f"{host} -> {ip} (a loopback address)"
    if ctx.multi_node and "GLOO_SOCKET_IFNAME" not in ctx.environ:
        yield CheckResult("hostname", "warn", detail, "multi-node jobs hang at init: gloo and "
                          f"NCCL advertise loopback to the other nodes. Set {fix}")
    else:
        yield CheckResult("hostname", "ok", detail, f"fine on one machine; for multi-node set "
                          f"{fix}" if not ctx.multi_node else "")


CHECKS = [check_master, check_interfaces, check_hostname]
