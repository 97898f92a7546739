{{/* Chart name, truncated to 63 characters (DNS label limit of object names). */}}
{{- define "gpu-policy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart, or the override; 63 characters at most. */}}
{{- define "gpu-policy.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gpu-policy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpu-policy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels that select the webhook pods; never change them between versions. */}}
{{- define "gpu-policy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-policy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-policy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpu-policy.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret holding tls.crt / tls.key (and ca.crt where the chart or cert-manager makes it). */}}
{{- define "gpu-policy.tlsSecret" -}}
{{- if eq .Values.certificates.mode "provided" -}}
{{- required "certificates.existingSecret is required when certificates.mode is provided" .Values.certificates.existingSecret -}}
{{- else -}}
{{- printf "%s-tls" (include "gpu-policy.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The Service DNS name the API server dials and the certificate must name. */}}
{{- define "gpu-policy.serviceHost" -}}
{{- printf "%s.%s.svc" (include "gpu-policy.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/*
Namespaces the webhooks never see: the configured list plus, always, the release namespace
(a webhook that judges its own pods can never come back up after an outage).
*/}}
{{- define "gpu-policy.excludedNamespaces" -}}
{{- $ns := append (.Values.webhook.excludedNamespaces | default list) .Release.Namespace | uniq -}}
{{- toJson $ns -}}
{{- end -}}

{{- define "gpu-policy.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "gpu-policy.excludedNamespaces" . }}
    {{- with .Values.webhook.namespaceSelectorExpressions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/*
True (non-empty) when the cluster understands matchConditions: beta and on by default from 1.28,
GA in 1.30. The "-0" admits vendor prerelease-style versions (v1.28.3-eks-..., v1.28.1-r0-CCE...).
*/}}
{{- define "gpu-policy.matchConditionsSupported" -}}
{{- if and .Values.webhook.matchConditions (semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end -}}

{{/* The caBundle for the webhook configurations, when the chart knows it. */}}
{{- define "gpu-policy.caBundle" -}}
{{- if eq .Values.certificates.mode "provided" -}}
{{- required "certificates.caBundle (base64 PEM of the CA) is required when certificates.mode is provided" .Values.certificates.caBundle -}}
{{- else if eq .Values.certificates.mode "self-signed" -}}
{{- index (include "gpu-policy.selfSignedPair" . | fromYaml) "ca.crt" -}}
{{- end -}}
{{- end -}}

{{/*
The self-signed CA and leaf, generated once and then reused: if the Secret already exists in
the cluster (helm upgrade), its contents are returned; otherwise a new pair is made. Cached in
.Values so the Secret and the webhook configurations in one render agree.
*/}}
{{- define "gpu-policy.selfSignedPair" -}}
{{- if not (hasKey .Values "__selfSignedPair") -}}
{{- $secretName := printf "%s-tls" (include "gpu-policy.fullname" .) -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName -}}
{{- $pair := dict -}}
{{- if and $existing $existing.data (hasKey $existing.data "ca.crt") (hasKey $existing.data "tls.crt") (hasKey $existing.data "tls.key") -}}
{{- $_ := set $pair "ca.crt" (index $existing.data "ca.crt") -}}
{{- $_ := set $pair "tls.crt" (index $existing.data "tls.crt") -}}
{{- $_ := set $pair "tls.key" (index $existing.data "tls.key") -}}
{{- else -}}
{{- $name := include "gpu-policy.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $days := int .Values.certificates.selfSignedDays -}}
{{- $ca := genCA (printf "%s-ca" $name) $days -}}
{{- $sans := list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns) -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $name $ns) nil $sans $days $ca -}}
{{- $_ := set $pair "ca.crt" ($ca.Cert | b64enc) -}}
{{- $_ := set $pair "tls.crt" ($cert.Cert | b64enc) -}}
{{- $_ := set $pair "tls.key" ($cert.Key | b64enc) -}}
{{- end -}}
{{- $_ := set .Values "__selfSignedPair" $pair -}}
{{- end -}}
{{- toYaml (index .Values "__selfSignedPair") -}}
{{- end -}}

{{/* The policy config the server reads: values.policy plus the namespaces the chart knows. */}}
{{- define "gpu-policy.config" -}}
{{- $policy := deepCopy .Values.policy -}}
{{- $exempt := concat (.Values.policy.exemptNamespaces | default list) (.Values.webhook.excludedNamespaces | default list) | uniq -}}
{{- $_ := set $policy "exemptNamespaces" $exempt -}}
{{- $_ := set $policy "webhookNamespace" .Release.Namespace -}}
{{- toYaml $policy -}}
{{- end -}}

{{/* The webhook image. The default repository is a placeholder no registry serves: fail with what to
do rather than deploy pods that can never pull (unless a digest pins an image, or the placeholder is
allowed for a preview). */}}
{{- define "gpu-policy.image" -}}
{{- $img := .Values.image -}}
{{- if and (eq $img.repository "ghcr.io/gpu-policy/gpu-policy") (not $img.digest) (not $img.allowPlaceholder) -}}
{{- fail "image.repository is still the placeholder ghcr.io/gpu-policy/gpu-policy, which no registry serves: build the image (make image), push it, then set image.repository (and image.tag) to where you pushed it, or image.digest; image.allowPlaceholder=true renders anyway" -}}
{{- end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository ($img.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The release namespace is always exempt from both webhooks (the webhook must never judge its own
pods): installed into a namespace where workloads run, it would wave every pod there through. */}}
{{- define "gpu-policy.checkNamespace" -}}
{{- if has .Release.Namespace (list "default") -}}
{{- fail (printf "the release namespace %q is exempt from gpu-policy (its own namespace always is), so every pod created there would skip isolation and validation: install into a namespace of its own (helm install --namespace gpu-policy --create-namespace)" .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/*
The enforcement mode in effect: webhook, native or both. auto is both where the API server runs
MutatingAdmissionPolicy (admissionregistration.k8s.io/v1: GA and on by default from 1.36), so
isolation holds through a webhook outage; webhook elsewhere. native and both fail the render on a
cluster without it, saying so.
*/}}
{{- define "gpu-policy.enforcement" -}}
{{- $has := or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version) -}}
{{- $mode := .Values.enforcement -}}
{{- if eq $mode "auto" -}}
{{- ternary "both" "webhook" $has -}}
{{- else -}}
{{- if and (ne $mode "webhook") (not $has) -}}
{{- fail (printf "enforcement %s needs MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.36); this cluster is %s: use enforcement webhook (or auto)" $mode .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{/* Non-empty when isolation runs in the API server (enforcement both or native). */}}
{{- define "gpu-policy.nativeIsolation" -}}
{{- if ne (include "gpu-policy.enforcement" .) "webhook" -}}true{{- end -}}
{{- end -}}

{{/*
policy.rollout audit: nothing gpu-policy installs refuses an object. The server warns of and records
(audit annotations) what its deny rules find; the native policies' deny bindings warn and audit;
every webhook and policy fails open. "true" or "". Enforcing later changes only what reads this.
*/}}
{{- define "gpu-policy.auditRollout" -}}
{{- if eq (.Values.policy.rollout | default "enforce") "audit" }}true{{ end -}}
{{- end -}}

{{/* A fail-closed failurePolicy (the context: list $ "Fail"), Ignore under rollout audit. */}}
{{- define "gpu-policy.failurePolicy" -}}
{{- if include "gpu-policy.auditRollout" (index . 0) }}Ignore{{ else }}{{ index . 1 }}{{ end -}}
{{- end -}}

{{/* A binding's validationActions for a mode (the context: list $ mode): deny warns and audits under rollout audit. */}}
{{- define "gpu-policy.validationActions" -}}
{{- $mode := index . 1 -}}
{{- if and (eq $mode "deny") (include "gpu-policy.auditRollout" (index . 0)) }}Warn, Audit{{ else }}{{ include "gpu-policy.validationAction" $mode }}{{ end -}}
{{- end -}}

{{/*
webhook.policy.cel.exception_guard in Helm: for a twin's validation of a rule (the context: list
$ rule-id metadata-CEL), "(E) || " where E is true for a pod that an exception in force excuses
(policy.exceptions: its namespace, every podLabels pair), or "". CEL has no clock: an exception is
in force when the chart is rendered through its expires day (UTC); one that expires later stays in
the policy until the next render (the webhook, and gpu-policy audit, know the date).
*/}}
{{- define "gpu-policy.excepted" -}}
{{- $ctx := index . 0 -}}{{- $rule := index . 1 -}}{{- $meta := index . 2 -}}
{{- $today := now | date "2006-01-02" -}}
{{- $terms := list -}}
{{- range $e := ($ctx.Values.policy.exceptions | default list) -}}
{{- if and (has $rule $e.rules) (ge (toString $e.expires | trunc 10) $today) -}}
{{- $term := printf "request.namespace == %s" (toJson $e.namespace) -}}
{{- range $k, $v := ($e.podLabels | default dict) -}}
{{- $term = printf "%s && has(%s) && has(%s.labels) && %s in %s.labels && %s.labels[%s] == %s" $term $meta $meta (toJson $k) $meta $meta (toJson $k) (toJson $v) -}}
{{- end -}}
{{- $terms = append $terms (printf "(%s)" $term) -}}
{{- end -}}
{{- end -}}
{{- if $terms }}({{ join " || " $terms }}) || {{ end -}}
{{- end -}}
