"""Each promise has one owner, and a bypass is a failing test: this reads trtwarm's source (its AST) and fails when
a module does itself what an owner module exists to do.

**Files of the volume, a seed tier, staging, the hand-off directory** (docs/trust.md, "Verified bytes"). The modules
that handle those paths are the volume, init, lifecycle, trust and sidecar layers, the volume side of the remote
repository (``remote/pull.py``, ``push.py``, ``sync.py``, the engine image's ``remote/oci/image.py``) and of the
TensorRT builder (its shared timing caches): :data:`SCOPE`. In them, nothing opens a file (``open``,
``os.open``, ``Path.open``/``read_*``/``write_*``), hashes or copies one (the hashing and copying helpers of
``trtwarm.fs``), changes a mode (``chmod``), renames, links or removes one (``os.rename``/``replace``/``unlink``/
``rmdir``, ``shutil.rmtree``/``copy*``/``move``, the same ``Path`` methods) directly. They go through the owners:

* :mod:`trtwarm.volume.verified` and its building block :mod:`trtwarm.volume.opened`, the modules in :data:`SCOPE`
  allowed to (:data:`OWNERS`): a file opened once, ``O_NOFOLLOW | O_NONBLOCK``, relative to its directory's
  descriptor, ``fstat``-ed, hashed, and used afterwards only through that descriptor or a private copy made from it;
* :mod:`trtwarm.fs` (outside :data:`SCOPE`: the primitives): :mod:`~trtwarm.fs.safe` for every rename, unlink and
  tree removal (relative to directory descriptors, never through a link), :mod:`~trtwarm.fs.chunked` and
  :mod:`~trtwarm.fs.copy` for hashing and copying descriptors, :mod:`~trtwarm.fs.atomic`/:mod:`~trtwarm.fs.ops`
  for atomic writes and bounded reads of small advisory files.

:data:`ALLOWED` names the few calls in :data:`SCOPE` that touch no file of the volume, each with why (the function
they are in, not the module: a new function that does the same is a failure to look at).

**JSON**: only :mod:`trtwarm.strictjson` calls ``json.load``/``json.loads`` (everything else parses with it: a size
cap, duplicated keys, ``NaN`` and deep nesting refused). :data:`JSON_ALLOWED` names the exception.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "trtwarm"
SCOPE = ("trtwarm/volume/", "trtwarm/init/", "trtwarm/lifecycle/", "trtwarm/trust/", "trtwarm/sidecar/",
         "trtwarm/remote/pull.py", "trtwarm/remote/push.py", "trtwarm/remote/sync.py",
         "trtwarm/builders/tensorrt/timing_cache.py", "trtwarm/remote/oci/image.py")
OWNERS = frozenset({"trtwarm/volume/verified.py", "trtwarm/volume/opened.py"})
#: module functions (``os.X``, ``shutil.X``) and bare names that open, hash, copy, chmod, rename, link or remove
FORBIDDEN_MODULE_CALLS = {
    "os": {"open", "chmod", "lchmod", "chown", "lchown", "rename", "renames", "replace", "unlink", "remove",
           "rmdir", "removedirs", "truncate", "link", "symlink", "mkfifo", "mknod"},
    "shutil": {"rmtree", "copy", "copy2", "copyfile", "copyfileobj", "copytree", "move"},
    "hashlib": {"file_digest"},
    "atomic": {"write", "symlink"},  # trtwarm.fs.atomic's writers by path (see PATH_WRITERS)
}
#: the owners' writers that take a path and open its directory by that path (following a link there): right for a
#: file directly in a directory the operator names (the cache root, --handoff-dir, the stamp directory), a bypass
#: for one below the root (``timing-caches/<id>.cache``: fs.safe.write reaches it without following a link)
PATH_WRITERS = {"atomic_write", "atomic_write_json", "atomic_symlink"}
FORBIDDEN_NAMES = {"open", "sha256_file", "hash_fd", "check_fd", "copy_fd", "copy_hash_fd", "clone", *PATH_WRITERS}
#: methods of :class:`pathlib.Path` that open, chmod, link or remove (``rename``/``replace`` with one argument, so
#: ``str.replace(old, new)`` is not one)
FORBIDDEN_METHODS = {"read_bytes", "read_text", "write_bytes", "write_text", "open", "chmod", "lchmod", "unlink",
                     "rmdir", "touch", "symlink_to", "hardlink_to", "link_to"}
ONE_ARG_METHODS = {"rename", "replace"}
#: (module, function, call) -> why it touches no file of the volume
ALLOWED = {
    ("trtwarm/init/fasthit.py", "_load", "os.open"): "the node-local stamp directory's hit record (O_NOFOLLOW, owner "
                                                     "checked on the descriptor)",
    ("trtwarm/init/fasthit.py", "<lambda>", "os.replace"): "the hand-off directory's engine.json set aside, as "
                                                           "handoff.clear does (the repeat hit imports no pathlib)",
    ("trtwarm/init/fasthit.py", "<lambda>", "os.unlink"): "the hand-off directory's engine link, as handoff.clear",
    ("trtwarm/init/fasthit.py", "_termination_message", "open"): "the kubelet's termination log",
    ("trtwarm/init/fasthit.py", "_take_lease", "os.open"): "the lease directory, O_NOFOLLOW | O_DIRECTORY relative to "
                                                           ".leases (reached by fs.atomic.below), as fs.safe does",
    ("trtwarm/init/handoff.py", "termination_message", ".write_text"): "the kubelet's termination log",
    ("trtwarm/init/hitstart.py", "env_key", "os.open"): "the node-local stamp directory's key (O_NOFOLLOW)",
    ("trtwarm/init/hitstart.py", "boot_id", "open"): "/proc/sys/kernel/random/boot_id",
    ("trtwarm/init/hitrecord.py", "_env_key", "os.open"): "the node-local stamp directory's key, made O_EXCL",
    ("trtwarm/init/hitrecord.py", "_env_key", "os.unlink"): "its temporary name in the stamp directory",
    ("trtwarm/init/hitrecord.py", "_env_key", ".unlink"): "an older trtwarm's hit records in the stamp directory",
    ("trtwarm/init/hitrecord.py", "_env_key", "os.link"): "the stamp directory's key linked into place",
    ("trtwarm/trust/keys.py", "generate", "os.open"): "`keys generate` writing the operator's new key (O_EXCL)",
    ("trtwarm/trust/keys.py", "generate", "os.chmod"): "the operator's new key file, just made O_EXCL",
    ("trtwarm/trust/keys.py", "generate", ".unlink"): "the operator's half-written new key file",
    ("trtwarm/volume/lockwait.py", "_lock_file", "os.open"): "a lock file (flock target): O_NOFOLLOW, never read",
    ("trtwarm/remote/oci/image.py", "write_layer", "open"): "/proc/<pid>/fd/<n> of a verified descriptor (the file "
                                                            "checked, whatever its name leads to now)",
    ("trtwarm/init/handoff.py", "write", "atomic_symlink"): "the engine link directly in --handoff-dir",
    ("trtwarm/init/handoff.py", "write", "atomic_write_json"): "engine.json directly in --handoff-dir",
    ("trtwarm/init/handoff.py", "write_failure", "atomic_write_json"): "engine.json directly in --handoff-dir",
    ("trtwarm/init/fasthit.py", "_hand_off", "atomic.symlink"): "the engine link directly in --handoff-dir",
    ("trtwarm/init/fasthit.py", "_hand_off", "atomic.write"): "engine.json directly in --handoff-dir",
    ("trtwarm/init/hitrecord.py", "remember", "atomic_write_json"): "a hit record directly in the stamp directory",
    ("trtwarm/volume/stamps.py", "record_signer", "atomic_write_json"): "a record directly in the stamp directory",
    ("trtwarm/volume/stamps.py", "_record", "atomic_write_json"): "a stamp directly in the stamp directory",
    ("trtwarm/volume/layout.py", "ensure", "atomic_write"): "VERSION and CACHEDIR.TAG directly in the cache root",
    ("trtwarm/lifecycle/manifest_index.py", "save", "atomic_write"): "the index directly in the cache root",
    ("trtwarm/lifecycle/verify.py", "record", "atomic_write_json"): "the last verification directly in the cache "
                                                                    "root",
}
#: modules that may call json.load(s), and why
JSON_ALLOWED = {
    "trtwarm/strictjson.py": "the one strict reader",
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        yield rel, ast.parse(path.read_text(), rel)


#: modules whose functions and classes are the owners' (a call through them is the rule kept, not a bypass)
OWNER_MODULES = ("trtwarm.fs", "trtwarm.volume.verified", "trtwarm.volume.opened")


class _Calls(ast.NodeVisitor):
    """Every call that may open, hash, chmod, rename or remove, as ``(function it is in, name, line)``: ``os.open``,
    ``open``, ``json.loads``, or a method such as ``read_bytes`` on anything but a module or an owner's name."""

    def __init__(self, tree: ast.Module) -> None:
        self.where: list[str] = ["<module>"]
        self.found: list[tuple[str, str, int]] = []
        self.modules: set[str] = set()  # names bound to modules: their functions are not Path methods
        self.owned: set[str] = set()  # names imported from the owners: fs.safe, verified.Dir, fs.atomic...
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                self.modules |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                bound = {alias.asname or alias.name for alias in node.names}
                if node.module.startswith(OWNER_MODULES):
                    self.owned |= bound
                if node.module in ("trtwarm", "trtwarm.fs", "trtwarm.volume"):
                    self.modules |= bound

    def _scope(self, node: ast.AST, name: str) -> None:
        self.where.append(name)
        self.generic_visit(node)
        self.where.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:  # noqa: N802 - ast's name
        self._scope(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

    def visit_Lambda(self, node: ast.Lambda) -> None:  # noqa: N802
        self._scope(node, "<lambda>")

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802
        func, name = node.func, None
        if isinstance(func, ast.Name):  # the hashing and copying helpers are the owner's own, wherever imported from
            name = func.id if func.id not in self.owned or func.id in FORBIDDEN_NAMES else None
        elif isinstance(func, ast.Attribute):
            base = func.value.id if isinstance(func.value, ast.Name) else None
            if base in FORBIDDEN_MODULE_CALLS or base == "json":
                name = f"{base}.{func.attr}"
            elif base in self.owned or base in self.modules:
                name = None
            elif func.attr in FORBIDDEN_METHODS or (func.attr in ONE_ARG_METHODS and len(node.args) == 1):
                name = f".{func.attr}"
        if name is not None:
            self.found.append((self.where[-1], name, node.lineno))
        self.generic_visit(node)


def _forbidden(name: str) -> bool:
    if name.startswith("."):
        return True
    module, _, attr = name.rpartition(".")
    if module:
        return attr in FORBIDDEN_MODULE_CALLS.get(module, set())
    return name in FORBIDDEN_NAMES


def _calls(tree: ast.Module) -> list[tuple[str, str, int]]:
    visitor = _Calls(tree)
    visitor.visit(tree)
    return visitor.found


def test_no_module_of_the_volume_layers_opens_hashes_chmods_renames_or_removes_files_itself() -> None:
    bypasses, used = [], set()
    for rel, tree in _modules():
        if not rel.startswith(SCOPE) or rel in OWNERS:
            continue
        for function, name, line in _calls(tree):
            if not _forbidden(name):
                continue
            if (rel, function, name) in ALLOWED:
                used.add((rel, function, name))
                continue
            bypasses.append(f"{rel}:{line} {function}() calls {name}")
    assert not bypasses, ("go through trtwarm.volume.verified (files of an entry: opened once, checked, used "
                          "through the descriptor) or trtwarm.fs.safe (renames and removals relative to directory "
                          "descriptors), or, for a file that is not the volume's, add it to ALLOWED with why:\n"
                          + "\n".join(bypasses))
    assert used == set(ALLOWED), f"ALLOWED names calls that are gone: {sorted(set(ALLOWED) - used)}"


def test_only_strictjson_parses_json() -> None:
    parsers = [f"{rel}:{line} {function}() calls {name}" for rel, tree in _modules() if rel not in JSON_ALLOWED
               for function, name, line in _calls(tree) if name in ("json.load", "json.loads")]
    assert not parsers, "parse with trtwarm.strictjson.loads (cap, duplicated keys, NaN, nesting):\n" + "\n".join(
        parsers)


def test_the_checker_sees_a_bypass() -> None:
    """The test itself: a module that opens a path, renames through ``os`` and parses JSON is caught."""
    tree = ast.parse("import os, json\ndef use(p):\n    os.rename(p, p + '.x')\n    with open(p) as f:\n"
                     "        return json.loads(f.read())\nx = 'a'.replace('a', 'b')\n")
    found = {(function, name) for function, name, _line in _calls(tree)}
    assert {("use", "os.rename"), ("use", "open"), ("use", "json.loads")} <= found
    assert _forbidden(".read_bytes") and _forbidden("sha256_file") and not _forbidden("touch")
    assert all(_forbidden(name) for _f, name in found if name != "json.loads")
    assert ("<module>", ".replace") not in found
