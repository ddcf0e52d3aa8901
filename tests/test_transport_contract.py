"""One transport contract, enforced in one place: only ``trtwarm/transport/`` may import an HTTP or object-store
client, so a new backend (or a new request in an old one) cannot skip the bounds, caps, credential rules and stop
handling it owns. Read from the package's source (AST), imports inside functions and dynamic imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "trtwarm"
TRANSPORT = PACKAGE / "transport"

#: clients that talk to a peer over the network (a module, or any module below it)
FORBIDDEN = ("urllib3", "requests", "httpx", "aiohttp", "obstore", "boto3", "botocore", "s3fs", "pycurl", "socket",
             "ssl", "http.client", "urllib.request", "xmlrpc.client", "ftplib", "kubernetes", "oras")

#: the documented exceptions, each with why it is not a repository backend's request
ALLOWED = {
    "trtwarm/sidecar/server.py": ({"socket", "http.server"}, "serves /metrics and /healthz; fetches nothing"),
    "trtwarm/node/events.py": ({"urllib3", "kubernetes"}, "Kubernetes Events through the API client: best effort, "
                               "each with the client's own 5 s request timeout and a bounded close"),
}


def imported(tree: ast.AST) -> set[str]:
    """Every module *tree* imports: ``import a.b``, ``from a import b`` (as ``a`` and ``a.b``), and
    ``importlib.import_module("a")`` / ``__import__("a")`` with a literal name."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__"):
                names.add(node.args[0].value)
    return names


def clients(names: set[str]) -> set[str]:
    """The network clients among *names*."""
    return {name for name in names for bad in FORBIDDEN if name == bad or name.startswith(bad + ".")}


def test_only_the_transport_imports_an_http_or_object_store_client() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if TRANSPORT in path.parents:
            continue
        rel = path.relative_to(ROOT).as_posix()
        found = clients(imported(ast.parse(path.read_text(), rel)))
        allowed = ALLOWED.get(rel, (set(), ""))[0]
        extra = {name for name in found if not any(name == a or name.startswith(a + ".") for a in allowed)}
        if extra:
            offenders.append(f"{rel}: {', '.join(sorted(extra))}")
    assert not offenders, ("only trtwarm/transport/ may talk to the network (it owns the bounds, caps, credential "
                           "rules and stop handling); move the request there: " + "; ".join(offenders))


def test_the_transport_does_import_them_so_the_check_reads_real_imports() -> None:
    """The check itself sees what it looks for (a check that finds nothing anywhere proves nothing)."""
    found = set()
    for path in TRANSPORT.glob("*.py"):
        found |= clients(imported(ast.parse(path.read_text())))
    assert {"socket", "ssl", "http.client", "obstore", "obstore.store"} <= found, found


@pytest.mark.parametrize("source, caught", [
    ("import urllib3", {"urllib3"}),
    ("from http import client", {"http.client"}),
    ("def f():\n    from obstore.store import S3Store", {"obstore.store", "obstore.store.S3Store"}),
    ("import importlib\nimportlib.import_module('requests')", {"requests"}),
    ("__import__('socket')", {"socket"}),
    ("from urllib.parse import urljoin", set()),
    ("from . import socket", set()),  # a relative import of a sibling module is not the standard library's
])
def test_the_check_catches_every_way_of_importing(source: str, caught: set[str]) -> None:
    assert clients(imported(ast.parse(source))) == caught


def test_every_allowed_exception_still_exists_and_says_why() -> None:
    for rel, (modules, why) in ALLOWED.items():
        assert (ROOT / rel).is_file(), f"{rel} is gone: drop it from ALLOWED"
        assert modules and len(why) > 20
