{{- define "pmw.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pmw.serviceAccount" -}}
{{- default (include "pmw.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "pmw.selectorLabels" -}}
app.kubernetes.io/name: passmower-elector-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pmw.labels" -}}
{{ include "pmw.selectorLabels" . }}
app.kubernetes.io/component: admission-webhook
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pmw.image" -}}
{{- $repository := required (printf "image.repository is required: a chart from the passmower-elector source tree names no image (a released chart names the image released with it). Use a released image (--set image.repository=ghcr.io/passmower/passmower-elector,image.tag=VERSION,image.digest=sha256:...), or build it from the passmower-elector repository and push it to a registry your nodes pull from (docker build -f Dockerfile.sidecar -t REGISTRY/passmower-elector:%s . && docker push REGISTRY/passmower-elector:%s; without Docker: scripts/build-sidecar-image.sh, then skopeo copy oci-archive:ARCHIVE docker://REGISTRY/passmower-elector:%s), then --set image.repository=REGISTRY/passmower-elector" .Chart.AppVersion .Chart.AppVersion .Chart.AppVersion) .Values.image.repository -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- $digest := .Values.image.digest | default "" -}}
{{- if and (eq $repository "ghcr.io/passmower/passmower-elector") (eq $tag "latest") (not $digest) -}}
{{- fail "image.tag latest: releases publish ghcr.io/passmower/passmower-elector with version tags only; leave image.tag empty (the chart's appVersion) or name a version" -}}
{{- end -}}
{{- if and $digest (not (regexMatch "^sha256:[0-9a-f]{64}$" $digest)) -}}
{{- fail (printf "image.digest %q must be sha256: and 64 lower-case hex digits (the image index's digest), or empty" $digest) -}}
{{- end -}}
{{- if $digest -}}
{{- printf "%s:%s@%s" $repository $tag $digest -}}
{{- else -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
Secret names from a list of pull secrets, as JSON: names, or {name: NAME} as a pod spec lists
them. Called with (list VALUE-NAME LIST); anything else fails naming the value.
*/}}
{{- define "pmw.secretNames" -}}
{{- $what := index . 0 -}}
{{- $list := index . 1 | default list -}}
{{- if not (kindIs "slice" $list) -}}
{{- fail (printf "%s must be a list of Secret names, e.g. [regcred], got %s" $what (toJson $list)) -}}
{{- end -}}
{{- $names := list -}}
{{- range $list -}}
{{- $name := . -}}
{{- if kindIs "map" . }}{{ $name = .name }}{{ end -}}
{{- $name = toString $name -}}
{{- if or (gt (len $name) 253) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $name)) -}}
{{- fail (printf "%s: %s is not a Secret name (a DNS-1123 subdomain: lowercase letters, digits, '-' and '.')" $what (toJson .)) -}}
{{- end -}}
{{- if not (has $name $names) }}{{ $names = append $names $name }}{{ end -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* Namespaces never injected: the cluster's own and excludeNamespaces. */}}
{{- define "pmw.excluded" -}}
{{- toJson (concat (list "kube-system" "kube-public" "kube-node-lease") .Values.excludeNamespaces) -}}
{{- end -}}

{{- define "pmw.secretName" -}}
{{- if eq .Values.certificates.mode "secret" -}}
{{- required "certificates.secretName is required with certificates.mode=secret" .Values.certificates.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "pmw.fullname" .) -}}
{{- end -}}
{{- end -}}
