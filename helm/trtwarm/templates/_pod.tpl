{{/* The workload's Pod: the inference container with the engine's mounts, the Pod spec and template, the ports the
Services publish. */}}

{{/* The inference container: the user's, plus the engine env and the two mounts at the init container's paths,
then `workload.containerExtra` merged over it as is. */}}
{{/* A container's `resources` without the quantities given as null: `nvidia.com/gpu: null` removes the default GPU,
and where Helm keeps the null (a `helm upgrade --reuse-values`: the key is not in the chart's values then) the API
server must not get `nvidia.com/gpu: null`. */}}
{{- define "trtwarm.resources" -}}
{{- $res := deepCopy (. | default dict) }}
{{- range $part := list "limits" "requests" }}
{{- $q := index $res $part }}
{{- if kindIs "map" $q }}{{ range $name, $v := $q }}{{ if kindIs "invalid" $v }}{{ $_ := unset $q $name }}{{ end }}{{ end }}
{{- else if kindIs "invalid" $q }}{{ $_ := unset $res $part }}{{ end }}
{{- end }}
{{- toYaml $res }}
{{- end }}

{{- define "trtwarm.mainContainerBase" -}}
{{- $c := .Values.workload.container -}}
name: {{ $c.name }}
image: {{ include "trtwarm.image" (dict "image" $c.image "ctx" . "what" "workload.container.image") | quote }}
imagePullPolicy: {{ $c.image.pullPolicy }}
{{- range $field := list "command" "args" "envFrom" "ports" "resources" "startupProbe" "readinessProbe" "livenessProbe" "lifecycle" "securityContext" }}
{{- with index $c $field }}
{{ $field }}:
  {{- if eq $field "resources" }}{{ include "trtwarm.resources" . | nindent 2 }}{{ else }}{{ toYaml . | nindent 2 }}{{ end }}
{{- end }}
{{- end }}
env:
  {{- $base := list (dict "name" "TRTWARM_ENGINE" "value" (printf "%s/engine" .Values.handoff.mountPath)) }}
  {{- include "trtwarm.env" (dict "base" $base "extra" ($c.env | default list)) | nindent 2 }}
volumeMounts:
  - name: trtwarm-cache
    mountPath: {{ .Values.cache.mountPath | quote }}
    readOnly: true
  - name: trtwarm-handoff
    mountPath: {{ .Values.handoff.mountPath | quote }}
    readOnly: true
  {{- if .Values.engines.image.reference }}
  {{- /* a seed-tier hit hands the engine over in place: the link points into the engine image */}}
  - name: trtwarm-engines
    mountPath: {{ .Values.engines.image.mountPath | quote }}
    readOnly: true
  {{- end }}
  {{- with $c.volumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{- define "trtwarm.mainContainer" -}}
{{- $c := include "trtwarm.mainContainerBase" . | fromYaml }}
{{- $c = mustMergeOverwrite $c (deepCopy (.Values.workload.containerExtra | default dict)) }}
{{- toYaml (list $c) }}
{{- end }}

{{- define "trtwarm.podSpecBase" -}}
{{- include "trtwarm.checks" . }}
{{- with .Values.workload.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "trtwarm.serviceAccountName" . }}
serviceAccountName: {{ . | quote }}
{{- end }}
automountServiceAccountToken: {{ .Values.serviceAccount.automount }}
{{- with .Values.workload.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .Values.workload.runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
securityContext:
  {{- toYaml .Values.workload.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ .Values.workload.terminationGracePeriodSeconds }}
{{- with .Values.workload.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.workload.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.workload.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.workload.topologySpreadConstraints }}
{{- $selector := include "trtwarm.selectorLabels" $ | fromYaml }}
topologySpreadConstraints:
  {{- range . }}
  {{- $tsc := deepCopy . }}
  {{- if not (hasKey $tsc "labelSelector") }}{{ $_ := set $tsc "labelSelector" (dict "matchLabels" $selector) }}{{ end }}
  - {{- toYaml $tsc | nindent 4 }}
  {{- end }}
{{- end }}
initContainers:
  {{- if .Values.cache.fixPermissions.enabled }}
  {{- include "trtwarm.fixPermissionsContainer" . | nindent 2 }}
  {{- end }}
  {{- if and .Values.exporter.enabled (eq .Values.exporter.mode "native") }}
  {{- include "trtwarm.exporterContainer" . | nindent 2 }}
  {{- end }}
  {{- with .Values.workload.extraInitContainers }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- include "trtwarm.enginesCopyContainers" . | nindent 2 }}
  {{- include "trtwarm.initContainer" . | nindent 2 }}
containers:
  {{- include "trtwarm.mainContainer" . | nindent 2 }}
  {{- if and .Values.exporter.enabled (eq .Values.exporter.mode "legacy") }}
  {{- include "trtwarm.exporterContainer" . | nindent 2 }}
  {{- end }}
  {{- with .Values.workload.extraContainers }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
volumes:
  {{- include "trtwarm.cacheVolume" . | nindent 2 }}
  {{- include "trtwarm.trustVolumes" . | nindent 2 }}
  - name: trtwarm-handoff
    emptyDir:
      sizeLimit: {{ include "trtwarm.handoffSizeLimit" . | quote }}
  - name: trtwarm-tmp
    emptyDir: {}
  {{- include "trtwarm.enginesVolumes" . | nindent 2 }}
  {{- include "trtwarm.registryAuthVolume" . | nindent 2 }}
  {{- with .Values.engine.stamps.hostPath }}
  - name: trtwarm-stamps
    hostPath:
      path: {{ . | quote }}
      type: Directory
  {{- end }}
  {{- with .Values.engine.model.volume }}
  - name: trtwarm-model
    {{- include "trtwarm.readOnlyVolume" . | nindent 4 }}
  {{- end }}
  {{- if include "trtwarm.eventsToken" . }}
  - name: trtwarm-sa-token
    projected:
      sources:
        - serviceAccountToken:
            path: token
            expirationSeconds: 3607
        - configMap:
            name: kube-root-ca.crt
            items: [{key: ca.crt, path: ca.crt}]
        - downwardAPI:
            items:
              - path: namespace
                fieldRef: {fieldPath: metadata.namespace}
  {{- end }}
  {{- with .Values.workload.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The Pod spec, with `workload.podSpecExtra` merged over it as is (maps merge, lists are replaced). */}}
{{- define "trtwarm.podSpec" -}}
{{- $spec := include "trtwarm.podSpecBase" . | fromYaml }}
{{- if hasKey $spec "Error" }}
{{- fail (printf "trtwarm: the rendered Pod spec is not valid YAML: %s" $spec.Error) }}
{{- end }}
{{- toYaml (mustMergeOverwrite $spec (deepCopy (.Values.workload.podSpecExtra | default dict))) }}
{{- end }}

{{- define "trtwarm.podTemplate" -}}
metadata:
  labels:
    {{- include "trtwarm.selectorLabels" . | nindent 4 }}
    {{- with .Values.workload.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with include "trtwarm.podAnnotations" . }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
spec:
  {{- include "trtwarm.podSpec" . | trim | nindent 2 }}
{{- end }}

{{/* The workload Pod's annotations: a checksum of each ConfigMap the chart renders for it (a changed trust policy
rolls the Pods, which read it only at start), then `workload.podAnnotations`. */}}
{{- define "trtwarm.podAnnotations" -}}
{{- $a := dict }}
{{- if and (include "trtwarm.trustEnabled" .) (not .Values.trust.existingConfigMap) }}
{{- $_ := set $a "checksum/trust" (include (print .Template.BasePath "/configmap-trust.yaml") . | sha256sum) }}
{{- end }}
{{- if and .Values.remote.url (not .Values.remote.credentials.secretName) }}
{{- /* Workload identity (IRSA): the EKS webhook gives every container the role's web-identity token unless the Pod
names the containers to skip; only trtwarm init talks to the repository. */}}
{{- $names := list .Values.workload.container.name }}
{{- if .Values.exporter.enabled }}{{ $names = append $names "trtwarm-exporter" }}{{ end }}
{{- if .Values.cache.fixPermissions.enabled }}{{ $names = append $names "trtwarm-fix-permissions" }}{{ end }}
{{- range concat (.Values.workload.extraInitContainers | default list) (.Values.workload.extraContainers | default list) }}{{ $names = append $names .name }}{{ end }}
{{- $_ := set $a "eks.amazonaws.com/skip-containers" (join "," $names) }}
{{- end }}
{{- $a = merge (deepCopy (.Values.workload.podAnnotations | default dict)) $a }}
{{- if $a }}{{ toYaml $a }}{{ end }}
{{- end }}

{{/* The named ports of the Pod's containers, by port name and number (one document: {"names": [...], "numbers":
[...]}). */}}
{{- define "trtwarm.serverPorts" -}}
{{- $names := list }}{{ $numbers := list }}
{{- range (concat (list (include "trtwarm.mainContainer" . | fromYamlArray | first)) (.Values.workload.extraContainers | default list)) }}
{{- range (.ports | default list) }}
{{- with .name }}{{ $names = append $names . }}{{ end }}
{{- $numbers = append $numbers (int .containerPort) }}
{{- end }}
{{- end }}
{{- toJson (dict "names" $names "numbers" $numbers) }}
{{- end }}

{{/* The ports of the inference Service: `service.ports`, else the inference container's. */}}
{{- define "trtwarm.servicePorts" -}}
{{- toYaml (.Values.service.ports | default (include "trtwarm.mainContainer" . | fromYamlArray | first).ports | default list) }}
{{- end }}
