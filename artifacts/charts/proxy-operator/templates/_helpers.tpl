{{/*
Labels every object carries: the kustomize install's part-of label and Helm's
own. Names are fixed (not prefixed by the release): the operator finds its
Services, Secrets and APIService by these names, so a cluster runs one
release.
*/}}
{{- define "proxy-operator.labels" -}}
app.kubernetes.io/part-of: proxy-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The selector of the operator's pods (both Services, the PDB, the NetworkPolicy). */}}
{{- define "proxy-operator.selectorLabels" -}}
app.kubernetes.io/name: proxy-operator
{{- end }}

{{- define "proxy-operator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{- define "proxy-operator.squidImage" -}}
{{- if .Values.squidImage.digest -}}
{{ .Values.squidImage.repository }}@{{ .Values.squidImage.digest }}
{{- else -}}
{{ .Values.squidImage.repository }}:{{ .Values.squidImage.tag }}
{{- end -}}
{{- end }}

{{/* The Secret holding tls.crt, tls.key and ca.crt when the operator does not issue its own. */}}
{{- define "proxy-operator.tlsSecret" -}}
{{- if eq .Values.tls.mode "certManager" -}}
proxy-operator-tls
{{- else -}}
{{ required "tls.existingSecret is required with tls.mode=secret" .Values.tls.existingSecret }}
{{- end -}}
{{- end }}

{{- define "proxy-operator.validate" -}}
{{- if not (has .Values.tls.mode (list "operator" "certManager" "secret")) -}}
{{- fail (printf "tls.mode must be one of operator, certManager, secret; got %q" .Values.tls.mode) -}}
{{- end -}}
{{- if and (eq .Values.tls.mode "operator") (not .Values.tls.servingCertSecret) -}}
{{- fail "tls.servingCertSecret is required with tls.mode=operator" -}}
{{- end -}}
{{- if and (eq .Values.tls.mode "certManager") (not .Values.tls.certManager.issuerRef.name) -}}
{{- fail "tls.certManager.issuerRef.name is required with tls.mode=certManager: the Issuer or ClusterIssuer that signs the operator's certificate" -}}
{{- end -}}
{{- if and (eq .Values.tls.mode "secret") (not .Values.tls.caBundle) -}}
{{- fail "tls.caBundle is required with tls.mode=secret: the base64 PEM CA kube-apiserver verifies the ProxyLease API with" -}}
{{- end -}}
{{- if not .Values.discovery.tokenSecret -}}
{{- fail "discovery.tokenSecret is required: the Secret of the HTTP API's bearer tokens" -}}
{{- end -}}
{{- if lt (int .Values.replicaCount) 1 -}}
{{- fail (printf "replicaCount must be at least 1; got %v" .Values.replicaCount) -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled (it selects that Service)" -}}
{{- end -}}
{{- end }}
