{{/* The cache volume, the hand-off emptyDir, the root container that fixes the cache's ownership, and read-only
volume sources. */}}

{{- define "trtwarm.cacheClaim" -}}
{{- if .Values.cache.pvc.existingClaim }}{{ .Values.cache.pvc.existingClaim }}
{{- else if .Values.cache.pvc.create }}{{ include "trtwarm.nameWithSuffix" (dict "ctx" . "suffix" "cache" "max" 63) }}
{{- else }}
{{- fail "cache.pvc.create=false needs cache.pvc.existingClaim (the name of a ReadWriteMany claim), or use cache.type=hostPath" }}
{{- end }}
{{- end }}

{{- define "trtwarm.cacheMount" -}}
- name: trtwarm-cache
  mountPath: {{ .Values.cache.mountPath | quote }}
{{- end }}

{{/* Root, CHOWN and FOWNER only: it makes the cache root writable by the Pod's user where the volume ignores
`fsGroup`. Where root cannot chown (NFS root_squash) it says so and lets trtwarm init report an unwritable cache
with its own hint, instead of crash-looping here. */}}
{{- define "trtwarm.fixPermissionsContainer" -}}
{{- $uid := .Values.init.securityContext.runAsUser | default 1000 }}
{{- $gid := .Values.workload.podSecurityContext.fsGroup | default (.Values.init.securityContext.runAsGroup | default 1000) }}
- name: trtwarm-fix-permissions
  image: {{ include "trtwarm.withRegistry" (dict "ref" .Values.cache.fixPermissions.image "registry" (.Values.global | default dict).imageRegistry) | quote }}
  command: ["sh", "-c"]
  args:
    - {{ printf "chown %v:%v %s && chmod 2775 %s || echo 'trtwarm-fix-permissions: cannot chown %s (an NFS export with root_squash?); give the directory to uid %v on the server' >&2" $uid $gid .Values.cache.mountPath .Values.cache.mountPath .Values.cache.mountPath $uid | quote }}
  resources:
    {{- include "trtwarm.resources" (.Values.cache.fixPermissions.resources | default dict) | nindent 4 }}
  securityContext:
    runAsUser: 0
    runAsNonRoot: false
    allowPrivilegeEscalation: false
    capabilities:
      drop: [ALL]
      add: [CHOWN, FOWNER]
  volumeMounts:
    {{- include "trtwarm.cacheMount" . | nindent 4 }}
{{- end }}

{{- define "trtwarm.cacheVolume" -}}
- name: trtwarm-cache
{{- if eq .Values.cache.type "pvc" }}
  persistentVolumeClaim:
    claimName: {{ include "trtwarm.cacheClaim" . | quote }}
{{- else if eq .Values.cache.type "hostPath" }}
{{- if and (eq .Values.cache.hostPath.type "DirectoryOrCreate") (not .Values.cache.fixPermissions.enabled) }}
{{- fail "cache.hostPath.type=DirectoryOrCreate makes a root-owned 0755 directory trtwarm cannot write: set cache.fixPermissions.enabled=true, or create the directory owned by uid 1000 and use type Directory" }}
{{- end }}
  hostPath:
    path: {{ .Values.cache.hostPath.path | quote }}
    type: {{ .Values.cache.hostPath.type }}
{{- else if eq .Values.cache.type "emptyDir" }}
  emptyDir:
    sizeLimit: {{ .Values.cache.emptyDir.sizeLimit | quote }}
{{- else }}
{{- fail (printf "cache.type must be pvc, hostPath or emptyDir, not %q" .Values.cache.type) }}
{{- end }}
{{- end }}

{{/* A volume source with a claim made read-only unless it says otherwise: the kubelet then leaves its ownership
alone (fsGroup would re-own a shared model volume) and nothing here can write the models. */}}
{{- define "trtwarm.readOnlyVolume" -}}
{{- $v := deepCopy . }}
{{- if and $v.persistentVolumeClaim (not (hasKey $v.persistentVolumeClaim "readOnly")) }}
{{- $_ := set $v.persistentVolumeClaim "readOnly" true }}
{{- end }}
{{- toYaml $v }}
{{- end }}

{{/* How trtwarm init hands the engine over: `link` (a symlink into the cache) or `copy` (a private copy in the
hand-off emptyDir, which no writer of the cache can change after the check). `auto`: copy under trust.mode=enforce. */}}
{{- define "trtwarm.handoffMode" -}}
{{- if eq .Values.handoff.mode "auto" }}{{ ternary "copy" "link" (eq .Values.trust.mode "enforce") }}
{{- else }}{{ .Values.handoff.mode }}{{ end }}
{{- end }}

{{- define "trtwarm.handoffSizeLimit" -}}
{{- if .Values.handoff.sizeLimit }}{{ .Values.handoff.sizeLimit }}
{{- else }}{{ ternary .Values.cache.emptyDir.sizeLimit "16Mi" (eq (include "trtwarm.handoffMode" .) "copy") }}{{ end }}
{{- end }}
