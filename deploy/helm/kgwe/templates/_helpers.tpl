{{/*
The namespace KGWE runs in. The controller renders kgwe-scheduler-config and kgwe-scoring into
kgwe-system and the scheduler config calls kgwe-extender.kgwe-system.svc, so another namespace would
install a KGWE whose parts cannot find each other: refuse it with a clear message instead.
*/}}
{{- define "kgwe.namespace" -}}
{{- if ne .Release.Namespace "kgwe-system" -}}
{{- fail (printf "KGWE runs in the namespace kgwe-system (its controller renders the scheduler config and scoring ConfigMaps there, and the scheduler calls kgwe-extender.kgwe-system.svc); install with --namespace kgwe-system (got %q)" .Release.Namespace) -}}
{{- end -}}
kgwe-system
{{- end -}}

{{/* Labels of every object of component $component: (list $ "controller"). */}}
{{- define "kgwe.labels" -}}
app.kubernetes.io/name: kgwe
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The KGWE image reference. */}}
{{- define "kgwe.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* imagePullSecrets of a pod spec (nothing when empty). */}}
{{- define "kgwe.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Scheduling fields of a pod spec from a component's values: nodeSelector, tolerations, affinity and
priorityClassName; an empty affinity spreads the replicas over nodes: (list $ .Values.extender "extender").
*/}}
{{- define "kgwe.podScheduling" -}}
{{- $v := index . 1 -}}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.affinity }}
affinity:
  {{- toYaml $v.affinity | nindent 2 }}
{{- else if gt (len .) 2 }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "kgwe.labels" (list (index . 0) (index . 2)) | nindent 14 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* A container's resources from a component's values. */}}
{{- define "kgwe.resources" -}}
{{- with . }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The pod and container security settings every KGWE component shares. */}}
{{- define "kgwe.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  fsGroup: 65532                 # mounted Secrets (mode 0440) stay readable
  seccompProfile: {type: RuntimeDefault}
{{- end -}}
{{- define "kgwe.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end -}}

{{/*
One CRD from files/crds/ (written by `kgwe schema` from the models), verbatim apart from the
helm.sh/resource-policy annotation that keeps it on `helm uninstall`: (list $ "name.group.yaml").
*/}}
{{- define "kgwe.crd" -}}
{{- $root := index . 0 -}}
{{- if $root.Values.crds.install -}}
{{- $text := $root.Files.Get (printf "files/crds/%s" (index . 1)) -}}
{{- if not (contains "\nmetadata:\n" $text) -}}
{{- fail (printf "files/crds/%s has no top-level metadata: (regenerate it with `make schemas`)" (index . 1)) -}}
{{- end -}}
{{- if $root.Values.crds.keep -}}
{{- $text = replace "\nmetadata:\n" "\nmetadata:\n  annotations:\n    helm.sh/resource-policy: keep\n" $text -}}
{{- end -}}
{{ $text }}
{{- end -}}
{{- end -}}

{{/* The extender's API port and the URL kube-scheduler calls (https with extender.tls.enabled). */}}
{{- define "kgwe.extenderPort" -}}
{{ ternary "8443" "8080" .Values.extender.tls.enabled }}
{{- end -}}
{{- define "kgwe.extenderURL" -}}
{{ ternary "https" "http" .Values.extender.tls.enabled }}://kgwe-extender.{{ include "kgwe.namespace" . }}.svc:{{ include "kgwe.extenderPort" . }}
{{- end -}}

{{/*
cert-manager objects of a component's own CA: a self-signed Issuer, the CA Certificate (Secret
kgwe-<component>-ca) and the CA Issuer kgwe-<component>-ca that signs the component's certificates:
(list $ "webhook").
*/}}
{{- define "kgwe.certManagerCA" -}}
{{- $root := index . 0 }}{{ $c := index . 1 }}{{ $ns := include "kgwe.namespace" $root -}}
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: kgwe-{{ $c }}-selfsigned
  namespace: {{ $ns }}
  labels: {{- include "kgwe.labels" (list $root $c) | nindent 4 }}
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: kgwe-{{ $c }}-ca
  namespace: {{ $ns }}
  labels: {{- include "kgwe.labels" (list $root $c) | nindent 4 }}
spec:
  isCA: true
  commonName: kgwe-{{ $c }}-ca
  secretName: kgwe-{{ $c }}-ca
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: kgwe-{{ $c }}-selfsigned, kind: Issuer}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: kgwe-{{ $c }}-ca
  namespace: {{ $ns }}
  labels: {{- include "kgwe.labels" (list $root $c) | nindent 4 }}
spec:
  ca: {secretName: kgwe-{{ $c }}-ca}
{{- end -}}
