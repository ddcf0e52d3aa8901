{{/* Image references: a tag or a digest, and `global.imageRegistry` (a mirror) for every image the chart renders. */}}

{{/* An image reference: (dict "image" .Values.x.image "ctx" . "what" "x.image" "default" "<tag>").
`registry` (or global.imageRegistry) replaces the repository's registry host; `digest` pins it (tag ignored). */}}
{{- define "trtwarm.image" -}}
{{- $global := (.ctx.Values.global | default dict) }}
{{- $repo := include "trtwarm.withRegistry" (dict "ref" .image.repository "registry" (.image.registry | default $global.imageRegistry)) }}
{{- if .image.digest }}
{{- printf "%s@%s" $repo .image.digest }}
{{- else }}
{{- $tag := toString (.image.tag | default .default | default "") }}
{{- if not $tag }}
{{- fail (printf "%s.tag is empty: set a tag (e.g. %s.tag=25.08-py3) or pin %s.digest=sha256:..." .what .what .what) }}
{{- end }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{/* `ref` with its registry host replaced by `registry` (a first path part with a "." or ":" or "localhost" is a
host); a ref without a host gets `registry/` in front. */}}
{{- define "trtwarm.withRegistry" -}}
{{- if not .registry }}{{ .ref }}
{{- else }}
{{- $parts := splitList "/" .ref }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- printf "%s/%s" (trimSuffix "/" .registry) (join "/" (rest $parts)) }}
{{- else }}
{{- printf "%s/%s" (trimSuffix "/" .registry) .ref }}
{{- end }}
{{- end }}
{{- end }}
