"""What the Pod's environment says, read without importing anything heavy (the repeat hit needs it too).

A leaf module: :mod:`trtwarm.node.events` and :mod:`trtwarm.init.fasthit` agree through it on whether Events are sent.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: the repeat hit pays for every module it loads
    from collections.abc import Mapping

#: where Kubernetes projects the service account's token (the in-cluster configuration reads it)
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def events_configured(environ: Mapping[str, str]) -> bool:
    """Whether Kubernetes Events could be sent from here: the Pod's name and namespace (the downward API) and a
    client configuration (inside a cluster the service-account token, else ``KUBECONFIG`` or ``~/.kube/config``).
    Looks at files only; whether the ``kubernetes`` package is installed is the caller's question."""
    if not (environ.get("POD_NAME") and environ.get("POD_NAMESPACE")):
        return False
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return os.path.exists(TOKEN_PATH)
    files = [f for f in environ.get("KUBECONFIG", "").split(os.pathsep) if f] or [os.path.expanduser("~/.kube/config")]
    return any(os.path.exists(f) for f in files)


__all__ = ["TOKEN_PATH", "events_configured"]
