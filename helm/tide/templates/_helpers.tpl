{{/*
Names, labels and the addresses the components give each other. Every template takes its names and labels
from here, so a rename happens in one place.
*/}}

{{- define "tide.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name, at most 42 characters: the longest suffix added to it ("-scheduler-headless") and a
StatefulSet's pod ordinal must still fit a 63-character DNS label.
*/}}
{{- define "tide.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 42 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tide.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "tide.labels" -}}
helm.sh/chart: {{ include "tide.chart" . }}
{{ include "tide.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tide
{{- end }}

{{- define "tide.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tide.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one component: (dict "ctx" $ "component" "scheduler"). */}}
{{- define "tide.componentLabels" -}}
{{ include "tide.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "tide.componentSelectorLabels" -}}
{{ include "tide.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "tide.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tide.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Object names. */}}
{{- define "tide.scheduler.fullname" -}}{{ include "tide.fullname" . }}-scheduler{{- end }}
{{- define "tide.scheduler.headless" -}}{{ include "tide.fullname" . }}-scheduler-headless{{- end }}
{{- define "tide.worker.fullname" -}}{{ include "tide.fullname" . }}-worker{{- end }}
{{- define "tide.worker.headless" -}}{{ include "tide.fullname" . }}-worker-headless{{- end }}
{{- define "tide.etcd.fullname" -}}{{ include "tide.fullname" . }}-etcd{{- end }}
{{- define "tide.etcd.headless" -}}{{ include "tide.fullname" . }}-etcd-headless{{- end }}

{{/* The token Secret's name and key. */}}
{{- define "tide.tokenSecretName" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else }}
{{- include "tide.fullname" . }}-token
{{- end }}
{{- end }}

{{- define "tide.tokenSecretKey" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecretKey }}
{{- else -}}
token
{{- end }}
{{- end }}

{{/* Where the token file is mounted, and its path (--token-file). */}}
{{- define "tide.tokenDir" -}}/etc/tide/token{{- end }}
{{/* Where tls.secretName is mounted (tls.crt, tls.key, ca.crt). */}}
{{- define "tide.tlsDir" -}}/etc/tide/tls{{- end }}
{{/* The TLS flags every tide binary takes (docs/security.md): the Secret's files, or --insecure without one. */}}
{{- define "tide.tlsArgs" -}}
{{- if .Values.tls.secretName }}
- --tls-cert={{ include "tide.tlsDir" . }}/tls.crt
- --tls-key={{ include "tide.tlsDir" . }}/tls.key
- --tls-ca={{ include "tide.tlsDir" . }}/ca.crt
{{- else }}
- --insecure
{{- end }}
{{- end }}
{{- define "tide.tokenFile" -}}{{ include "tide.tokenDir" . }}/{{ include "tide.tokenSecretKey" . }}{{- end }}

{{/* "tide:0.1.0"; with (dict "ctx" $ "image" .Values.workers.image) its repository and tag override image.*. */}}
{{- define "tide.image" -}}
{{- $repo := .ctx.Values.image.repository }}
{{- $tag := default .ctx.Chart.AppVersion .ctx.Values.image.tag }}
{{- if .image }}
{{- $repo = default $repo .image.repository }}
{{- $tag = default $tag .image.tag }}
{{- end }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}

{{/* true when the schedulers keep their state in etcd (bundled or external). */}}
{{- define "tide.etcdMode" -}}
{{- if or .Values.etcd.enabled (gt (len .Values.etcd.endpoints) 0) }}true{{- end }}
{{- end }}

{{/* The etcd members' client addresses, comma-separated: bundled members by pod DNS, or etcd.endpoints. */}}
{{- define "tide.etcdEndpoints" -}}
{{- if .Values.etcd.enabled }}
{{- $fn := include "tide.etcd.fullname" . }}
{{- $hl := include "tide.etcd.headless" . }}
{{- $eps := list }}
{{- range $i := until (int .Values.etcd.replicas) }}
{{- $eps = append $eps (printf "%s-%d.%s.%s.svc.%s:2379" $fn $i $hl $.Release.Namespace $.Values.clusterDomain) }}
{{- end }}
{{- join "," $eps }}
{{- else }}
{{- join "," .Values.etcd.endpoints }}
{{- end }}
{{- end }}

{{/* --store etcd://MEMBERS/PREFIX */}}
{{- define "tide.storeURL" -}}
etcd://{{ include "tide.etcdEndpoints" . }}{{ .Values.etcd.prefix }}
{{- end }}

{{/*
The schedulers' addresses for workers and tidectl: every replica's stable pod address (HA: they follow the
leader), or the Service with one replica.
*/}}
{{- define "tide.schedulerAddresses" -}}
{{- $port := int .Values.scheduler.port }}
{{- if gt (int .Values.scheduler.replicas) 1 }}
{{- $fn := include "tide.scheduler.fullname" . }}
{{- $hl := include "tide.scheduler.headless" . }}
{{- $addrs := list }}
{{- range $i := until (int .Values.scheduler.replicas) }}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s.svc.%s:%d" $fn $i $hl $.Release.Namespace $.Values.clusterDomain $port) }}
{{- end }}
{{- join "," $addrs }}
{{- else }}
{{- printf "%s.%s.svc.%s:%d" (include "tide.scheduler.fullname" .) .Release.Namespace .Values.clusterDomain $port }}
{{- end }}
{{- end }}

{{/*
The checks values.schema.json also makes, here again so that `helm template` and `helm install` refuse with a
clear message even where the schema is skipped (--skip-schema-validation).
*/}}
{{- define "tide.validate" -}}
{{- if and (gt (int .Values.scheduler.replicas) 1) (not (include "tide.etcdMode" .)) }}
{{- fail (printf "scheduler.replicas=%d needs etcd: set etcd.enabled=true (a bundled etcd) or etcd.endpoints (an external one); SQLite serves one replica only" (int .Values.scheduler.replicas)) }}
{{- end }}
{{- if and .Values.etcd.enabled (gt (len .Values.etcd.endpoints) 0) }}
{{- fail "etcd.enabled (a bundled etcd) and etcd.endpoints (an external one) exclude each other: choose one" }}
{{- end }}
{{- if and .Values.etcd.enabled (not (has (int .Values.etcd.replicas) (list 1 3))) }}
{{- fail (printf "etcd.replicas=%d: a bundled etcd has 1 or 3 members" (int .Values.etcd.replicas)) }}
{{- end }}
{{- if and .Values.workers.durableCheckpoints.enabled (not .Values.workers.durableCheckpoints.existingClaim) }}
{{- fail "workers.durableCheckpoints.enabled needs workers.durableCheckpoints.existingClaim (a ReadWriteMany claim shared by the workers)" }}
{{- end }}
{{- $gpu := .Values.workers.gpu.resource }}
{{- if $gpu }}
{{- if hasKey (default dict .Values.workers.resources.requests) $gpu }}
{{- fail (printf "workers.resources.requests must not name %s: the chart sets it in limits, one per pod" $gpu) }}
{{- end }}
{{- if hasKey (default dict .Values.workers.resources.limits) $gpu }}
{{- fail (printf "workers.resources.limits must not name %s: the chart sets it, one per pod" $gpu) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Prometheus scrape annotations for the scheduler's /metrics. */}}
{{- define "tide.scheduler.metricsAnnotations" -}}
{{- if .Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.scheduler.port | quote }}
prometheus.io/path: /metrics
{{- if .Values.tls.secretName }}
prometheus.io/scheme: https
{{- end }}
{{- end }}
{{- end }}
