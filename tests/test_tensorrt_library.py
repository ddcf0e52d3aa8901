"""What TensorRT's libraries and packages say about themselves, read without TensorRT: the ELF reader (real shared
objects built with ``cc``, a copy stripped of its section headers, and fuzzed bytes), the CUDA major from the
packages beside TensorRT, and from what ``import tensorrt`` maps into a real process."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import run_trtwarm

import standins as st
from trtwarm.builders.tensorrt import elf, library
from trtwarm.builders.tensorrt.cudamajor import dpkg_installed, from_dist, from_packages

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (pip install '.[test]')")


def test_the_dynamic_section_of_a_real_library_is_read_with_or_without_section_headers(tmp_path: Path) -> None:
    lib = st.libnvinfer(tmp_path / "lib", cuda=12)
    dyn = elf.dynamic(lib)
    assert "libcudart.so.12" in dyn.needed and dyn.soname == "libnvinfer.so.10" and dyn.runpath == ("$ORIGIN",)
    assert library.cuda_major(lib) == ("12", "libcudart.so.12 (linked by libnvinfer.so.10)")
    assert library.runpath_of([lib]) == [str(lib.parent)]
    stripped = tmp_path / "stripped.so"  # what the loader reads: the program headers' PT_DYNAMIC alone
    data = bytearray(lib.resolve().read_bytes())
    struct.pack_into("<Q", data, 0x28, 0)
    struct.pack_into("<HHH", data, 0x3A, 0, 0, 0)
    stripped.write_bytes(bytes(data))
    assert elf.dynamic(stripped) == dyn
    with pytest.raises(ValueError, match="no dynamic symbol table"):
        elf.exported_symbols(stripped)
    assert set(library.VERSION_FUNCTIONS) <= elf.exported_symbols(lib)
    assert library.versions(lib) == ((10, 16, 1, 11), "")
    missing, why = library.versions(tmp_path / "none.so")
    assert missing is None and "none.so" in why


@hypothesis.settings(max_examples=400, deadline=None, database=None, derandomize=True)
@hypothesis.given(hypothesis.strategies.data())
def test_damaged_elf_files_are_a_value_error_never_another_exception(tmp_path_factory: pytest.TempPathFactory,
                                                                    data: hypothesis.strategies.DataObject) -> None:
    base = _base_library(tmp_path_factory)
    blob = bytearray(base)
    for _ in range(data.draw(hypothesis.strategies.integers(1, 8))):
        at = data.draw(hypothesis.strategies.integers(0, 200 if data.draw(hypothesis.strategies.booleans())
                                                       else len(blob) - 1))
        blob[at] = data.draw(hypothesis.strategies.integers(0, 255))
    blob = blob[:data.draw(hypothesis.strategies.integers(0, len(blob)))]
    path = tmp_path_factory.getbasetemp() / "fuzzed.so"
    path.write_bytes(bytes(blob))
    for read in (elf.dynamic, elf.exported_symbols):
        try:
            read(path)
        except ValueError:
            pass


_BASE: list[bytes] = []


def _base_library(factory: pytest.TempPathFactory) -> bytes:
    if not _BASE:
        _BASE.append(st.libnvinfer(factory.mktemp("base"), cuda=12).resolve().read_bytes())
    return _BASE[0]


def test_the_cuda_major_from_the_packages_beside_tensorrt(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Package: libnvinfer10\nStatus: install ok installed\nVersion: 10.16.1.11-1+cuda12.9\n\n"
                      "Package: cuda-cudart-13-0\nStatus: deinstall ok config-files\nVersion: 13.0.96-1\n\n"
                      "Package: zlib1g\nStatus: install ok installed\nVersion: 1:1.3\n")
    assert dpkg_installed(status) == {"libnvinfer10": "10.16.1.11-1+cuda12.9", "zlib1g": "1:1.3"}
    if from_packages(10) is None:  # this machine's pip has no CUDA runtime: the Debian package alone decides
        assert from_packages(10, status) == ("12", "the Debian package libnvinfer10 10.16.1.11-1+cuda12.9")
    assert from_packages(11, tmp_path / "no-dpkg") == from_packages(11, status)  # libnvinfer11: not installed
    assert from_dist("tensorrt-cu13-bindings") == "13" and from_dist("tensorrt_cu12_libs") == "12"
    assert from_dist("tensorrt") is None and from_dist("trtwarm-test-tensorrt") is None


def _runtime_dist(where: Path, name: str, version: str) -> None:
    info = where / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.parametrize("runtime,version,cuda", [("nvidia-cuda-runtime-cu12", "12.9.79", "12"),
                                                  ("nvidia-cuda-runtime", "13.0.96", "13")])
def test_a_static_tensorrt_is_keyed_by_the_cuda_runtime_installed_beside_it(tmp_path: Path, model: Path,
                                                                            runtime: str, version: str,
                                                                            cuda: str) -> None:
    """The tarball's wheel (named ``tensorrt``) and a libnvinfer that links CUDA statically say nothing; pip's CUDA
    runtime beside it does (tensorrt_cuN_libs requires nvidia-cuda-runtime-cuN; CUDA 13 drops the suffix)."""
    if from_packages(10) is not None:
        pytest.skip(f"this machine has a CUDA package that names a major: {from_packages(10)}")
    standins = st.pynvml(tmp_path / "standins", [st.H100])
    st.tensorrt(standins, dist="tensorrt")
    _runtime_dist(standins, runtime, version)
    lib = st.libnvinfer(tmp_path / "lib", cuda=None)
    run = run_trtwarm("key", "--json", "--model", str(model), "--shape", "input=1x16:8x16:32x16", "--cache-dir",
                      str(tmp_path / "c"), env={**st.pythonpath(standins), "LD_LIBRARY_PATH": str(lib.parent)})
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["document"]["builder"]["cuda"] == cuda
    assert f"(pip's {runtime} {version})" in run.stderr


def test_an_ngc_style_tensorrt_is_keyed_by_what_import_tensorrt_maps(tmp_path: Path, model: Path) -> None:
    """Nothing on the search path and no package says it, but ``import tensorrt`` loads a libnvinfer (from a place
    only the bindings know) that links libcudart.so.13: /proc/self/maps of the process names it."""
    if from_packages(10) is not None:
        pytest.skip(f"this machine has a CUDA package that names a major: {from_packages(10)}")
    standins = st.pynvml(tmp_path / "standins", [st.H100])
    package = st.tensorrt(standins, dist="tensorrt")
    hidden = st.libnvinfer(tmp_path / "private" / "lib", cuda=13)
    (package / "__init__.py").write_text(f"import ctypes\nctypes.CDLL({str(hidden)!r})\n" +
                                         (package / "__init__.py").read_text())
    run = run_trtwarm("key", "--json", "--model", str(model), "--shape", "input=1x16:8x16:32x16", "--cache-dir",
                      str(tmp_path / "c"), env=st.pythonpath(standins))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["document"]["builder"]["cuda"] == "13"
    assert "runs on CUDA 13 (libcudart.so.13 (linked by libnvinfer.so.10" in run.stderr


class Registry:
    """TensorRT's plugin registry as ``pyPluginDoc.h`` documents it: ``load_library`` returns None when a plugin of
    the library is already registered (a library of the same creators counts), ``deregister_library`` releases
    them."""

    def __init__(self) -> None:
        self.creators: dict[object, str] = {}
        self.calls: list[str] = []

    def load_library(self, path: str) -> object | None:
        content = Path(path).read_bytes()
        self.calls.append(f"load {Path(path).name}")
        if content in self.creators.values():
            return None
        handle = object()
        self.creators[handle] = content  # type: ignore[assignment]
        return handle

    def deregister_library(self, handle: object) -> None:
        self.calls.append("deregister")
        del self.creators[handle]


def test_plugin_libraries_are_loaded_once_per_content_and_reloaded_when_they_change(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from trtwarm.builders.tensorrt import plugins
    from trtwarm.errors import BuildError

    registry = Registry()
    trt = SimpleNamespace(get_plugin_registry=lambda: registry)
    first = st.plugin_library(tmp_path / "a")
    copy = tmp_path / "b" / first.name
    copy.parent.mkdir()
    copy.write_bytes(first.read_bytes())
    [handle] = plugins.load(trt, (first,), versioned=True)
    assert plugins.load(trt, (first,), versioned=True) == [handle]  # a second build in the process
    assert plugins.load(trt, (copy,), versioned=True) == [handle]  # an identical copy elsewhere
    assert registry.calls == [f"load {first.name}"]
    st.compile_library(first.parent, first.name, "void setLoggerFinder(void *f) {}\n"
                       "void *getPluginCreators(int *n) { *n = 1; return 0; }\n")  # rebuilt in place
    [new] = plugins.load(trt, (first,), versioned=True)
    assert new is not handle and registry.calls[1:] == ["deregister", f"load {first.name}"]
    plain = st.plugin_library(tmp_path / "c", "libplain.so")
    [dl] = plugins.load(trt, (plain,), versioned=False)
    assert plugins.load(trt, (plain,), versioned=False) == [dl]
    st.compile_library(plain.parent, plain.name, "int changed(void) { return 1; }\n")
    with pytest.raises(BuildError, match="changed on disk after this process loaded it"):
        plugins.load(trt, (plain,), versioned=False)
