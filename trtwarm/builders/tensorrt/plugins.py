"""``--plugin`` libraries: the checks made before TensorRT is imported, and how a library reaches TensorRT.

A plain engine gets its plugins the way ``trtexec --staticPlugins`` does: ``dlopen`` (``ctypes.CDLL``, RTLD_GLOBAL),
whose static creators register themselves. A ``--version-compatible`` engine needs more: it "carries its plugin
libraries only if given to ``set_plugins_to_serialize()``, or the runtime loads them with
``IPluginRegistry.load_library()``"; ``IParser.get_used_vc_plugin_libraries`` lists the libraries the parsed
network needs (``python/docstrings/parsers/pyOnnxDoc.h`` release/10.16 L158-166; ``include/NvInfer.h`` L11848-11856;
``samples/trtexec/README.md`` L80-90; ``../shared/reference/tensorrt.md`` §10). So for such a build each library is
loaded with ``load_library`` and every library TensorRT names is serialized into the plan. ``load_library`` takes
only libraries that export its entry points, ``setLoggerFinder`` and ``getPluginCreators`` (``getCreators`` for
IPluginV3), the TensorRT developer guide's "Plugin Shared Libraries": which :func:`check_serializable` reads from
the library's dynamic symbol table without loading it (loading would run its code before any build).

Each library is loaded once per process (:func:`load`): TensorRT's registry refuses one loaded twice, and a batch
(``warm --list``, ``prebuild``) builds several engines in one process.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

from trtwarm.builders.tensorrt.elf import exported_symbols
from trtwarm.errors import BuildError, ConfigError
from trtwarm.fs.ops import sha256_file

ENTRY_POINTS = ("setLoggerFinder",)
CREATOR_ENTRY_POINTS = ("getPluginCreators", "getCreators")  # IPluginV2 libraries, IPluginV3 libraries
#: real path -> {"digest": SHA-256, "registry": load_library's handle, "dlopen": ctypes.CDLL}: what this process
#: loaded (a handle must stay alive as long as TensorRT may call into the library: the life of the process); copies
#: with one SHA-256 share a handle (their creators have the same names: the registry takes them once)
_LOADED: dict[str, dict[str, Any]] = {}
_LOCK = threading.Lock()


def check_unique(paths: tuple[Path, ...]) -> None:
    """:raises ConfigError: one library given twice (by path or by file name): its creators would register twice,
    which TensorRT refuses ("already registered"), and the key lists plugins by name."""
    seen: dict[str, Path] = {}
    for path in paths:
        for ident in {os.path.realpath(path), Path(path).name}:
            if ident in seen:
                raise ConfigError(f"--plugin {path} and --plugin {seen[ident]} are the same library "
                                  f"({Path(path).name})", hint="give each plugin library once")
            seen[ident] = path


def check_serializable(paths: tuple[Path, ...]) -> None:
    """:raises ConfigError: a library ``IPluginRegistry.load_library`` would refuse, so it could not be serialized
    into a version-compatible engine (not a shared object, or without the entry points)."""
    for path in paths:
        try:
            symbols = exported_symbols(path)
        except (OSError, ValueError) as exc:
            why = getattr(exc, "strerror", None) or str(exc) or "truncated"
            raise ConfigError(f"--plugin {path}: cannot be read as a plugin library ({why})",
                              hint="give the plugin's shared library (.so)") from None
        missing = [s for s in ENTRY_POINTS if s not in symbols]
        if not any(s in symbols for s in CREATOR_ENTRY_POINTS):
            missing.append(" or ".join(CREATOR_ENTRY_POINTS))
        if missing:
            raise ConfigError(f"--plugin {path} cannot be serialized into a --version-compatible engine: it does not "
                              f"export {', '.join(missing)}, which TensorRT's IPluginRegistry.load_library needs",
                              hint="build the plugin library with those extern \"C\" entry points (TensorRT developer "
                              "guide, Plugin Shared Libraries), or drop --version-compatible")


def load(trt: Any, paths: tuple[Path, ...], versioned: bool) -> list[Any]:
    """Make each ``--plugin`` library's creators available to this process's builds, loading each library once per
    process (one handle per real path and content; a copy with the same SHA-256 elsewhere shares it): a batch
    (``warm --list``, ``prebuild``) builds several engines in one process, and TensorRT refuses a library loaded
    again.

    * a ``--version-compatible`` build loads it through the plugin registry,
      ``trt.get_plugin_registry().load_library(path)`` (``IPluginRegistry::loadLibrary``, ``pyPlugin.cpp`` main
      L3851), which "will fail and return None if any of the plugins are already registered"
      (``IPluginRegistryDoc.load_library``, ``pyPluginDoc.h``): so a library already loaded so is not loaded again;
      its creators stay registered for every later build that names it;
    * any other build opens it with ``dlopen`` (``ctypes.CDLL``, RTLD_GLOBAL; its static creators register
      themselves), as ``trtexec --staticPlugins`` does.

    A library whose file changed since this process loaded it (another SHA-256 at the same real path) is unloaded
    first where TensorRT can (``deregister_library(handle)``, ``pyPlugin.cpp`` main L3853: "Any resources acquired
    when the library was loaded will be released"); one opened with ``dlopen`` cannot be, and is refused. The
    reload is refused too where the process still maps the old file (:func:`stale_mapping`): ``dlopen`` answers a
    path it has loaded with the copy it holds (ld.so matches the name first), e.g. when the old library could not
    be unloaded (a C++ library with unique symbols stays, ``RTLD_NODELETE``), and the engine would be built with the
    old plugin under the new one's key.

    :return: the handles (kept alive by this module for the life of the process)
    :raises BuildError: TensorRT refused a library, or one changed on disk that this process cannot unload
    """
    with _LOCK:
        return [_load_one(trt, path, versioned) for path in paths]


def _load_one(trt: Any, path: Path, versioned: bool) -> Any:
    """One library of :func:`load`, with the lock held: its handle."""
    how = "registry" if versioned else "dlopen"
    real, digest = os.path.realpath(path), sha256_file(path)[0]
    held = _LOADED.setdefault(real, {})
    if held.get("stale"):
        raise _stale(path, held["stale"])
    changed = bool(held) and held["digest"] != digest
    if changed:
        _unload(trt, path, held)
    held["digest"] = digest
    if how not in held:  # a copy of a loaded library elsewhere holds the same creators: its handle serves
        same = next((h[how] for h in _LOADED.values() if h.get("digest") == digest and how in h), None)
        held[how] = same if same is not None else (
            _registry_load(trt, path) if versioned else ctypes.CDLL(real, mode=ctypes.RTLD_GLOBAL))
    old = stale_mapping(real) if changed else None
    if old:  # the reload registered the old creators again: unregister them, and refuse this path from now on
        held["stale"] = old
        _unload(trt, path, held)
        raise _stale(path, old)
    return held[how]


def stale_mapping(real: str, maps: Path = Path("/proc/self/maps")) -> str | None:
    """What says this process maps an older file than the one now at *real* (its ``/proc/self/maps`` entry of
    that path: another inode, or ``(deleted)``), or None."""
    try:
        now, text = os.stat(real), maps.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith(real):
            continue
        name, inode = fields[5].strip(), int(fields[4])
        if name == f"{real} (deleted)" or (name == real and inode != now.st_ino):
            return f"{name}, inode {inode}, is mapped; the file there now is inode {now.st_ino}"
    return None


def _registry_load(trt: Any, path: Path) -> Any:
    handle = trt.get_plugin_registry().load_library(str(path))
    if handle is None:
        raise BuildError(f"TensorRT's plugin registry refused --plugin {path} (load_library returned nothing)",
                         hint="see TensorRT's messages above: a creator it holds is already registered, e.g. by "
                         "another library of this process or one it loaded before as a plain (not "
                         "--version-compatible) build's plugin; build such engines in separate processes")
    return handle


def _unload(trt: Any, path: Path, held: dict[str, Any]) -> None:
    """Forget what this process loaded from *path* before its content changed. :raises BuildError: a dlopen"""
    if "dlopen" in held:
        raise BuildError(f"--plugin {path} changed on disk after this process loaded it, and a loaded library "
                         "cannot be unloaded (its creators stay registered)",
                         hint="run the build in a new process (a new trtwarm command) so the new library is loaded")
    if "registry" in held:
        handle = held["registry"]
        trt.get_plugin_registry().deregister_library(handle)
        for other in _LOADED.values():  # a copy elsewhere that shared the handle lost its creators with it
            if other.get("registry") is handle:
                del other["registry"]


def _stale(path: Path, why: str) -> BuildError:
    return BuildError(f"--plugin {path} changed on disk after this process loaded it, and this process still maps the "
                      f"old library ({why}): loading it again gives the old code",
                      hint="run the build in a new process (a new trtwarm command) so the new library is loaded")


def serialize_plugins(config: Any, parser: Any, paths: tuple[Path, ...]) -> list[str]:
    """Give the version-compatible build every plugin library to carry: those the parser says the network uses
    (``parser.get_used_vc_plugin_libraries()``) and the ``--plugin`` ones, each once, as
    ``config.plugins_to_serialize`` (``IBuilderConfig.plugins_to_serialize``, pyCore.cpp; NvInfer.h L11848-11856)."""
    query = getattr(parser, "get_used_vc_plugin_libraries", None)  # a parser without it names none
    used = [str(p) for p in query()] if query is not None else []
    libraries = list(dict.fromkeys([*used, *(str(p) for p in paths)]))
    if libraries:
        config.plugins_to_serialize = libraries
    return libraries


__all__ = ["check_serializable", "check_unique", "exported_symbols", "load", "serialize_plugins", "stale_mapping"]
