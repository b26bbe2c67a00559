{{/*
The namespace KGWE runs in: the release's. The controller, the webhook and the extender learn it from
their pod (POD_NAMESPACE), so every name they derive from it (the rendered ConfigMaps, the Services their
certificates are for) follows the release.
*/}}
{{- define "kgwe.namespace" -}}
{{ .Release.Namespace }}
{{- end -}}

{{/* Labels that select a component's pods (never change them on upgrade): (list $ "controller"). */}}
{{- define "kgwe.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: kgwe
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The recommended labels of every object of component $component: (list $ "controller"). */}}
{{- define "kgwe.labels" -}}
{{- $root := index . 0 -}}
{{ include "kgwe.selectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kgwe
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The KGWE image reference. */}}
{{- define "kgwe.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
The kube-scheduler image: scheduler.image.tag, else the cluster's own version (a scheduler newer than the
API server breaks the version skew policy). .Capabilities.KubeVersion is the cluster's on install and
upgrade (`helm template` uses --kube-version); a distribution suffix (v1.30.4-eks-..., +k3s1) is dropped,
registry.k8s.io tags have none.
*/}}
{{- define "kgwe.schedulerImage" -}}
{{- $version := regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version -}}
{{ .Values.scheduler.image.repository }}:{{ .Values.scheduler.image.tag | default $version }}
{{- end -}}

{{/*
Pod metadata every KGWE pod shares: the selector labels and the global plus the component's annotations:
(list $ "controller" .Values.migController).
*/}}
{{- define "kgwe.podMetadata" -}}
{{- $root := index . 0 -}}
labels: {{- include "kgwe.labels" (list $root (index . 1)) | nindent 2 }}
{{- with merge (dict) ((index . 2).podAnnotations | default dict) $root.Values.podAnnotations }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
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
priorityClassName; an empty affinity spreads the replicas over nodes: (list $ .Values.webhook "webhook").
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
              {{- include "kgwe.selectorLabels" (list (index . 0) (index . 2)) | nindent 14 }}
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

{{/* Pod and container security contexts (values podSecurityContext, securityContext); {} renders nothing. */}}
{{- define "kgwe.podSecurityContext" -}}
{{- with . }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{- define "kgwe.containerSecurityContext" -}}
{{- with . }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A component's extraArgs after its own arguments: (list .Values.webhook.extraArgs). */}}
{{- define "kgwe.extraArgs" -}}
{{- range . }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* POD_NAMESPACE from the downward API: KGWE's processes find their namespace there. */}}
{{- define "kgwe.podNamespaceEnv" -}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
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

{{/*
Where the extender runs and how kube-scheduler reaches it. sidecar (the default): a container of each
kgwe-scheduler pod on 127.0.0.1:8888 (kgwe.vocab.EXTENDER_PORT), plain HTTP over the pod's loopback;
standalone: its own Deployment behind the Service kgwe-extender, mutual TLS on 8443 (plain HTTP on 8080
with extender.standalone.tls.enabled=false).
*/}}
{{- define "kgwe.extenderStandalone" -}}
{{- if eq .Values.extender.mode "standalone" }}true{{ end -}}
{{- end -}}
{{- define "kgwe.extenderTLS" -}}
{{- if and (include "kgwe.extenderStandalone" .) .Values.extender.standalone.tls.enabled }}true{{ end -}}
{{- end -}}
{{- define "kgwe.extenderPort" -}}
{{- if include "kgwe.extenderStandalone" . -}}
{{ ternary "8443" "8080" .Values.extender.standalone.tls.enabled }}
{{- else -}}
8888
{{- end -}}
{{- end -}}
{{- define "kgwe.extenderURL" -}}
{{- if include "kgwe.extenderStandalone" . -}}
{{ ternary "https" "http" .Values.extender.standalone.tls.enabled }}://kgwe-extender.{{ include "kgwe.namespace" . }}.svc:{{ include "kgwe.extenderPort" . }}
{{- else -}}
http://127.0.0.1:{{ include "kgwe.extenderPort" . }}
{{- end -}}
{{- end -}}
{{/* Where kgwe-scheduler mounts its client certificate for the standalone extender's mutual TLS. */}}
{{- define "kgwe.extenderClientDir" -}}
/etc/kgwe/extender-client
{{- end -}}

{{/*
How GPU pods of opted-in namespaces are routed to kgwe-scheduler (webhook.enabled): "policy" (the
MutatingAdmissionPolicy kgwe-scheduling, run by the API server itself) or "webhook" (the kgwe-webhook
server); "" when not at all. webhook.routeWith Auto takes the policy where the cluster serves
admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Helm's view of the API server: on install and
upgrade, the server's discovery; `helm template` without --api-versions assumes it does not).
*/}}
{{- define "kgwe.routeWith" -}}
{{- if .Values.webhook.enabled -}}
{{- $with := .Values.webhook.routeWith | default "Auto" -}}
{{- if eq $with "Policy" -}}policy
{{- else if eq $with "Webhook" -}}webhook
{{- else if eq $with "Auto" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}policy{{ else }}webhook{{ end -}}
{{- else -}}
{{- fail (printf "webhook.routeWith is Auto, Policy or Webhook, not %q" $with) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The certificates KGWE's controller keeps (its --certificates), unless cert-manager issues them: the
webhook's (when pods are routed by the webhook server), the standalone extender's mutual TLS, and /metrics'
(the controller's and the extender's).
*/}}
{{- define "kgwe.controllerCertificates" -}}
{{- $c := list -}}
{{- if not .Values.certManager.enabled -}}
{{- if eq (include "kgwe.routeWith" .) "webhook" }}{{ $c = append $c "webhook" }}{{ end -}}
{{- if include "kgwe.extenderTLS" . }}{{ $c = append $c "extender" }}{{ end -}}
{{- $c = append $c "metrics" -}}
{{- end -}}
{{ join "," $c }}
{{- end -}}

{{/*
Whether the GPU Operator's namespace exists. On install and upgrade Helm can look: a cluster that answers
for kube-system but has no gpuOperator.namespace gets no objects there (NOTES says what to do); `helm
template` cannot look and renders everything.
*/}}
{{- define "kgwe.gpuOperatorNamespaceMissing" -}}
{{- if and (lookup "v1" "Namespace" "" "kube-system") (not (lookup "v1" "Namespace" "" .Values.gpuOperator.namespace)) -}}
true
{{- end -}}
{{- end -}}

{{/* Values that cannot work together: said at install time instead of pods that never become Ready. */}}
{{- define "kgwe.checkValues" -}}
{{- if and (eq (include "kgwe.routeWith" .) "webhook") (not .Values.certManager.enabled) (not .Values.migController.enabled) -}}
{{- fail "the webhook's certificate comes from the KGWE controller or cert-manager: set migController.enabled=true or certManager.enabled=true (or webhook.enabled=false)" -}}
{{- end -}}
{{- if and (include "kgwe.extenderTLS" .) (not .Values.certManager.enabled) (not .Values.migController.enabled) -}}
{{- fail "the standalone extender's mutual TLS certificates come from the KGWE controller or cert-manager: set migController.enabled=true or certManager.enabled=true (or extender.standalone.tls.enabled=false)" -}}
{{- end -}}
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

{{/* CEL: whether container `.` (a variable name) requests or limits an NVIDIA GPU, GPU share or MIG
instance (kgwe.vocab.is_gpu_resource). */}}
{{- define "kgwe.asksForGPU" -}}
{{- $gpu := "k == 'nvidia.com/gpu' || k == 'nvidia.com/gpu.shared' || k.startsWith('nvidia.com/mig-')" -}}
has({{ . }}.resources) && ((has({{ . }}.resources.requests) && {{ . }}.resources.requests.exists(k, {{ $gpu }})) || (has({{ . }}.resources.limits) && {{ . }}.resources.limits.exists(k, {{ $gpu }})))
{{- end }}

{{/* GET /metrics over TLS (kgwe.httpd.metrics_port): the flags of a container serving it. */}}
{{- define "kgwe.metricsArgs" -}}
- --metrics-listen=0.0.0.0:9443
- --metrics-tls-cert-file=/etc/kgwe/metrics-tls/tls.crt
- --metrics-tls-key-file=/etc/kgwe/metrics-tls/tls.key
{{- end }}

{{/* Its certificate (Secret kgwe-metrics-tls, from the controller or cert-manager): optional, so the pod
starts before it is issued; the port refuses handshakes until the kubelet's next sync brings it. */}}
{{- define "kgwe.metricsVolume" -}}
- name: metrics-tls
  secret: {secretName: kgwe-metrics-tls, optional: true}
{{- end }}
{{/*
A PodDisruptionBudget for a replicated component: a node drain (or a cluster upgrade) evicts at most one of
its pods at a time, so a standby stays up to take the Lease and the Service keeps an endpoint. Rendered only
with more than one replica: on a single replica any budget would block every drain of its node.
unhealthyPodEvictionPolicy AlwaysAllow: a replica that is not Ready never holds a drain up.
(list $ "controller" replicas .podDisruptionBudget.enabled)
*/}}
{{- define "kgwe.podDisruptionBudget" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- if and (index . 3) (gt (int (index . 2)) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: kgwe-{{ $component }}
  namespace: {{ include "kgwe.namespace" $root }}
  labels: {{- include "kgwe.labels" (list $root $component) | nindent 4 }}
spec:
  maxUnavailable: 1
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels: {{- include "kgwe.selectorLabels" (list $root $component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/* The Helm hook events the chart runs Jobs at ("" when none); their ServiceAccount and RBAC follow. */}}
{{- define "kgwe.hookEvents" -}}
{{- $events := list -}}
{{- if .Values.policyRepository.create }}{{ $events = concat $events (list "post-install" "post-upgrade") }}{{ end -}}
{{- if .Values.uninstall.release }}{{ $events = append $events "pre-delete" }}{{ end -}}
{{- if and .Values.uninstall.release (not .Values.namespace.create) }}{{ $events = append $events "post-delete" }}{{ end -}}
{{ join "," $events }}
{{- end -}}

{{/* A hook's annotations: made before its hook runs, removed once it succeeded: (list "pre-delete" "-10"). */}}
{{- define "kgwe.hookAnnotations" -}}
helm.sh/hook: {{ index . 0 }}
helm.sh/hook-weight: {{ index . 1 | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}

{{/*
A hook Job running `kgwe hook ARGS` as the kgwe-hooks ServiceAccount, once (a failed one stays for its log):
(list $ "pre-delete" weight (list "pre-delete" "--wait-seconds" "240")). Named after its stage; its pod
runs where the controller's may (migController's nodeSelector, tolerations, affinity).
*/}}
{{- define "kgwe.hookJob" -}}
{{- $root := index . 0 -}}
{{- $stage := index . 1 -}}
{{- $events := ternary "post-install,post-upgrade" $stage (eq $stage "policy-repository") }}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: kgwe-{{ $stage }}
  namespace: {{ include "kgwe.namespace" $root }}
  labels: {{- include "kgwe.labels" (list $root "hooks") | nindent 4 }}
  annotations: {{- include "kgwe.hookAnnotations" (list $events (index . 2)) | nindent 4 }}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {{- include "kgwe.labels" (list $root "hooks") | nindent 8 }}
    spec:
      restartPolicy: Never
      serviceAccountName: kgwe-hooks
      {{- with include "kgwe.podSecurityContext" $root.Values.podSecurityContext | trim }}{{ . | nindent 6 }}{{- end }}
      {{- with include "kgwe.imagePullSecrets" $root | trim }}{{ . | nindent 6 }}{{- end }}
      {{- with include "kgwe.podScheduling" (list $root $root.Values.migController) | trim }}{{ . | nindent 6 }}{{- end }}
      containers:
        - name: hook
          image: {{ include "kgwe.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args: [hook{{ range index . 3 }}, {{ . | quote }}{{ end }}]
          env:
            {{- include "kgwe.podNamespaceEnv" $root | nindent 12 }}
          resources:
            requests: {cpu: 10m, memory: 64Mi}
            limits: {memory: 256Mi}
          {{- with include "kgwe.containerSecurityContext" $root.Values.securityContext | trim }}{{ . | nindent 10 }}{{- end }}
{{- end -}}
