{{/* Guards: values that validate one by one but could never work together are refused at render time, naming the
values. */}}

{{/* Guards for values that validate one by one but break together. */}}
{{- define "trtwarm.checks" -}}
{{- include "trtwarm.checksDayTwo" . }}
{{- include "trtwarm.checkMounts" . }}
{{- if and .Values.exporter.enabled (eq .Values.exporter.mode "native") (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail "exporter.mode=native needs Kubernetes 1.29 or newer (native sidecars); set exporter.mode=legacy" }}
{{- end }}
{{- if and (ne .Values.gc.mode "none") (not .Values.exporter.enabled) }}
{{- fail (printf "gc.mode=%s needs exporter.enabled=true: the exporter holds the Pod's in-use lease (and runs gc in sidecar mode); without it gc could remove an engine a running Pod uses" .Values.gc.mode) }}
{{- end }}
{{- end }}

{{/* Renders that validate but could never become Ready (issue 28 F8), and values that would harm the node (F18) or
expose the signing key (F6): refused at `helm template` time, naming the values. Run whether or not the chart renders
the workload (templates/validate.yaml). */}}
{{- define "trtwarm.checksDayTwo" -}}
{{- $v := .Values }}
{{- $c := include "trtwarm.mainContainer" . | fromYamlArray | first }}
{{- $ports := include "trtwarm.serverPorts" . | fromJson }}
{{- range $probe := list "startupProbe" "readinessProbe" "livenessProbe" }}
{{- $p := index $c $probe | default dict }}
{{- range $how := list "httpGet" "tcpSocket" }}
{{- $port := dig $how "port" "" $p }}
{{- if and (kindIs "string" $port) $port (not (has $port $ports.names)) }}
{{- fail (printf "workload.container.%s.%s.port %q names no port of workload.container.ports (it has %v): the probe could never succeed; rename it there too, or give the number" $probe $how $port $ports.names) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $v.exporter.enabled }}
{{- $triton := or (has "tritonserver" ($c.command | default list)) (contains "tritonserver" $v.workload.container.image.repository) }}
{{- $taken := ternary (list 8000 8001 8002) list $triton }}
{{- range $ports.numbers }}{{ $taken = append $taken (int .) }}{{ end }}
{{- if has (int $v.exporter.port) $taken }}
{{- fail (printf "exporter.port=%v is taken by the inference container (its ports %v%s): the Pod's containers share one network namespace; choose another exporter.port (default 9400)" $v.exporter.port $ports.numbers (ternary ", Triton's 8000/8001/8002" "" $triton)) }}
{{- end }}
{{- end }}
{{- if eq $v.cache.type "emptyDir" }}
{{- $pulls := and $v.remote.url $v.remote.pullOnly }}
{{- if and (eq $v.trust.role "consumer") (not $pulls) }}
{{- fail "cache.type=emptyDir with trust.role=consumer: a consumer mounts the cache read-only and never builds, and a new emptyDir is empty, so no engine could ever arrive; use a shared pvc cache, or remote.url with remote.pullOnly=true" }}
{{- end }}
{{- if and $v.engine.readOnly (not $v.remote.url) }}
{{- fail "cache.type=emptyDir with engine.readOnly=true: the Pod never builds and nothing else writes its private emptyDir, so it could never become Ready; use a shared pvc cache, or remote.url to pull the engine" }}
{{- end }}
{{- end }}
{{- if eq $v.cache.type "hostPath" }}
{{- include "trtwarm.checkHostPath" (dict "path" $v.cache.hostPath.path "what" "cache.hostPath.path") }}
{{- end }}
{{- with $v.engine.stamps.hostPath }}
{{- include "trtwarm.checkHostPath" (dict "path" . "what" "engine.stamps.hostPath") }}
{{- end }}
{{- if and $v.remote.prebuild.enabled (eq $v.trust.mode "enforce") (not $v.trust.signingKey.existingSecret) }}
{{- fail "remote.prebuild.enabled with trust.mode=enforce needs trust.signingKey.existingSecret: the prebuild Jobs sign what they build, and unsigned entries would be refused by every consumer" }}
{{- end }}
{{- $names := list $v.workload.container.name "trtwarm-init" }}
{{- if $v.exporter.enabled }}{{ $names = append $names "trtwarm-exporter" }}{{ end }}
{{- if $v.cache.fixPermissions.enabled }}{{ $names = append $names "trtwarm-fix-permissions" }}{{ end }}
{{- range concat ($v.workload.extraInitContainers | default list) ($v.workload.extraContainers | default list) }}
{{- if has .name $names }}{{ fail (printf "workload.extraInitContainers/extraContainers: a container is named %q twice in the Pod (names the chart uses: %v); rename it" .name $names) }}{{ end }}
{{- $names = append $names .name }}
{{- end }}
{{- if has $v.workload.container.name (list "trtwarm-init" "trtwarm-exporter" "trtwarm-fix-permissions") }}
{{- fail (printf "workload.container.name=%q is the name of a trtwarm container; choose another" $v.workload.container.name) }}
{{- end }}
{{- range ($v.workload.extraVolumes | default list) }}
{{- if hasPrefix "trtwarm-" (toString .name) }}{{ fail (printf "workload.extraVolumes: %q is a name the chart uses for its own volumes (trtwarm-*); rename it" .name) }}{{ end }}
{{- end }}
{{- if and (include "trtwarm.trustSigns" .) (or (eq $v.engine.builder "command") $v.engine.tensorrt.plugins) (not $v.trust.signingKey.allowUntrustedBuildSteps) }}
{{- fail (printf "trust.signingKey.existingSecret is mounted in the container that runs %s: code from there could read the signing key; build and sign in a prebuild Job you trust instead (trust.role=consumer here), or accept it with trust.signingKey.allowUntrustedBuildSteps=true" (ternary "engine.command.template" "engine.tensorrt.plugins" (eq $v.engine.builder "command"))) }}
{{- end }}
{{- end }}

{{/* A node directory trtwarm may own (its init chowns the cache root): never the root or a system directory. */}}
{{- define "trtwarm.checkHostPath" -}}
{{- $p := clean .path }}
{{- $system := list "/" "/bin" "/boot" "/dev" "/etc" "/home" "/lib" "/lib32" "/lib64" "/opt" "/proc" "/root" "/run" "/sbin" "/srv" "/sys" "/tmp" "/usr" "/var" "/var/lib" "/var/log" "/var/run" "/var/tmp" "/var/lib/kubelet" "/var/lib/containerd" "/var/lib/docker" "/mnt" "/media" }}
{{- $under := list "/proc" "/sys" "/dev" "/etc" "/boot" "/usr" "/bin" "/sbin" "/lib" "/lib64" "/run" "/var/run" "/var/lib/kubelet" "/var/lib/containerd" "/var/lib/docker" "/var/log" }}
{{- $bad := has $p $system }}
{{- range $under }}{{ if hasPrefix (printf "%s/" .) $p }}{{ $bad = true }}{{ end }}{{ end }}
{{- if $bad }}
{{- fail (printf "%s=%q is the root or a system directory of the node: trtwarm would own and write it; use a directory of its own such as /var/lib/trtwarm/cache" .what .path) }}
{{- end }}
{{- end }}

{{/* The cache, the hand-off and the model are mounted in trtwarm init (and the server) at their own paths: two at one
path are refused by the API server, and one inside another hides it or is written where the other is read. */}}
{{- define "trtwarm.checkMounts" -}}
{{- $v := .Values }}
{{- $paths := list (list "cache.mountPath" $v.cache.mountPath) (list "handoff.mountPath" $v.handoff.mountPath) }}
{{- if $v.engine.model.volume }}{{ $paths = append $paths (list "engine.model.mountPath" $v.engine.model.mountPath) }}{{ end }}
{{- range $paths }}{{ include "trtwarm.checkOwnedPath" (dict "what" (index . 0) "path" (index . 1) "hint" "/models/cache, /trtwarm, /models/src") }}{{ end }}
{{- /* and the chart's own mounts in the init */}}
{{- $paths = concat $paths (list (list "trtwarm init's /tmp" "/tmp") (list "the chart's trust and registry-credential mounts" "/etc/trtwarm")) }}
{{- if $v.engine.stamps.hostPath }}{{ $paths = append $paths (list "the stamps directory" "/var/lib/trtwarm-stamps") }}{{ end }}
{{- range $i, $a := $paths }}
{{- range $b := slice $paths (add1 $i) }}
{{- $x := clean (index $a 1) }}{{ $y := clean (index $b 1) }}
{{- if or (eq $x $y) (hasPrefix (printf "%s/" (trimSuffix "/" $x)) $y) (hasPrefix (printf "%s/" (trimSuffix "/" $y)) $x) }}
{{- fail (printf "%s=%q and %s=%q overlap: each needs a directory of its own (e.g. /models/cache, /trtwarm, /models/src)" (index $a 0) (index $a 1) (index $b 0) (index $b 1)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* A mount over a path the kubelet or the images own hides what the containers need (dict "what" "<value>" "path"
<path> "hint" "<paths of their own>" "images" <also every path under /etc, /opt, /home, /root, /boot>). */}}
{{- define "trtwarm.checkOwnedPath" -}}
{{- $p := clean .path }}
{{- $owned := list "/" "/bin" "/sbin" "/usr" "/lib" "/lib32" "/lib64" "/etc" "/opt" "/home" "/root" "/boot" "/var" "/var/lib" "/var/run" "/run" "/dev" "/proc" "/sys" "/var/run/secrets" "/etc/hosts" "/etc/hostname" "/etc/resolv.conf" "/dev/termination-log" }}
{{- $under := list "/dev" "/proc" "/sys" "/run" "/var/run" "/usr" "/bin" "/sbin" "/lib" "/lib32" "/lib64" }}
{{- if .images }}{{ $under = concat $under (list "/etc" "/opt" "/home" "/root" "/boot") }}{{ end }}
{{- $bad := has $p $owned }}
{{- range $under }}{{ if hasPrefix (printf "%s/" .) $p }}{{ $bad = true }}{{ end }}{{ end }}
{{- if $bad }}
{{- fail (printf "%s=%q is a path the image or the kubelet own (or lies under one): a mount there hides what the containers need; use a directory of its own such as %s" .what .path .hint) }}
{{- end }}
{{- end }}
