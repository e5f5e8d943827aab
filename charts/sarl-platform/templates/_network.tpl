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
