{{/* The Lease name: lease.name, else Passmower's Deployment name. */}}
{{- define "passmower-elector.leaseName" -}}
{{- default .Values.passmower.deploymentName .Values.lease.name -}}
{{- end -}}

{{/* Objects generated for Passmower's Deployment are named after it, like inject names them. */}}
{{- define "passmower-elector.roleName" -}}
{{- printf "%s-elector" .Values.passmower.deploymentName | trunc 253 -}}
{{- end -}}

{{- define "passmower-elector.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "passmower-elector.labels" -}}
app.kubernetes.io/name: passmower-elector
app.kubernetes.io/component: leader-election
app.kubernetes.io/part-of: {{ .Values.passmower.deploymentName }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The annotation by which `inject` recognises these objects as its own (so it skips them). */}}
{{- define "passmower-elector.generatedFor" -}}
passmower-elector.io/generated-for: {{ printf "Deployment/%s" .Values.passmower.deploymentName | quote }}
{{- end -}}

{{/* The post-renderer's arguments, mirroring these values. */}}
{{- define "passmower-elector.injectArgs" -}}
inject --workload-only --container {{ .Values.passmower.containerName }} --image {{ include "passmower-elector.image" . }} --lease-name {{ include "passmower-elector.leaseName" . }} --lease-duration {{ .Values.lease.duration }} --renew-deadline {{ .Values.lease.renewDeadline }} --retry-period {{ .Values.lease.retryPeriod }} --kill-grace {{ .Values.lease.killGrace }} --idle-namespace {{ .Values.idleNamespace }} --probe-port {{ .Values.probePort }} --toggle-port {{ .Values.togglePort }}{{ if .Values.classicSidecar }} --classic-sidecar{{ end }} --sidecar-resources {{ toJson .Values.resources | squote }} --sidecar-security-context {{ toJson .Values.securityContext | squote }}
{{- end -}}
