{{/* `helm upgrade --reuse-values` from an older release: the values it lacks, with their defaults. */}}

{{/* Adds to .Values, in place, the sections of `upgrade-defaults.yaml` newer than the values' `defaultsVersion`
(missing: a release before 0.4.0), where a value is missing; a value the release has (false, empty and null
included) is left alone. Every template includes it first, so no template reads a value that is not there, whatever
the order Helm renders them in. */}}
{{- define "trtwarm.upgradeDefaults" -}}
{{- if .Files }}
{{- $have := int (.Values.defaultsVersion | default 0) }}
{{- range $version, $added := (.Files.Get "upgrade-defaults.yaml" | fromYaml).added }}
{{- if gt (int $version) $have }}{{ include "trtwarm.fillMissing" (dict "dst" $.Values "src" $added) }}{{ end }}
{{- end }}
{{- end }}
{{- end }}

{{/* (dict "dst" <map> "src" <map>): every key of src that dst lacks, set in dst, recursively (sprig's merge would
also replace dst's false, "" and 0, which are values, not gaps). */}}
{{- define "trtwarm.fillMissing" -}}
{{- range $k, $v := .src }}
{{- if not (hasKey $.dst $k) }}{{ $_ := set $.dst $k (deepCopy $v) }}
{{- else if and (kindIs "map" $v) (kindIs "map" (get $.dst $k)) }}{{ include "trtwarm.fillMissing" (dict "dst" (get $.dst $k) "src" $v) }}
{{- end }}
{{- end }}
{{- end }}
