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
{{- $repository := required (printf "image.repository is required: nothing publishes the passmower-elector image. Build it from the passmower-elector repository and push it to a registry your nodes pull from (docker build -f Dockerfile.sidecar -t REGISTRY/passmower-elector:%s . && docker push REGISTRY/passmower-elector:%s; without Docker: scripts/build-sidecar-image.sh, then skopeo copy oci-archive:ARCHIVE docker://REGISTRY/passmower-elector:%s), then --set image.repository=REGISTRY/passmower-elector" .Chart.AppVersion .Chart.AppVersion .Chart.AppVersion) .Values.image.repository -}}
{{- if eq $repository "ghcr.io/passmower/passmower-elector" -}}
{{- fail "image.repository ghcr.io/passmower/passmower-elector is a placeholder nobody publishes: build the image and push it to your own registry (see values.yaml)" -}}
{{- end -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
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
