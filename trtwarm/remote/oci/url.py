"""``--remote oci://REGISTRY[:PORT]/REPOSITORY`` and the registry settings that go with it, read once.

Plain HTTP is used only for a loopback registry (``localhost``, ``127.0.0.0/8``, ``::1``) or when asked
(``--plain-http``, alias ``--insecure-registry``; ``TRTWARM_PLAIN_HTTP``, ``TRTWARM_INSECURE_REGISTRY`` or
``TRTWARM_OCI_ALLOW_HTTP`` true); everything else speaks HTTPS, verified against the system's CAs (or
``SSL_CERT_FILE``/``SSL_CERT_DIR``, which OpenSSL reads, for a private CA). Credentials come from the Docker/Podman
auth file (:mod:`trtwarm.remote.oci.auth`) and are kept out of :meth:`OciURL.describe` and ``repr``. The transfer
settings (the transport's bounds, range size, concurrency) are the ``TRTWARM_REMOTE_*`` variables the S3 backend
reads, with the same meaning (:mod:`trtwarm.transport.limits`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from trtwarm.config import FALSE_VALUES, TRUE_VALUES, parse_size
from trtwarm.errors import ConfigError
from trtwarm.transport.limits import Limits, parse_limits, whole_number

#: distribution-spec's repository name grammar (lower-case path components)
REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
#: a registry host: a DNS name or IPv4 address, or a bracketed IPv6 address, with an optional port
HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class OciURL:
    """Where the repository lives and how to reach it. ``credentials``: (username, secret, identity token)."""

    registry: str  # host[:port]
    repository: str
    allow_http: bool = False
    limits: Limits = field(default_factory=Limits)  # the transport contract's bounds (trtwarm.transport.limits)
    progress: float = 10.0  # seconds between progress lines (the init's --progress-interval)
    chunk: int = 16 << 20  # ranged-GET size
    concurrency: int = 4  # ranges in flight
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def url(self) -> str:
        """``oci://registry/repository``."""
        return f"oci://{self.registry}/{self.repository}"

    @property
    def scheme(self) -> str:
        """``http`` for a loopback registry or when plain HTTP was asked for, else ``https``."""
        return "http" if self.allow_http or is_loopback(self.registry) else "https"

    @property
    def base(self) -> str:
        """``https://registry/v2/repository``: the prefix of every request about this repository."""
        return f"{self.scheme}://{self.registry}/v2/{self.repository}"

    def describe(self) -> str:
        """For logs: the URL and the scheme, never a credential."""
        return f"{self.url} ({self.scheme})"


def is_loopback(registry: str) -> bool:
    """Whether *registry* (``host[:port]``) names this machine: ``localhost`` or a loopback address."""
    host = registry[1:].split("]")[0] if registry.startswith("[") else registry.rsplit(":", 1)[0]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_reference(text: str, *, tag: bool) -> tuple[str, str, str | None]:
    """``(registry, repository, tag)`` out of ``[oci://]REGISTRY/REPOSITORY[:TAG]``. :raises ValueError: malformed"""
    rest = text.strip().removeprefix("oci://")
    registry, _, path = rest.partition("/")
    name, found = path, None
    if tag and ":" in path:
        name, found = path.rsplit(":", 1)
        if not TAG.fullmatch(found):
            raise ValueError(f"{found!r} is not a valid tag")
    if not HOST.fullmatch(registry) or ("." not in registry and ":" not in registry and registry != "localhost"):
        raise ValueError(f"{registry!r} is not a registry host (a name with a dot or a port, e.g. "
                         "registry.example.com or 127.0.0.1:5000)")
    if not REPOSITORY.fullmatch(name):
        raise ValueError(f"{name!r} is not a repository name (lower-case letters, digits, '.', '_', '-', '/')")
    return registry, name, found


def parse(url: str, environ: Mapping[str, str], *, insecure: bool = False) -> OciURL:
    """Parse ``oci://REGISTRY/REPOSITORY`` and the settings in *environ*. :raises ConfigError: bad URL or settings"""
    try:
        registry, repository, _ = split_reference(url, tag=False)
    except ValueError as exc:
        raise ConfigError(f"--remote {url!r}: {exc}", hint="use oci://REGISTRY/REPOSITORY, e.g. "
                          "oci://registry.example.com/engines/prod (no tag: entries are tagged by their key)") from None
    allow = insecure
    for name in ("TRTWARM_PLAIN_HTTP", "TRTWARM_OCI_ALLOW_HTTP", "TRTWARM_INSECURE_REGISTRY"):
        value = environ.get(name, "").strip().lower()
        if value not in TRUE_VALUES | FALSE_VALUES:
            raise ConfigError(f"{name}={value!r} is not a boolean", hint="use true or false")
        allow = allow or value in TRUE_VALUES
    return OciURL(registry, repository, allow, limits=parse_limits(environ),
                  chunk=max(parse_size(environ.get("TRTWARM_REMOTE_CHUNK", "16M")), 1 << 20),
                  concurrency=max(whole_number(environ.get("TRTWARM_REMOTE_CONCURRENCY", "4"),
                                               "TRTWARM_REMOTE_CONCURRENCY"), 1), environ=dict(environ))


__all__ = ["OciURL", "is_loopback", "parse", "split_reference"]
