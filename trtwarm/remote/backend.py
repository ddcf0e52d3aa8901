"""Which repository backend a ``--remote`` URL names: ``s3://`` (object storage) or ``oci://`` (a registry).

Both give a :class:`trtwarm.remote.repo.Repository` (the OCI one a subclass with the same contract), whose
``client`` offers the path interface the shared pull and push use (``head``, ``stream_range``, ``put_file``) and
whose ``client.remote`` carries ``url``, ``chunk`` and ``concurrency``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trtwarm.errors import ConfigError
from trtwarm.remote.repo import Repository

SCHEMES = ("s3://", "oci://")


def parse_remote(url: str, environ: Mapping[str, str], *, insecure: bool = False) -> Any:
    """A :class:`trtwarm.remote.url.RemoteURL` or :class:`trtwarm.remote.oci.url.OciURL`. :raises ConfigError:"""
    if url.strip().startswith("oci://"):
        from trtwarm.remote.oci.url import parse

        return parse(url, environ, insecure=insecure)
    if url.strip().startswith("s3://"):
        from trtwarm.remote.url import parse as parse_s3

        return parse_s3(url, environ)
    raise ConfigError(f"--remote {url!r} is neither an S3 nor an OCI URL",
                      hint="use s3://BUCKET/PREFIX (object storage) or oci://REGISTRY/REPOSITORY (a registry)")


def open_repository(remote: Any) -> Repository:
    """The repository of a parsed remote."""
    from trtwarm.remote.oci.url import OciURL

    if isinstance(remote, OciURL):
        from trtwarm.remote.oci.client import OciClient
        from trtwarm.remote.oci.repo import OciRepository

        return OciRepository(OciClient(remote))
    from trtwarm.remote.client import Client

    return Repository(Client(remote))


__all__ = ["SCHEMES", "open_repository", "parse_remote"]
