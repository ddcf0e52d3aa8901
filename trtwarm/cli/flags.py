"""The flags of ``trtwarm init`` (and of the commands that take them: ``key``, ``warm``, ``prebuild`` rows, ``verify``).

Only definitions: :mod:`trtwarm.config` turns the parsed namespace into :class:`~trtwarm.config.Settings`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from trtwarm.cli.defaults import CACHE_PRESET, HANDOFF_PRESET
from trtwarm.transport.limits import SETTINGS


def add_init_flags(p: argparse.ArgumentParser) -> None:
    """The flags that make the key (``key`` takes them and :func:`add_run_flags`, so ``key --explain`` accepts a
    Pod's whole init command line)."""
    p.add_argument("--model", help="the ONNX file (external-data files beside it)")
    p.add_argument("--cache-dir", default=CACHE_PRESET, help="the shared cache volume (%(default)s; outside "
                   "Kubernetes, when this user cannot create it: ~/.cache/trtwarm/cache)")
    p.add_argument("--builder", default="tensorrt", help="tensorrt (default), onnxruntime or command")
    p.add_argument("--precision", help="fp32|fp16|bf16|int8|fp8|model (default depends on the builder; with "
                   "--builder tensorrt all but model are TensorRT 10.x only)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=MIN:OPT:MAX",
                   help="an input's profile, dims like 1x3x224x224; repeatable")
    p.add_argument("--profile", action="append", default=[], metavar="NAME=MIN:OPT:MAX;...",
                   help="TensorRT: one optimization profile (its inputs separated by ';'); repeat for several")
    p.add_argument("--workspace", help="TensorRT workspace pool limit, e.g. 4G")
    p.add_argument("--opt-level", type=int, help="TensorRT builder optimization level 0-5")
    p.add_argument("--hardware-compat", default="none", choices=["none", "ampere+", "same-cc"],
                   help="TensorRT hardware compatibility: an engine for this GPU only (%(default)s), any Ampere or "
                   "newer GPU, or any GPU of this compute capability")
    p.add_argument("--version-compatible", action="store_true", help="build a version-compatible engine")
    p.add_argument("--exclude-lean-runtime", action="store_true", help="with --version-compatible")
    p.add_argument("--tf32", default="on", choices=["on", "off"], help="allow TF32 (TensorRT) (%(default)s)")
    p.add_argument("--plugin", action="append", default=[], metavar="PATH", help="plugin library; repeatable")
    p.add_argument("--calibration-cache", metavar="FILE", help="TensorRT 10.x only, INT8: replay this calibration "
                   "cache")
    p.add_argument("--strip-weights", action="store_true", help="TensorRT: a weight-stripped engine, refitted from "
                   "the ONNX weights on load")
    p.add_argument("--layer-info", default="names", choices=["names", "detailed"], help="TensorRT profiling "
                   "verbosity: detailed records each layer's precision in the manifest")
    p.add_argument("--name", help="readable model name for the entry (default: the model file's stem)")
    p.add_argument("--key-extra", action="append", default=[], metavar="K=V", help="extra key field; repeatable")
    p.add_argument("--build-command", help="command builder template with {model} {output} {workdir}")
    p.add_argument("--builder-version", help="command builder: the tool's exact version (part of the key)")
    p.add_argument("--ort-provider", default="cpu", help="onnxruntime builder: cpu, cuda or tensorrt (%(default)s)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"], help="command builder's device "
                   "(%(default)s: the GPU if NVML sees one)")
    p.add_argument("--tensorrt-version", metavar="VERSION[+cuN]", help="tensorrt builder: declare the exact "
                   "TensorRT version (e.g. 10.16.1.11+cu12) instead of importing TensorRT (pull-only consumers); the +cuN "
                   "part is required where no TensorRT is installed or the installed one cannot tell its CUDA")
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="log lines on stderr as text or one JSON object each (%(default)s)")


def add_run_flags(init: argparse.ArgumentParser) -> None:
    """The flags of ``init`` that do not change the key: hand-off, locking, verification, Triton."""
    init.add_argument("--handoff-dir", default=HANDOFF_PRESET, help="engine.json + engine link (%(default)s; outside "
                      "Kubernetes, when this user cannot create it: ~/.cache/trtwarm/handoff)")
    init.add_argument("--handoff", choices=["copy", "link"], help="copy: hand over this Pod's copy of the verified "
                      "files (hashed as copied; a reflink where the filesystem offers it), so nothing written to "
                      "the volume after the check reaches the server; link: the `engine` link points into the "
                      "volume (default: copy under an enforced trust policy, else link)")
    init.add_argument("--lock-timeout", default="1h", help="longest wait for another builder (%(default)s)")
    init.add_argument("--lock-mode", default="auto", choices=["auto", "flock", "lease"],
                      help="how the build lock is held: flock, a heartbeat lease file (for filesystems without "
                      "working locks), or auto: chosen from the mount (%(default)s)")
    init.add_argument("--progress-interval", default="10s", help="seconds between progress lines (%(default)s)")
    init.add_argument("--read-only", action="store_true", help="never build; wait for another builder's entry")
    init.add_argument("--events-timeout", default="2s", help="longest wait at exit for Kubernetes Events to be sent "
                      "(%(default)s)")
    init.add_argument("--verify", default="digest", choices=["stamp", "digest", "load"],
                      help="check on a hit: stamp (skip the hash of files this node verified and that did not "
                      "change), digest (SHA-256), load (digest and a real load) (%(default)s)")
    init.add_argument("--stamp-dir", help="node-local directory, private to this uid, of the stamps of --verify stamp "
                      "and of the signatures verified under a trust policy (default: <handoff-dir>/stamps)")
    init.add_argument("--build-dir", help="where a build, its load check and its hash happen, in a new directory only "
                      "this process may enter, before the engine is copied onto the cache volume; never on the cache "
                      "volume or in --handoff-dir (default: the temporary directory, TMPDIR; in a Pod an emptyDir "
                      "with room for the engine)")
    init.add_argument("--stamp-max-age", default="1d", help="re-hash a file whose stamp, and re-check a signature "
                      "whose record, is older (%(default)s)")
    init.add_argument("--triton-repo", help="also lay out a Triton model repository here")
    init.add_argument("--triton-model", help="the model's name in --triton-repo")
    add_trust_flags(init)
    init.add_argument("--signing-key", help="sign what this Pod publishes with this private key PEM")
    init.add_argument("--remote", metavar="s3://BUCKET/PREFIX", help="central engine repository: pull before "
                      "building, push after (endpoint and credentials from the AWS_* variables); or "
                      "oci://REGISTRY/REPOSITORY (credentials from the registry auth file)")
    add_insecure_flag(init)
    init.add_argument("--seed-cache", action="append", default=[], metavar="DIR", help="a read-only lower tier "
                      "looked up after --cache-dir and before --remote, handed over in place (repeatable; e.g. an "
                      "engine image mounted at /models: /models/cache)")
    init.add_argument("--remote-push", default="best-effort", choices=["off", "best-effort", "required"],
                      help="push a fresh build to --remote (%(default)s: a failed push is logged, never fatal)")
    add_remote_wait_flags(init)


def add_remote_wait_flags(p: argparse.ArgumentParser) -> None:
    """The bounds on waiting for the store or registry (``init``, ``remote *``, ``prebuild``): the transport
    contract's settings (:data:`trtwarm.transport.limits.SETTINGS`), the same for every backend."""
    for flag, _name, default, text in SETTINGS:
        p.add_argument(flag, help=f"{text} ({default})")


def remote_environ(ns: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """*environ* with the wait flags given on the command line written over their ``TRTWARM_REMOTE_*`` variables."""
    out = dict(environ)
    for flag, name, _default, _text in SETTINGS:
        value = getattr(ns, flag[2:].replace("-", "_"), None)
        if value:
            out[name] = value
    return out


def add_insecure_flag(p: argparse.ArgumentParser) -> None:
    """``--plain-http`` (ORAS's name), alias ``--insecure-registry`` (``init``, ``prebuild``, ``remote``)."""
    p.add_argument("--plain-http", "--insecure-registry", dest="insecure_registry", action="store_true",
                   help="speak plain HTTP, not HTTPS, to an oci:// registry (ORAS's name; --insecure-registry, "
                   "TRTWARM_INSECURE_REGISTRY and TRTWARM_OCI_ALLOW_HTTP are aliases; a loopback registry always "
                   "is; a private CA is SSL_CERT_FILE, docs/oci.md)")


def add_trust_flags(p: argparse.ArgumentParser) -> None:
    """``--trust-policy`` and ``--trust-mode`` (``init`` and ``verify``)."""
    p.add_argument("--trust-policy", help="JSON file: trusted signing keys and their scopes (see docs/trust.md)")
    p.add_argument("--trust-mode", choices=["enforce", "warn", "off"],
                   help="override the policy's mode (default: the policy's, else off)")


__all__ = ["add_init_flags", "add_run_flags", "add_trust_flags"]
