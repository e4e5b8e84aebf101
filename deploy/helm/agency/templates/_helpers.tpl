{{- define "agency.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "agency.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "agency.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "agency.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret holding the admin secret and the variables key. */}}
{{- define "agency.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "agency.fullname" .)) -}}
{{- end -}}

{{- define "agency.natsSecretName" -}}
{{- .Values.nats.existingSecret | default (printf "%s-secrets" (include "agency.fullname" .)) -}}
{{- end -}}

{{- define "agency.postgresSecretName" -}}
{{- .Values.postgresql.existingSecret | default (printf "%s-secrets" (include "agency.fullname" .)) -}}
{{- end -}}

{{/* Does the chart make a Secret of its own? */}}
{{- define "agency.ownSecret" -}}
{{- if or (not .Values.secrets.existingSecret) (and .Values.nats.bundled (not .Values.nats.existingSecret)) (and .Values.postgresql.bundled (not .Values.postgresql.existingSecret)) -}}true{{- end -}}
{{- end -}}

{{/* The environment every Agency container gets: NATS, PostgreSQL, secrets, settings. */}}
{{- define "agency.env" -}}
{{- $full := include "agency.fullname" . -}}
{{- if .Values.nats.bundled }}
- name: NATS_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ include "agency.natsSecretName" . }}, key: nats-password}}
- name: NATS_URL
  value: {{ $urls := list }}{{ range $i := until (int .Values.nats.replicas) }}{{ $urls = append $urls (printf "nats://agency:$(NATS_PASSWORD)@%s-nats-%d.%s-nats:4222" $full $i $full) }}{{ end }}{{ join "," $urls | quote }}
{{- else }}
- name: NATS_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "nats.external.existingSecret is required when nats.bundled is false" .Values.nats.external.existingSecret }}
      key: {{ .Values.nats.external.urlKey }}
{{- end }}
{{- if .Values.postgresql.bundled }}
- name: POSTGRES_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ include "agency.postgresSecretName" . }}, key: postgres-password}}
- name: DATABASE_URL
  value: {{ printf "postgresql://%s:$(POSTGRES_PASSWORD)@%s-postgresql:5432/%s" .Values.postgresql.user $full .Values.postgresql.database | quote }}
{{- else }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "postgresql.external.existingSecret is required when postgresql.bundled is false" .Values.postgresql.external.existingSecret }}
      key: {{ .Values.postgresql.external.urlKey }}
{{- end }}
- name: AGENCY_ADMIN_SECRET
  valueFrom: {secretKeyRef: {name: {{ include "agency.secretName" . }}, key: admin-secret}}
- name: AGENCY_VARIABLES_KEY
  valueFrom: {secretKeyRef: {name: {{ include "agency.secretName" . }}, key: variables-key}}
- name: AGENCY_OPERATOR_KEY
  valueFrom: {secretKeyRef: {name: {{ include "agency.secretName" . }}, key: operator-key}}
- name: AGENCY_STREAM_REPLICAS
  value: {{ .Values.nats.streamReplicas | quote }}
- name: AGENCY_EVENT_PARTITIONS
  value: {{ .Values.nats.eventPartitions | default 1 | quote }}
- name: AGENCY_RETENTION_DAYS
  value: {{ .Values.retention.days | default "off" | quote }}
- name: AGENCY_RETENTION_MAX_DAYS
  value: {{ .Values.retention.maxDays | default "off" | quote }}
- name: AGENCY_RETENTION_SWEEP_SECONDS
  value: {{ .Values.retention.sweepSeconds | default 300 | quote }}
{{- if .Values.models.fakeModel }}
- name: AGENCY_FAKE_LLM_URL
  value: {{ printf "http://%s-model:8000/v1" $full | quote }}
{{- end }}
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{- define "agency.envFrom" -}}
{{- if .Values.models.existingSecret }}
envFrom:
  - secretRef: {name: {{ .Values.models.existingSecret }}}
{{- end }}
{{- end -}}
