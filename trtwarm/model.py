"""The model: what the ONNX file is, which files it consists of, their digests, and the input shapes asked of it
(``--shape``/``--profile``: :func:`parse_shape`, :class:`ShapeSpec`).

:func:`inspect_model` reads the ONNX file without its weights (:mod:`trtwarm.onnxwire`, not ``onnx``), lists its real
inputs and every external-data file it references, checks those exist and are large enough, and hashes all of
them. The facts are memoised in the stat cache (:mod:`trtwarm.volume.statcache`), so a repeat start hashes nothing.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from trtwarm.errors import ConfigError, ModelError
from trtwarm.fs.chunked import check_fd
from trtwarm.fs.ops import sha256_file
from trtwarm.onnxwire import Model, WireError, read_model


@dataclass(frozen=True)
class ShapeSpec:
    """One input's optimization-profile shapes, each a tuple of dims."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def as_key(self) -> dict[str, list[int]]:
        """Return the key-document form: ``{"min": [...], "opt": [...], "max": [...]}``."""
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


#: the largest dimension accepted: TensorRT and ONNX Runtime index tensors with signed 32-bit sizes per dimension
MAX_DIM = 2**31 - 1


def _dims(text: str, spec: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(x\d+)*", text):
        raise ConfigError(f"malformed shape {spec!r}: {text!r} is not dims like 1x3x224x224",
                          hint="use --shape NAME=MIN:OPT:MAX, each like 1x3x224x224 (or NAME=DIMS for a fixed shape)")
    dims = tuple(int(d) for d in text.split("x"))
    if 0 in dims:
        raise ConfigError(f"shape {spec!r}: a dimension is 0; an engine for empty tensors is of no use",
                          hint="every dimension must be at least 1, e.g. a batch range 1:8:32")
    if max(dims) > MAX_DIM:
        raise ConfigError(f"shape {spec!r}: dimension {max(dims)} is larger than {MAX_DIM}",
                          hint="a typo? each dimension must fit in 32 bits")
    return dims


def parse_shape(spec: str) -> ShapeSpec:
    """Parse ``NAME=MIN:OPT:MAX`` (or ``NAME=DIMS`` for min = opt = max) and check min <= opt <= max."""
    name, sep, dims = spec.rpartition("=")
    if not sep or not name:
        raise ConfigError(f"malformed shape {spec!r}", hint="use --shape NAME=MIN:OPT:MAX, e.g. input=1x3x224x224:"
                          "8x3x224x224:32x3x224x224")
    parts = dims.split(":")
    if len(parts) not in (1, 3):
        raise ConfigError(f"malformed shape {spec!r}: expected 1 or 3 shapes separated by ':'",
                          hint="use --shape NAME=MIN:OPT:MAX, e.g. input=1x3x224x224:8x3x224x224:32x3x224x224, or "
                          "NAME=DIMS for a fixed shape")
    low, opt, high = (_dims(parts[0], spec),) * 3 if len(parts) == 1 else (_dims(p, spec) for p in parts)
    if not len(low) == len(opt) == len(high):
        raise ConfigError(f"shape {spec!r}: min, opt and max have different ranks")
    if any(a > b for a, b in zip(low, opt)) or any(a > b for a, b in zip(opt, high)):
        raise ConfigError(f"shape {spec!r}: needs min <= opt <= max in every dimension")
    return ShapeSpec(name, low, opt, high)


def shape_set(specs: list[str], flag: str) -> tuple[ShapeSpec, ...]:
    """Parse the shapes of one profile; an input may appear once."""
    if flag == "--shape" and any(";" in s for s in specs):
        raise ConfigError(f"--shape takes one input; {next(s for s in specs if ';' in s)!r} holds several "
                          "separated by ';'", hint="repeat --shape for several inputs (--shape a=... --shape b=...); "
                          "for several optimization profiles of one input, use --profile 'NAME=MIN:OPT:MAX' once per "
                          "profile (TensorRT)")
    shapes = tuple(parse_shape(s.strip()) for s in specs)
    names = [s.name for s in shapes]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError(f"{flag} names input {', '.join(map(repr, twice))} more than once",
                          hint="give each input once per profile; for a range, use NAME=MIN:OPT:MAX; for several "
                          "profiles (TensorRT), repeat --profile")
    return shapes


@dataclass(frozen=True)
class InputInfo:
    """A graph input that is not an initializer: name, element type name and dims (None for symbolic)."""

    name: str
    dtype: str
    dims: tuple[int | None, ...]


@dataclass(frozen=True)
class ModelFile:
    """One file the model consists of; *location* is relative to the ONNX file's directory ("" for the ONNX)."""

    location: str
    sha256: str
    bytes: int


@dataclass(frozen=True)
class ModelFacts:
    """Everything trtwarm needs to know about a model: its files with digests, and its inputs."""

    onnx: ModelFile
    external: tuple[ModelFile, ...]
    inputs: tuple[InputInfo, ...]

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-able form (for the stat cache)."""
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ModelFacts:
        """Rebuild from :meth:`to_json` output. :raises (KeyError, TypeError): on a malformed document."""
        return cls(ModelFile(**doc["onnx"]), tuple(ModelFile(**f) for f in doc["external"]),
                   tuple(InputInfo(i["name"], i["dtype"], tuple(i["dims"])) for i in doc["inputs"]))

    def input(self, name: str) -> InputInfo | None:
        """Return the input called *name*, if any."""
        return next((i for i in self.inputs if i.name == name), None)


def check_model_path(path: Path) -> os.stat_result:
    """Check that *path* is a non-empty regular file we can read, and return its stat.

    :raises ModelError: missing, a directory, empty or unreadable
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ModelError(f"model {path} does not exist", hint="check --model and that the model volume is mounted")\
            from None
    except OSError as exc:
        raise ModelError(f"cannot read model {path}: {exc.strerror}") from exc
    if not path.is_file():
        raise ModelError(f"model {path} is not a regular file", hint="--model must name the .onnx file itself")
    if st.st_size == 0:
        raise ModelError(f"model {path} is empty (0 bytes)", hint="the model download or copy did not finish")
    if not os.access(path, os.R_OK):
        raise ModelError(f"model {path} is not readable by this user")
    return st


def external_path(model: Path, location: str) -> Path:
    """The external-data file *location* of *model*. :raises ModelError: not a relative path beside the model"""
    rel = PurePosixPath(location)
    if not location or rel.is_absolute() or ".." in rel.parts:
        raise ModelError(f"model {model} references external data {location!r} outside its directory",
                         hint="external-data locations must be relative paths beside the .onnx file")
    return model.parent / rel


def _parse(model: Path) -> Model:
    """Read the ONNX file's facts with :mod:`trtwarm.onnxwire` (no ``onnx`` import: 0.5-2.4 s on a small node).

    :raises ModelError: not an ONNX ModelProto, or one without an IR version, nodes or outputs
    """
    try:
        proto = read_model(model.read_bytes())
    except WireError as exc:
        raise ModelError(f"model {model} is not an ONNX file ({exc})",
                         hint="--model must be an ONNX ModelProto (.onnx)") from None
    except OSError as exc:
        raise ModelError(f"model {model} cannot be read: {exc.strerror}", hint="check --model") from None
    if proto.ir_version <= 0 or not proto.nodes or not proto.outputs:
        raise ModelError(f"model {model} is not an ONNX model (no IR version, nodes or outputs)",
                         hint="--model must be an ONNX ModelProto (.onnx)")
    return proto


def inspect_uncached(model: Path, before: dict[str, os.stat_result] | None = None) -> ModelFacts:
    """Parse, validate and hash *model* and its external data (no stat cache).

    :param before: if given, filled with each file's stat taken just before it was hashed ("" is the ONNX file)

    :raises ModelError: not ONNX, or external data missing, escaping its directory or too short
    """
    proto = _parse(model)
    inputs = [InputInfo(name, dtype, dims) for name, dtype, dims in proto.inputs]
    external = []
    for location, needed in sorted(proto.external.items()):
        path = external_path(model, location)
        if not path.is_file():
            raise ModelError(f"model {model} references external data {location!r}, which is missing",
                             hint=f"copy {location} next to {model.name}")
        if before is not None:
            before[location] = path.stat()
        digest, size = sha256_file(path)
        if size < needed:
            raise ModelError(f"external data {location!r} of {model} holds {size} bytes; the model needs {needed}",
                             hint="the external-data file is truncated or from another export")
        external.append(ModelFile(location, digest, size))
    if before is not None:
        before[""] = model.stat()
    digest, size = sha256_file(model)
    return ModelFacts(ModelFile("", digest, size), tuple(external), tuple(inputs))


def digests_hold(model: Path, facts: ModelFacts) -> bool:
    """Whether the model's files still hash to the digests *facts* names (an untrusted record's check). Each file is
    opened once (links followed: a model may be a ConfigMap's link; never waiting on a FIFO) and only a regular file
    of the recorded size is read, through that descriptor: a record cannot make init block or read a huge file."""
    for path, f in [(model, facts.onnx), *((model.parent / f.location, f) for f in facts.external)]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != f.bytes or not check_fd(fd, f.bytes, f.sha256):
                return False
        except OSError:
            return False
        finally:
            os.close(fd)
    return True


def validate_shapes(facts: ModelFacts, shapes: tuple[ShapeSpec, ...]) -> None:
    """Check every ``--shape`` against the model's inputs: known name, same rank, fixed dims respected.

    :raises ConfigError: naming the offending input and listing the real ones
    """
    names = ", ".join(i.name for i in facts.inputs) or "(none)"
    for spec in shapes:
        info = facts.input(spec.name)
        if info is None:
            raise ConfigError(f"--shape names input {spec.name!r}, which the model does not have",
                              hint=f"the model's inputs are: {names}")
        if info.dims and len(info.dims) != len(spec.opt):
            raise ConfigError(f"--shape {spec.name}: rank {len(spec.opt)}, but the model's input has rank "
                              f"{len(info.dims)} {_fmt(info.dims)}")
        for i, fixed in enumerate(info.dims):
            if fixed is not None and not spec.min[i] == spec.opt[i] == spec.max[i] == fixed:
                raise ConfigError(f"--shape {spec.name}: dimension {i} is fixed to {fixed} in the model "
                                  f"{_fmt(info.dims)}")


def unshaped_dynamic_inputs(facts: ModelFacts, shapes: tuple[ShapeSpec, ...]) -> list[str]:
    """Inputs with a symbolic dimension that no ``--shape``/``--profile`` covers, as ``'name' [?x16]``."""
    given = {s.name for s in shapes}
    return [f"{i.name!r} [{_fmt(i.dims)}]" for i in facts.inputs if None in i.dims and i.name not in given]


def _fmt(dims: tuple[int | None, ...]) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


__all__ = ["MAX_DIM", "InputInfo", "ModelFacts", "ModelFile", "ShapeSpec", "check_model_path", "inspect_uncached",
           "parse_shape", "shape_set", "unshaped_dynamic_inputs", "validate_shapes"]
