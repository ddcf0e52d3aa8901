"""``--remote s3://bucket/prefix`` and the object-store settings that go with it, read once from the environment.

Endpoint, region and credentials follow the standard AWS variables (``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, and the workload-identity variables that
IRSA and EKS Pod Identity inject, ``AWS_WEB_IDENTITY_TOKEN_FILE``/``AWS_ROLE_ARN``/``AWS_CONTAINER_*``), which the
object_store crate underneath obstore understands. Plain ``http://`` endpoints are refused unless
``AWS_ALLOW_HTTP=true`` (object_store's own convention). Secrets are kept out of :func:`RemoteURL.describe` and
``repr``, so nothing that logs a setting can leak one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from trtwarm.config import FALSE_VALUES, TRUE_VALUES, parse_size
from trtwarm.errors import ConfigError
from trtwarm.transport.limits import Limits, parse_limits, whole_number

#: AWS variables handed to the client (credentials among them); workload identity variables are read by it directly
AWS_KEYS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION",
            "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_SKIP_SIGNATURE",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "AWS_S3_EXPRESS")
SECRET_KEYS = frozenset({"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"})
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,62}")


@dataclass(frozen=True)
class RemoteURL:
    """Where the repository lives and how to reach it. ``aws`` holds the AWS variables (secrets included)."""

    bucket: str
    prefix: str
    endpoint: str | None = None
    allow_http: bool = False
    limits: Limits = field(default_factory=Limits)  # the transport contract's bounds (trtwarm.transport.limits)
    progress: float = 10.0  # seconds between progress lines (the init's --progress-interval)
    chunk: int = 16 << 20  # ranged-GET size and multipart part size
    concurrency: int = 4  # ranges in flight (parts: half); 8 × 16 MiB peaked at 400 MB RSS here
    aws: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def url(self) -> str:
        """``s3://bucket/prefix``."""
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def describe(self) -> str:
        """For logs: the URL and the endpoint, never a credential."""
        return self.url + (f" at {self.endpoint}" if self.endpoint else "")

    def key(self, *parts: str) -> str:
        """The object key of *parts* under the prefix."""
        return "/".join(p for p in (self.prefix, *parts) if p)


def parse(url: str, environ: Mapping[str, str]) -> RemoteURL:
    """Parse ``s3://bucket[/prefix]`` and the AWS settings in *environ*. :raises ConfigError: bad URL or settings."""
    match = re.fullmatch(r"s3://([^/]+)(?:/(.*))?", url.strip())
    if not match:
        raise ConfigError(f"--remote {url!r} is not an S3 URL", hint="use s3://BUCKET/PREFIX, e.g. "
                          "s3://engines/prod; the endpoint comes from AWS_ENDPOINT_URL")
    if not _BUCKET.fullmatch(match[1]):
        raise ConfigError(f"--remote {url!r}: {match[1]!r} is not a valid bucket name", hint="a bucket name is 3 to "
                          "63 lower-case letters, digits, '.', '-' or '_', starting with a letter or digit")
    prefix = (match[2] or "").strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise ConfigError(f"--remote {url!r}: the prefix has an empty, '.' or '..' part", hint="e.g. s3://engines/prod")
    aws = {k: environ[k] for k in AWS_KEYS if environ.get(k)}
    endpoint = aws.get("AWS_ENDPOINT_URL_S3") or aws.get("AWS_ENDPOINT_URL") or aws.get("AWS_ENDPOINT")
    allow = environ.get("AWS_ALLOW_HTTP", "").strip().lower()
    if allow not in TRUE_VALUES | FALSE_VALUES:
        raise ConfigError(f"AWS_ALLOW_HTTP={allow!r} is not a boolean", hint="use true or false")
    if endpoint and not re.match(r"https?://[^/\s]+", endpoint):
        raise ConfigError(f"AWS_ENDPOINT_URL {endpoint!r} is not an http(s) URL",
                          hint="e.g. https://minio.storage:9000")
    if endpoint and endpoint.startswith("http://") and allow not in TRUE_VALUES:
        raise ConfigError(f"the endpoint {endpoint} is plain http", hint="use https, or set AWS_ALLOW_HTTP=true for "
                          "an in-cluster store you trust (credentials are signed, but the engines travel in clear)")
    return RemoteURL(match[1], prefix, endpoint, allow in TRUE_VALUES, limits=parse_limits(environ),
                     chunk=max(parse_size(environ.get("TRTWARM_REMOTE_CHUNK", "16M")), 5 << 20),
                     concurrency=max(whole_number(environ.get("TRTWARM_REMOTE_CONCURRENCY", "4"),
                                                  "TRTWARM_REMOTE_CONCURRENCY"), 1), aws=aws)


def redact(text: str, remote: RemoteURL) -> str:
    """*text* with every secret of *remote* replaced by ``***`` (for messages that quote a server's answer)."""
    for name in SECRET_KEYS:
        secret = remote.aws.get(name)
        if secret and len(secret) >= 4:  # a shorter one cannot be told from the text around it (every "b" masked)
            text = text.replace(secret, "***")
    return text


__all__ = ["AWS_KEYS", "RemoteURL", "parse", "redact"]
