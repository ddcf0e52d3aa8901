"""What a shared object says about itself, read from the file without loading it: ELF64 little-endian (x86_64 and
aarch64 Linux, the only platforms TensorRT ships for).

Loading a library runs its code (static initializers) and needs its dependencies, so trtwarm reads instead:

* the dynamic section: ``DT_NEEDED`` (the libraries it links, e.g. ``libcudart.so.12``), ``DT_SONAME``,
  ``DT_RUNPATH``/``DT_RPATH``. Found through the program headers' ``PT_DYNAMIC`` segment, as the dynamic loader finds
  it (present in every loadable object, even one stripped of its section headers), its string table through the
  ``PT_LOAD`` segment that maps ``DT_STRTAB``; else through the section headers (``SHT_DYNAMIC`` and its link);
* the defined symbols of ``.dynsym`` (what a ``--plugin`` library exports).

Every malformed or hostile input is a :class:`ValueError` (with what is wrong), never another exception, and no
read is larger than :data:`TABLE_LIMIT`.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

TABLE_LIMIT = 64 << 20  # a dynamic section, symbol or string table larger than this is no library's
_PT_LOAD, _PT_DYNAMIC = 1, 2
_SHT_DYNAMIC, _SHT_DYNSYM = 6, 11
_DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 1, 5, 10, 14, 15, 29


@dataclass(frozen=True)
class Dynamic:
    """A shared object's dynamic section, the parts the dynamic loader resolves names with."""

    needed: tuple[str, ...]
    soname: str | None
    runpath: tuple[str, ...]  # DT_RUNPATH, else DT_RPATH, split at ':' (``$ORIGIN`` left as written)
    rpath: bool = False  # it is DT_RPATH, which ld.so searches before LD_LIBRARY_PATH (DT_RUNPATH: after)


def _unpack(fmt: str, data: bytes, offset: int = 0) -> tuple[int, ...]:
    try:
        return struct.unpack_from(fmt, data, offset)
    except struct.error:
        raise ValueError("truncated") from None


def _read(handle: BinaryIO, offset: int, size: int) -> bytes:
    if size < 0 or size > TABLE_LIMIT or offset < 0:
        raise ValueError("a table of it is implausibly large or misplaced")
    if offset + size > os.fstat(handle.fileno()).st_size:
        raise ValueError("truncated (a table of it lies past its end)")
    handle.seek(offset)
    data = handle.read(size)
    if len(data) != size:
        raise ValueError("truncated")
    return data


def _tables(handle: BinaryIO) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """``(program headers, section headers)`` of an ELF64 LE shared object. :raises ValueError: anything else"""
    head = handle.read(64)
    if head[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if head[4:6] != b"\x02\x01" or _unpack("<H", head, 16)[0] != 3:
        raise ValueError("not a 64-bit little-endian shared object (ET_DYN)")
    phoff, shoff = _unpack("<QQ", head, 0x20)
    phentsize, phnum, shentsize, shnum = _unpack("<HHHH", head, 0x36)
    programs = [_unpack("<IIQQQQQQ", _read(handle, phoff + i * phentsize, 56)) for i in range(phnum)] \
        if phentsize >= 56 else []
    sections = [_unpack("<IIQQQQIIQQ", _read(handle, shoff + i * shentsize, 64)) for i in range(shnum)] \
        if shentsize >= 64 and shoff else []
    return programs, sections


def _string(table: bytes, offset: int) -> str:
    if not 0 <= offset < len(table):
        raise ValueError("a name points outside its string table")
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def _segment_entries(handle: BinaryIO, programs: list[tuple[int, ...]],
                     unmapped: bool) -> tuple[list[tuple[int, int]], bytes] | None:
    """Through ``PT_DYNAMIC``; ``DT_STRTAB`` is an address, mapped to the file by the ``PT_LOAD`` that holds it (with
    *unmapped*, where none does, taken as a file offset: what a library linked at address 0 means)."""
    segment = next((p for p in programs if p[0] == _PT_DYNAMIC), None)
    if segment is None:
        return None
    raw = _read(handle, segment[2], segment[5])
    entries = [_unpack("<qQ", raw, i) for i in range(0, len(raw) - 15, 16)]
    tags = dict(entries[:next((i for i, e in enumerate(entries) if e[0] == 0), len(entries))])
    if _DT_STRTAB not in tags:
        return None
    address = tags[_DT_STRTAB]
    load = next((p for p in programs if p[0] == _PT_LOAD and p[3] <= address < p[3] + p[5]), None)
    if load is None and not unmapped:
        return None
    offset = address - load[3] + load[2] if load is not None else address
    return entries, _read(handle, offset, tags.get(_DT_STRSZ, 0))


def _entries(handle: BinaryIO, programs: list[tuple[int, ...]],
             sections: list[tuple[int, ...]]) -> tuple[list[tuple[int, int]], bytes]:
    """The ``(tag, value)`` entries of the dynamic section and its string table: through the program headers, else
    the section headers (``SHT_DYNAMIC`` and the string table it links)."""
    found = _segment_entries(handle, programs, unmapped=False)
    if found is not None:
        return found
    section = next((s for s in sections if s[1] == _SHT_DYNAMIC), None)
    if section is not None and section[6] < len(sections):
        raw, strings = _read(handle, section[4], section[5]), sections[section[6]]
        return [_unpack("<qQ", raw, i) for i in range(0, len(raw) - 15, 16)], _read(handle, strings[4], strings[5])
    found = _segment_entries(handle, programs, unmapped=True)
    if found is None:
        raise ValueError("it has no dynamic section with a string table")
    return found


def dynamic(path: Path) -> Dynamic:
    """The dynamic section of the shared object *path*. :raises OSError: unreadable; ValueError: not such an object"""
    with open(path, "rb") as handle:
        entries, strings = _entries(handle, *_tables(handle))
    needed, soname, runpath, rpath = [], None, None, None
    for tag, value in entries:
        if tag == 0:
            break
        if tag == _DT_NEEDED:
            needed.append(_string(strings, value))
        elif tag == _DT_SONAME:
            soname = _string(strings, value)
        elif tag == _DT_RUNPATH:
            runpath = _string(strings, value)
        elif tag == _DT_RPATH:
            rpath = _string(strings, value)
    search = runpath if runpath is not None else rpath  # ld.so ignores DT_RPATH when DT_RUNPATH is there
    return Dynamic(tuple(needed), soname, tuple(p for p in (search or "").split(":") if p),
                   rpath=runpath is None and rpath is not None)


def exported_symbols(path: Path) -> set[str]:
    """The defined symbols of the shared object's ``.dynsym``.

    :raises OSError: unreadable; ValueError: not an ELF64 LE shared object, or no dynamic symbol table (what instead)
    """
    with open(path, "rb") as handle:
        _programs, sections = _tables(handle)
        index = next((i for i, sec in enumerate(sections) if sec[1] == _SHT_DYNSYM), None)
        if index is None:
            raise ValueError("it has no dynamic symbol table")
        if sections[index][6] >= len(sections):
            raise ValueError("its symbol table links no string table")
        symbols = _read(handle, sections[index][4], sections[index][5])
        names = _read(handle, sections[sections[index][6]][4], sections[sections[index][6]][5])
    found = set()
    for offset in range(0, len(symbols) - 23, 24):
        name, _info, _other, shndx = _unpack("<IBBH", symbols, offset)
        if name and shndx:  # defined here, not imported
            found.add(_string(names, name))
    return found


__all__ = ["TABLE_LIMIT", "Dynamic", "dynamic", "exported_symbols"]
