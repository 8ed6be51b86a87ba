"""Test helper: record (and stop) every outbound connection or name lookup outside an allowlist.

Installed for a test's duration (below boto, aiobotocore and aiohttp, which are not mocked): a
connection to anything but the allowed 127.0.0.1 ports is recorded, and refused unless it is to
127.0.0.1; a name lookup of anything but localhost is recorded and refused. So a URL to
169.254.169.254, or to a host that would need DNS, never leaves the machine, and is counted if tried.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Any

import pytest


class EgressGuard:
    """Record (and stop) every outbound connection or name lookup outside the allowlist."""

    def __init__(self, allowed_ports: set[int]):
        self.allowed_ports = allowed_ports
        self.attempts: list[str] = []
        self._lock = threading.Lock()

    def _record(self, what: str) -> None:
        with self._lock:
            self.attempts.append(what)

    @staticmethod
    def _is_ip(host: str) -> bool:
        try:
            ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            return False
        return True

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
        real_getaddrinfo = socket.getaddrinfo
        guard = self

        def check(sock: socket.socket, address: Any) -> None:
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple):
                return
            host, port = str(address[0]), int(address[1])
            if host == "127.0.0.1" and port in guard.allowed_ports:
                return
            guard._record(f"connect {host}:{port}")
            if host != "127.0.0.1":  # never let it leave the machine
                raise ConnectionRefusedError(111, f"egress guard: {host}:{port} is not allowlisted")

        def connect(sock: socket.socket, address: Any) -> Any:
            check(sock, address)
            return real_connect(sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> Any:
            check(sock, address)
            return real_connect_ex(sock, address)

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            name = host.decode() if isinstance(host, bytes) else host
            if name is not None and name != "localhost" and not guard._is_ip(str(name)):
                guard._record(f"resolve {name}")
                raise socket.gaierror(socket.EAI_NONAME, f"egress guard: {name} is not allowlisted")
            return real_getaddrinfo(host, *args, **kwargs)

        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
