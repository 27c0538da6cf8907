{{/*
The names Passmower's chart (oci://ghcr.io/passmower/charts/passmower) gives its objects,
derived from its release name the way its _helpers.tpl does: "passmower.name" and
"passmower.fullname". Its container is always named after the chart: "passmower".
*/}}
{{- define "passmower-elector.passmowerName" -}}
{{- default "passmower" .Values.passmower.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "passmower-elector.passmowerFullname" -}}
{{- if .Values.passmower.fullnameOverride -}}
{{- .Values.passmower.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "passmower-elector.passmowerName" . -}}
{{- if contains $name .Values.passmower.release -}}
{{- .Values.passmower.release | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Values.passmower.release $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Passmower's pod labels, as its Deployment selects them. */}}
{{- define "passmower-elector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "passmower-elector.passmowerName" . }}
app.kubernetes.io/instance: {{ .Values.passmower.release }}
{{- end -}}

{{/* The Lease name: lease.name, else Passmower's Deployment name (what inject uses). */}}
{{- define "passmower-elector.leaseName" -}}
{{- default (include "passmower-elector.passmowerFullname" .) .Values.lease.name -}}
{{- end -}}

{{/* Objects generated for Passmower's Deployment are named after it, like inject names them. */}}
{{- define "passmower-elector.roleName" -}}
{{- printf "%s-elector" (include "passmower-elector.passmowerFullname" .) | trunc 253 -}}
{{- end -}}

{{/* Cluster-wide objects: named per release, so two installs never claim one name. */}}
{{- define "passmower-elector.policyName" -}}
{{- printf "passmower-elector-chart.%s.%s" .Release.Namespace .Release.Name | trunc 253 | trimSuffix "." | trimSuffix "-" -}}
{{- end -}}

{{/*
The write fence, cluster-wide too, is named by the ServiceAccount it fences, as inject names it
(passmower-elector-fence.NAMESPACE.SERVICEACCOUNT): one ServiceAccount has one fence, whoever
installs it, so two fences bound to different Leases can never both refuse writes.
*/}}
{{- define "passmower-elector.fenceName" -}}
{{- printf "passmower-elector-fence.%s.%s" .Release.Namespace (include "passmower-elector.passmowerFullname" .) | trunc 253 | trimSuffix "." | trimSuffix "-" -}}
{{- end -}}

{{- define "passmower-elector.fenceLabels" -}}
app.kubernetes.io/name: passmower-elector
app.kubernetes.io/component: write-fence
app.kubernetes.io/part-of: {{ include "passmower-elector.passmowerFullname" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "passmower-elector.image" -}}
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
{{- define "passmower-elector.secretNames" -}}
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

{{- define "passmower-elector.labels" -}}
app.kubernetes.io/name: passmower-elector
app.kubernetes.io/component: leader-election
app.kubernetes.io/part-of: {{ include "passmower-elector.passmowerFullname" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The annotation by which `inject` recognises these objects as its own (so it skips them). */}}
{{- define "passmower-elector.generatedFor" -}}
passmower-elector.io/generated-for: {{ printf "Deployment/%s" (include "passmower-elector.passmowerFullname" .) | quote }}
{{- end -}}

{{/*
The post-renderer's arguments beyond `inject`, one per --post-renderer-args, single-quoted for
the shell: only what differs from inject's own defaults, which match this chart's.
*/}}
{{- define "passmower-elector.injectArgs" -}}
{{- $args := list "--workload-only" (printf "--image=%s" (include "passmower-elector.image" .)) -}}
{{- range (include "passmower-elector.secretNames" (list "imagePullSecrets" .Values.imagePullSecrets) | fromJsonArray) }}{{ $args = append $args (printf "--image-pull-secret=%s" .) }}{{ end -}}
{{- if .Values.lease.name }}{{ $args = append $args (printf "--lease-name=%s" .Values.lease.name) }}{{ end -}}
{{- if ne .Values.lease.duration "15s" }}{{ $args = append $args (printf "--lease-duration=%s" .Values.lease.duration) }}{{ end -}}
{{- if ne .Values.lease.renewDeadline "10s" }}{{ $args = append $args (printf "--renew-deadline=%s" .Values.lease.renewDeadline) }}{{ end -}}
{{- if ne .Values.lease.retryPeriod "2s" }}{{ $args = append $args (printf "--retry-period=%s" .Values.lease.retryPeriod) }}{{ end -}}
{{- if ne .Values.lease.killGrace "3s" }}{{ $args = append $args (printf "--kill-grace=%s" .Values.lease.killGrace) }}{{ end -}}
{{- if ne .Values.idleNamespace "passmower-elector_idle" }}{{ $args = append $args (printf "--idle-namespace=%s" .Values.idleNamespace) }}{{ end -}}
{{- if .Values.denyIdleNamespace }}{{ $args = append $args "--deny-idle-namespace" }}{{ end -}}
{{- if ne (int .Values.probePort) 8081 }}{{ $args = append $args (printf "--probe-port=%d" (int .Values.probePort)) }}{{ end -}}
{{- if ne (int .Values.togglePort) 8082 }}{{ $args = append $args (printf "--toggle-port=%d" (int .Values.togglePort)) }}{{ end -}}
{{- if .Values.classicSidecar }}{{ $args = append $args "--classic-sidecar" }}{{ end -}}
{{- if ne .Values.passmowerElection "auto" }}{{ $args = append $args (printf "--passmower-election=%s" .Values.passmowerElection) }}{{ end -}}
{{- if .Values.resources }}{{ $args = append $args (printf "--sidecar-resources=%s" (toJson .Values.resources)) }}{{ end -}}
{{- if .Values.securityContext }}{{ $args = append $args (printf "--sidecar-security-context=%s" (toJson .Values.securityContext)) }}{{ end -}}
{{- range $args }} \
    {{ printf "--post-renderer-args=%s" . | squote }}
{{- end -}}
{{- end -}}

{{/* The replica guard's name: named by the Deployment it guards, as inject names it. */}}
{{- define "passmower-elector.guardName" -}}
{{- printf "passmower-elector-guard.%s.%s" .Release.Namespace (include "passmower-elector.passmowerFullname" .) | trunc 253 | trimSuffix "." | trimSuffix "-" -}}
{{- end -}}

{{/*
CEL: the string map at PARENT.FIELD has KEY set to VALUE. Called with (list PARENT FIELD KEY
VALUE), as src/inject/companions/guard.rs writes it (has_entry).
*/}}
{{- define "passmower-elector.celHasEntry" -}}
{{- $parent := index . 0 -}}{{- $field := index . 1 -}}
{{- $key := printf "'%s'" (index . 2) -}}{{- $value := printf "'%s'" (index . 3) -}}
{{- printf "has(%s.%s) && %s in %s.%s && %s.%s[%s] == %s" $parent $field $key $parent $field $parent $field $key $value -}}
{{- end -}}

{{- define "passmower-elector.podGuardName" -}}
{{- printf "passmower-elector-pod-guard.%s.%s" .Release.Namespace (include "passmower-elector.passmowerFullname" .) | trunc 253 | trimSuffix "." | trimSuffix "-" -}}
{{- end -}}

{{/*
CEL: the admission webhook would inject the pod whose metadata and spec are at META and SPEC
(a Deployment's template, or a Pod): an opt-out label or annotation wins, then a pod label or
the namespace's label opts in; a pod without the container to wrap, or with the markers of an
earlier injection, is skipped (src/webhook/admit.rs). Called with (list ROOT META SPEC), as
src/inject/companions/guard.rs writes it (webhook_injects_at).
*/}}
{{- define "passmower-elector.webhookInjects" -}}
{{- $root := index . 0 -}}{{- $tpl := index . 1 -}}{{- $spec := index . 2 -}}
{{- $label := $root.Values.webhookOptIn.label -}}
{{- $optedOut := printf "has(%s) && ((%s) || (%s))" $tpl (include "passmower-elector.celHasEntry" (list $tpl "labels" $label "disabled")) (include "passmower-elector.celHasEntry" (list $tpl "annotations" "passmower-elector.io/inject" "disabled")) -}}
{{- $podOptsIn := printf "has(%s) && %s" $tpl (include "passmower-elector.celHasEntry" (list $tpl "labels" $label $root.Values.webhookOptIn.value)) -}}
{{- $namespaceOptsIn := printf "namespaceObject != null && %s" (include "passmower-elector.celHasEntry" (list "namespaceObject.metadata" "labels" $label $root.Values.webhookOptIn.value)) -}}
{{- $annotation := "'passmower-elector.io/container'" -}}
{{- $hasContainer := printf "has(%s) && has(%s.annotations) && %s in %s.annotations ? %s.containers.exists(c, c.name == %s.annotations[%s]) : %s.containers.exists(c, c.name == %s)" $tpl $tpl $annotation $tpl $spec $tpl $annotation $spec (squote $root.Values.webhookOptIn.container) -}}
{{- $ours := "['passmower-elector', 'passmower-elector-install']" -}}
{{- $notInjectedYet := printf "!(has(%s) && has(%s.annotations) && 'passmower-elector.io/injected' in %s.annotations) && !%s.containers.exists(c, c.name in %s) && !(has(%s.initContainers) && %s.initContainers.exists(c, c.name in %s)) && !(has(%s.volumes) && %s.volumes.exists(v, v.name in ['passmower-elector-grant', 'passmower-elector-bin']))" $tpl $tpl $tpl $spec $ours $spec $spec $ours $spec $spec -}}
{{- printf "!(%s) && ((%s) || (%s)) && (%s) && (%s)" $optedOut $podOptsIn $namespaceOptsIn $hasContainer $notInjectedYet -}}
{{- end -}}

{{/*
Whether the admission webhook never injects the release's namespace: "true" or "".
*/}}
{{- define "passmower-elector.webhookExcluded" -}}
{{- if has .Release.Namespace (concat (list "kube-system" "kube-public" "kube-node-lease") (.Values.webhookOptIn.excludeNamespaces | default list)) }}true{{ end -}}
{{- end -}}

{{- define "passmower-elector.guardLabels" -}}
app.kubernetes.io/name: passmower-elector
app.kubernetes.io/component: replica-guard
app.kubernetes.io/part-of: {{ include "passmower-elector.passmowerFullname" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
