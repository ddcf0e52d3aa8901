"""The ``command`` builder: runs a user-given template such as ``trtexec --onnx={model} --saveEngine={output}``.

The template is split like a shell command line (no shell runs it; use ``sh -c '...'`` for pipes) and
``{model}``, ``{output}`` and ``{workdir}`` are replaced inside each word. Its output is streamed to the log; a
non-zero exit, or a missing or empty output file, is a build failure. The template and ``--builder-version``
are part of the key, so a new tool version never reuses an old engine.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import shlex
import signal
import time
from pathlib import Path
from typing import Any

from trtwarm.builders.base import Builder
from trtwarm.errors import BuildError, ConfigError
from trtwarm.model import ModelFacts

log = logging.getLogger("trtwarm.build")
_TAIL_LINES = 40
#: after SIGTERM to the build's process group, how long its processes get before SIGKILL (well inside Kubernetes'
#: default 30 s termination grace period, which also covers the init's own cleanup)
STOP_GRACE_SECONDS = 10.0


class CommandBuilder(Builder):
    """Build by running an external command."""

    name = "command"
    engine_filename = "engine.plan"
    precisions = ("fp32", "fp16", "bf16", "int8", "fp8", "model", "best")
    default_precision = "model"

    def _argv(self) -> list[str]:
        template = self.settings.build_command
        if not template:
            raise ConfigError("--builder command needs --build-command", hint="e.g. --build-command 'trtexec "
                              "--onnx={model} --saveEngine={output}'")
        if "{output}" not in template:  # name what may be a misspelt placeholder ({outptu})
            words = ", ".join(sorted(set(re.findall(r"(?<!\$)\{\w+\}", template)) - {"{model}", "{workdir}"}))
            raise ConfigError("--build-command must write to {output}" + (f" (it has {words})" if words else ""),
                              hint="put {output} where the engine goes; the placeholders are {model}, {output} and "
                              "{workdir}")
        try:
            return shlex.split(template)
        except ValueError as exc:
            raise ConfigError(f"--build-command cannot be split into words: {exc}") from exc

    def identity(self) -> dict[str, Any]:
        """Name, the command template and the user's ``--builder-version``."""
        self._argv()
        if not self.settings.builder_version:
            raise ConfigError("--builder command needs --builder-version", hint="give the tool's exact version, e.g. "
                              "--builder-version trtexec-10.13.0.35, so a new version never reuses an old engine")
        return {"name": "command", "version": self.settings.builder_version, "command": self.settings.build_command}

    def replay_witnesses(self) -> list[Path]:
        """None needed: the identity is the flags (the command and ``--builder-version``), which a repeat matches."""
        return []

    def build(self, model: Path, facts: ModelFacts, staging: Path) -> Path:
        """Run the command with its placeholders filled; return the output file."""
        output = staging / self.engine_filename
        values = {"{model}": str(model), "{output}": str(output), "{workdir}": str(staging)}
        argv = []
        for word in self._argv():
            for placeholder, value in values.items():
                word = word.replace(placeholder, value)
            argv.append(word)
        log.info("running build command: %s", shlex.join(argv))
        tail = self._run(argv, staging)
        if not output.is_file() or output.stat().st_size == 0:
            raise BuildError(f"build command exited 0 but wrote no engine at {{output}} ({output.name})",
                             hint="the command must write the engine to the {output} path", log_tail=tail)
        return output

    def _run(self, argv: list[str], cwd: Path) -> str:
        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        try:  # its own process group (session), so stopping the build reaches every process it started
            import subprocess  # only a build runs a command

            proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
        except OSError as exc:
            raise BuildError(f"cannot run build command {argv[0]!r}: {exc.strerror}",
                             hint="check that the tool is installed in this image and on PATH") from exc
        assert proc.stdout is not None
        with proc:
            try:
                for line in proc.stdout:
                    line = line.rstrip("\n")
                    tail.append(line)
                    log.info("[build] %s", line)
            except BaseException:  # SIGTERM/SIGINT (see cli), or anything else: never leave the build running
                stop_group(proc.pid)
                raise
        text = "\n".join(tail)
        if proc.returncode != 0:
            raise BuildError(f"build command exited with status {proc.returncode}", log_tail=text)
        return text


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group *pgid*, from ``/proc``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited meanwhile
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            found.append(int(pid))
    return found


def stop_group(pgid: int, grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process group *pgid*; SIGKILL what is left of it after *grace* seconds. Logs what it did."""
    log.warning("stopping the build command's process group %d (SIGTERM, SIGKILL after %.0f s)", pgid, grace)
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while _group_members(pgid):
        if time.monotonic() > deadline:
            log.warning("build processes %s ignored SIGTERM for %.0f s; killing them", _group_members(pgid), grace)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        time.sleep(0.05)


__all__ = ["STOP_GRACE_SECONDS", "CommandBuilder", "stop_group"]
