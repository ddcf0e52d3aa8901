"""A checker of the Kubernetes Pod Security Standards (baseline and restricted) for rendered Pod specs.

Written from the rules table of kubernetes/website ``content/en/docs/concepts/security/pod-security-standards.md``
(the policy the PodSecurity admission controller enforces); no maintained Python library implements it. Each rule
returns the violations it finds as readable strings, so a failing test says which field of which container broke
which rule.
"""

from __future__ import annotations

from typing import Any

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]


def baseline(spec: dict[str, Any]) -> list[str]:
    """Violations of the ``baseline`` profile."""
    out = [f"spec.{f}" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f)]
    out += [f"volume {v['name']}: hostPath" for v in spec.get("volumes", []) if "hostPath" in v]
    out += [f"sysctl {s['name']}" for s in (spec.get("securityContext") or {}).get("sysctls", [])
            if s["name"] not in SAFE_SYSCTLS]
    contexts = [("pod", spec.get("securityContext") or {})]
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        contexts.append((c["name"], sc))
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        added = set((sc.get("capabilities") or {}).get("add", [])) - BASELINE_CAPABILITIES
        out += [f"{c['name']}: adds capability {a}" for a in sorted(added)]
        out += [f"{c['name']}: hostPort {p['hostPort']}" for p in c.get("ports", []) if p.get("hostPort")]
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{c['name']}: procMount {sc['procMount']}")
    for who, sc in contexts:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{who}: hostProcess")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{who}: seccomp Unconfined")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"{who}: AppArmor Unconfined")
        selinux = sc.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in ("", "container_t", "container_init_t", "container_kvm_t",
                                           "container_engine_t") or selinux.get("user") or selinux.get("role"):
            out.append(f"{who}: seLinuxOptions {selinux}")
    return out


def restricted(spec: dict[str, Any], minor: int = 37) -> list[str]:
    """Violations of the ``restricted`` profile (which includes baseline) as Kubernetes 1.*minor* enforces it: image
    volumes are admitted from 1.33 (kubernetes/kubernetes#130394 added ``volume.Image`` to
    ``check_restrictedVolumes.go``; absent on release-1.32)."""
    out = baseline(spec)
    pod = spec.get("securityContext") or {}
    allowed = RESTRICTED_VOLUMES | ({"image"} if minor >= 33 else set())
    out += [f"volume {v['name']}: type {sorted(set(v) - {'name'})}" for v in spec.get("volumes", [])
            if not set(v) - {"name"} <= allowed]
    if pod.get("runAsUser") == 0:
        out.append("pod: runAsUser 0")
    for c in _containers(spec):
        sc, name = c.get("securityContext") or {}, c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation is not false")
        if not (sc.get("runAsNonRoot") is True or (pod.get("runAsNonRoot") is True and "runAsNonRoot" not in sc)):
            out.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser") == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile {seccomp}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []):
            out.append(f"{name}: capabilities.drop lacks ALL")
        out += [f"{name}: adds capability {a}" for a in caps.get("add", []) if a != "NET_BIND_SERVICE"]
    return out
