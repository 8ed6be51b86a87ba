"""The web listener's settings (`cfn-provider run --transport web --web-...`; see docs/ros.md)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_BODY = 256 * 1024  # bytes: ROS requests are a few KiB; anything near this is not one
MAX_CONNECTIONS = 512  # below the usual 1024 open files per process, with room for the store, logs, sockets out
MAX_CONNECTIONS_PER_SOURCE = 128  # behind a load balancer (one source): raise it to MAX_CONNECTIONS


@dataclass(frozen=True)
class WebSettings:
    address: str = "0.0.0.0"  # listen address
    port: int = 8443
    cert_file: str | None = None  # PEM certificate chain; with key_file: HTTPS, reloaded on SIGHUP
    key_file: str | None = None
    allow_http: bool = False  # plain HTTP (behind a TLS-terminating proxy, or on loopback): only when asked
    token_file: str | None = None  # else CFN_PROVIDER_WEB_TOKEN (cfn_provider.trust.web_tokens)
    allow_sources: tuple[str, ...] = ()  # source networks served; empty: any
    max_body: int = MAX_BODY
    header_timeout: float = 10.0  # seconds for a connection to send its request line and headers
    body_timeout: float = 10.0  # seconds for the body, once the headers are in
    sync_timeout: float = 55.0  # seconds a web[sync] caller may be kept waiting (below any proxy's idle timeout)
    max_connections: int = MAX_CONNECTIONS  # open at once, in all: past it a new connection is closed at once
    max_connections_per_source: int = MAX_CONNECTIONS_PER_SOURCE  # open at once from one source address

    @property
    def tls(self) -> bool:
        return bool(self.cert_file)


def web_http_refused(address: str) -> str:
    """The error for a listener without --web-cert and without --web-allow-http."""
    return (
        f"--transport web on {address} needs --web-cert and --web-key (HTTPS): the URL's path token is the only "
        "secret ROS sends, and plain HTTP shows it to the network. Behind a TLS-terminating proxy, or on "
        "loopback for a local try, pass --web-allow-http (CFN_PROVIDER_WEB_ALLOW_HTTP=1)."
    )
