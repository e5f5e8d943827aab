{{/*
The namespaces whose sarl job pods the platform's NetworkPolicies name, as a JSON list: every
tenant's namespace and operator.watchNamespaces; neither: the release namespace alone, unless
operator.clusterWide (then an empty list: any namespace). The operator watches the same ones.
*/}}
{{- define "sarl-platform.jobNamespaces" -}}
{{- $listed := concat .Values.operator.watchNamespaces (list) -}}
{{- range .Values.tenants }}{{ $listed = append $listed .namespace }}{{ end -}}
{{- if and (not $listed) (not .Values.operator.clusterWide) }}{{ $listed = list .Release.Namespace }}{{ end -}}
{{- $listed | uniq | toJson -}}
{{- end }}

{{/*
A NetworkPolicy peer (one `from` entry) selecting the pods the sarl operator creates, of the given
components, in the watched namespaces (none listed: the operator watches every namespace):
(dict "watched" (list "team-a") "components" (list "trainer")). Used by network-policies.yaml.
*/}}
{{- define "sarl-platform.sarlPodPeer" -}}
- namespaceSelector:
    {{- if .watched }}
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values: {{ toJson .watched }}
    {{- else }} {}
    {{- end }}
  podSelector:
    matchLabels:
      app.kubernetes.io/managed-by: sarl-operator
    matchExpressions:
      - key: app.kubernetes.io/component
        operator: In
        values: {{ toJson .components }}
{{- end }}
