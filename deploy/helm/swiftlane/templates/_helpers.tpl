{{- /* SPDX-License-Identifier: Apache-2.0 */ -}}

{{- define "swiftlane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* Resource name prefix: the release name, or <release>-<chart> when the
release name does not already contain the chart name. Leaves room for the
longest suffix ("-agent-metrics", 14 characters) within 63. */ -}}
{{- define "swiftlane.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 49 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 49 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 49 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "swiftlane.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "swiftlane.labels" -}}
helm.sh/chart: {{ include "swiftlane.chart" . }}
app.kubernetes.io/name: {{ include "swiftlane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ (default .Chart.AppVersion .Values.image.tag) | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: swiftlane
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- /* Selector labels of one component; call with (dict "ctx" $ "component" "agent"). */ -}}
{{- define "swiftlane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "swiftlane.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "swiftlane.componentLabels" -}}
{{ include "swiftlane.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "swiftlane.image" -}}
{{- $repo := .Values.image.repository }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "swiftlane.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (printf "%s-agent" (include "swiftlane.fullname" .)) .Values.agent.serviceAccount.name }}
{{- else }}
{{- required "agent.serviceAccount.name: set the name of an existing ServiceAccount when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "swiftlane.api.serviceAccountName" -}}
{{- if .Values.api.serviceAccount.create }}
{{- default (printf "%s-api" (include "swiftlane.fullname" .)) .Values.api.serviceAccount.name }}
{{- else }}
{{- required "api.serviceAccount.name: set the name of an existing ServiceAccount when api.serviceAccount.create is false" .Values.api.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "swiftlane.lb.serviceAccountName" -}}
{{- if .Values.lb.serviceAccount.create }}
{{- default (printf "%s-lb" (include "swiftlane.fullname" .)) .Values.lb.serviceAccount.name }}
{{- else }}
{{- required "lb.serviceAccount.name: set the name of an existing ServiceAccount when lb.serviceAccount.create is false" .Values.lb.serviceAccount.name }}
{{- end }}
{{- end }}

{{- /* Refuses lb.enabled while kube-proxy may still program the same cluster
IPs, and without an apiserver address the node reaches without Service NAT. */ -}}
{{- define "swiftlane.lb.validate" -}}
{{- if not (or .Values.lb.kubeProxyRemoved .Values.lb.serviceProxyName) }}
{{- fail "lb.kubeProxyRemoved: lb.enabled needs kube-proxy removed first: delete its DaemonSet (kubectl -n kube-system delete daemonset kube-proxy), run `kube-proxy --cleanup` on every node, then set lb.kubeProxyRemoved=true (docs/kubernetes.md, \"Replace kube-proxy\"); or keep kube-proxy and set lb.serviceProxyName to serve only the Services labelled service.kubernetes.io/service-proxy-name with it" }}
{{- end }}
{{- if not .Values.lb.apiServer.host }}
{{- fail "lb.apiServer.host: lb.enabled needs the kube-apiserver's address as nodes reach it without Service NAT (the load balancer serves the kubernetes Service's cluster IP, so it cannot use it): e.g. --set lb.apiServer.host=10.0.0.10 --set lb.apiServer.port=6443 (kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')" }}
{{- end }}
{{- end }}

{{- /* Secret holding the API's token signing key and bootstrap admin credential. */ -}}
{{- define "swiftlane.api.authSecretName" -}}
{{- default (printf "%s-api-auth" (include "swiftlane.fullname" .)) .Values.api.auth.existingSecret }}
{{- end }}

{{- /* kubernetes.io/tls Secret the API serves with. */ -}}
{{- define "swiftlane.api.tlsSecretName" -}}
{{- default (printf "%s-api-tls" (include "swiftlane.fullname" .)) .Values.api.tls.existingSecret }}
{{- end }}

{{- /* DNS names the API's generated certificate covers: the Service's names,
localhost (kubectl port-forward) and api.tls.extraSANs that are not IPs. */ -}}
{{- define "swiftlane.api.dnsNames" -}}
{{- $svc := printf "%s-api" (include "swiftlane.fullname" .) }}
{{- $ns := .Release.Namespace }}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) "localhost" }}
{{- range .Values.api.tls.extraSANs }}
{{- if not (regexMatch "^[0-9.]+$|:" .) }}
{{- $names = append $names . }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end }}

{{- define "swiftlane.api.ips" -}}
{{- $ips := list "127.0.0.1" "::1" }}
{{- range .Values.api.tls.extraSANs }}
{{- if regexMatch "^[0-9.]+$|:" . }}
{{- $ips = append $ips . }}
{{- end }}
{{- end }}
{{- toJson $ips }}
{{- end }}

{{- /* The API's key material as JSON: {"auth": {secret data}, "tls": {caCrt,
caKey, crt, key, sans, notAfter}} (base64 values; a part is absent when
api.*.existingSecret names the user's own). Live Secrets are reused (lookup);
what is missing or due is generated. Computed once per render and kept in the
root context, so every template sees the same material. */ -}}
{{- define "swiftlane.api.material" -}}
{{- if not (hasKey . "swiftlaneAPIMaterial") }}
{{- $ns := .Release.Namespace }}
{{- $fullname := include "swiftlane.fullname" . }}
{{- $m := dict }}
{{- if not .Values.api.auth.existingSecret }}
{{- $old := (lookup "v1" "Secret" $ns (include "swiftlane.api.authSecretName" .)).data | default dict }}
{{- $key := get $old "signing.key" }}
{{- $cred := get $old "admin.credential" }}
{{- if not (and $key $cred) }}
{{- $key = genPrivateKey "ed25519" | b64enc }}
{{- $cred = randAlphaNum 32 | b64enc }}
{{- end }}
{{- $_ := set $m "auth" (dict "signing.key" $key "admin.credential" $cred) }}
{{- end }}
{{- if not .Values.api.tls.existingSecret }}
{{- $oldCA := (lookup "v1" "Secret" $ns (printf "%s-api-ca" $fullname)).data | default dict }}
{{- $oldTLSObj := lookup "v1" "Secret" $ns (include "swiftlane.api.tlsSecretName" .) | default dict }}
{{- $oldTLS := get $oldTLSObj "data" | default dict }}
{{- $oldAnn := (get $oldTLSObj "metadata" | default dict).annotations | default dict }}
{{- $dns := include "swiftlane.api.dnsNames" . | fromJsonArray }}
{{- $ips := include "swiftlane.api.ips" . | fromJsonArray }}
{{- $sans := printf "%s %s" (toJson $dns) (toJson $ips) | sha256sum | trunc 16 }}
{{- $now := now | unixEpoch | int64 }}
{{- $caCrt := get $oldCA "ca.crt" }}
{{- $caKey := get $oldCA "ca.key" }}
{{- $ca := dict }}
{{- $caNew := false }}
{{- if and $caCrt $caKey }}
{{- $ca = buildCustomCert $caCrt $caKey }}
{{- else }}
{{- $ca = genCAWithKey (printf "%s api CA" $fullname) (int .Values.api.tls.caValidityDays) (genPrivateKey "ecdsa") }}
{{- $caCrt = $ca.Cert | b64enc }}
{{- $caKey = $ca.Key | b64enc }}
{{- $caNew = true }}
{{- end }}
{{- $crt := get $oldTLS "tls.crt" }}
{{- $key := get $oldTLS "tls.key" }}
{{- $notAfter := get $oldAnn "swiftlane.io/not-after" | default "0" | int64 }}
{{- $keep := and $crt $key (not $caNew) (eq (get $oldAnn "swiftlane.io/sans") $sans) (gt (sub $notAfter $now) (mul 30 86400)) }}
{{- if not $keep }}
{{- $days := int .Values.api.tls.certValidityDays }}
{{- $leaf := genSignedCertWithKey (printf "%s-api" $fullname) $ips $dns $days $ca (genPrivateKey "ecdsa") }}
{{- $crt = $leaf.Cert | b64enc }}
{{- $key = $leaf.Key | b64enc }}
{{- $notAfter = add $now (mul $days 86400) }}
{{- end }}
{{- $_ := set $m "tls" (dict "caCrt" $caCrt "caKey" $caKey "crt" $crt "key" $key "sans" $sans "notAfter" (toString $notAfter)) }}
{{- end }}
{{- $_ := set . "swiftlaneAPIMaterial" (toJson $m) }}
{{- end }}
{{- get . "swiftlaneAPIMaterial" }}
{{- end }}
