"""Origins (scheme, host, port): what credentials are bound to. A ``Location``, a ``Link``, a redirect or a token
realm that names another origin never gets the credentials given for this one."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Origin:
    """``scheme://host:port``, host lower-cased, the default port filled in."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def netloc(self) -> str:
        """``host[:port]`` as a ``Host`` header names it (the port only when not the scheme's default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS.get(self.scheme) == self.port else f"{host}:{self.port}"


def origin_of(url: str) -> Origin:
    """The origin of an absolute ``http(s)`` URL. :raises ValueError: not one"""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url[:120]!r}")
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise ValueError(f"a bad port in {url[:120]!r}") from None
    return Origin(scheme, parts.hostname.lower(), port)


def target_of(url: str) -> str:
    """The request target (path and query) of an absolute URL."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def resolve(base: str, reference: str) -> str:
    """*reference* (a ``Location``, a ``Link``) made absolute against *base*. :raises ValueError: not http(s)"""
    url = urljoin(base, reference.strip())
    origin_of(url)
    return url


__all__ = ["Origin", "origin_of", "resolve", "target_of"]
