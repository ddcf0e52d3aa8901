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
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from trtwarm.errors import BuildError, ConfigError

ENTRY_POINTS = ("setLoggerFinder",)
CREATOR_ENTRY_POINTS = ("getPluginCreators", "getCreators")  # IPluginV2 libraries, IPluginV3 libraries
_TABLE_LIMIT = 64 << 20  # a dynamic symbol or string table larger than this is no plugin library's


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


def exported_symbols(path: Path) -> set[str]:
    """The defined symbols of an ELF64 little-endian shared object's ``.dynsym`` (x86_64 and aarch64 Linux).

    :raises ValueError: not such a shared object (with what it is instead)
    """
    with open(path, "rb") as handle:
        head = handle.read(64)
        if head[:4] != b"\x7fELF":
            raise ValueError("not an ELF file")
        if head[4:6] != b"\x02\x01" or struct.unpack_from("<H", head, 16)[0] != 3:
            raise ValueError("not a 64-bit little-endian shared object (ET_DYN)")
        shoff, = struct.unpack_from("<Q", head, 0x28)
        entsize, count = struct.unpack_from("<HH", head, 0x3A)
        handle.seek(shoff)
        sections = [struct.unpack_from("<IIQQQQIIQQ", handle.read(entsize)) for _ in range(count)]

        def read(index: int) -> bytes:
            _name, _type, _flags, _addr, offset, size = sections[index][:6]
            if size > _TABLE_LIMIT:
                raise ValueError("its symbol table is implausibly large")
            handle.seek(offset)
            return handle.read(size)

        dynsym = next((i for i, sec in enumerate(sections) if sec[1] == 11), None)  # SHT_DYNSYM
        if dynsym is None:
            raise ValueError("it has no dynamic symbol table")
        symbols, names = read(dynsym), read(sections[dynsym][6])  # sh_link: its string table
    found = set()
    for offset in range(0, len(symbols) - 23, 24):
        name, _info, _other, shndx = struct.unpack_from("<IBBH", symbols, offset)
        if name and shndx:  # defined here, not imported
            found.add(names[name:names.index(b"\0", name)].decode("ascii", "replace"))
    return found


def check_serializable(paths: tuple[Path, ...]) -> None:
    """:raises ConfigError: a library ``IPluginRegistry.load_library`` would refuse, so it could not be serialized
    into a version-compatible engine (not a shared object, or without the entry points)."""
    for path in paths:
        try:
            symbols = exported_symbols(path)
        except (OSError, ValueError, struct.error, IndexError) as exc:
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


def load_for_serialization(trt: Any, paths: tuple[Path, ...]) -> list[Any]:
    """Load each library through the plugin registry (``trt.get_plugin_registry().load_library(path)``, the
    binding of ``IPluginRegistry::loadLibrary``; ``pyPlugin.cpp``), as a version-compatible build needs.
    :raises BuildError: TensorRT refused one (it returns no handle)."""
    registry = trt.get_plugin_registry()
    handles = []
    for path in paths:
        handle = registry.load_library(str(path))
        if handle is None:
            raise BuildError(f"TensorRT's plugin registry refused --plugin {path} (load_library returned nothing)",
                             hint="see TensorRT's messages above; a creator it holds may already be registered")
        handles.append(handle)
    return handles


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


__all__ = ["check_serializable", "check_unique", "exported_symbols", "load_for_serialization", "serialize_plugins"]
