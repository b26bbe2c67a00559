"""The GPUWorkload reconciler: its own work queue and watches, inside `kgwe controller`, acting only while
this replica holds the controller's leader Lease.

Per workload: validate -> (suspended? nothing new) -> admission (the check `kgwe validate` runs,
kgwe.policy.admission: the namespace opted in, the pod templates as its PodTemplatePolicy allows,
feasible on this cluster's nodes, a gang engine, scoring profile and PriorityClass resolved; then the
namespace's kgwe-budget quota has room) -> create the run's children in order (PodGroup before the pods) ->
read them back into conditions, phase and placements -> restart the whole gang after a member failure, with
backoff. Pure decisions live in kgwe.policy.admission and .workload_resolution and in
kgwe.workloads.plan and .status; this module only reads and writes.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import ValidationError

from kgwe.cluster.client import list_items
from kgwe.cluster.events import EventRecorder
from kgwe.extender.k8s import gpu_holders, unhealthy_gpus
from kgwe.observability import tracing
from kgwe.policy.admission import (
    ClusterView,
    PolicyView,
    findings,
    not_allowed,
    quota_admission,
    quota_needs,
    refusal,
    resolve_facts,
)
from kgwe.policy.diagnostics import format_path, messages_from_validation
from kgwe.policy.gpu_workload import GPUWorkload
from kgwe.policy.workload_resolution import Facts, PlanError
from kgwe.runtime.watch import list_and_watch
from kgwe.timestamps import parse_rfc3339
from kgwe.vocab import (
    API_GROUP,
    CRD_VERSION,
    FIELD_MANAGER,
    GPU_WORKLOAD_PLURAL,
    KGWE_NAMESPACE,
    POD_TEMPLATE_POLICY_CONFIGMAP,
    RUN_LABEL,
    WORKLOAD_LABEL,
)
from kgwe.workloads import cluster_facts
from kgwe.workloads import status as st
from kgwe.workloads.namespaces import NamespaceGrants
from kgwe.workloads.plan import PODGROUP_API, plan_children, requested_gpus

log = logging.getLogger(__name__)

# Refusals that only an edit lifts (the namespace's label, the spec, a PodTemplatePolicy): no retry of
# their own; label and spec edits are watched, and the periodic resync looks again after a policy change.
WAIT_FOR_CHANGE = frozenset({"NamespaceNotEnabled", "TemplateNotAllowed"})
WATCH_SECONDS = 300  # a watch the server ends after this long is resumed from its last resourceVersion


class WorkloadMetrics:
    """GPU_Orchestrator's counters under KGWE's prefix."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.scheduled = Counter(
            "kgwe_gpuworkload_scheduled_total",
            "Workloads whose pods were all scheduled",
            ["strategy"],
            registry=registry,
        )
        self.failed = Counter(
            "kgwe_gpuworkload_failed_total", "Workload failures and refusals", ["reason"], registry=registry
        )
        self.retries = Counter("kgwe_gpuworkload_retries_total", "Whole-gang restarts", registry=registry)
        self.watch_events = Counter(
            "kgwe_gpuworkload_watch_events_total",
            "Objects the workload controller's watches handed over: LISTED (a listing), ADDED, MODIFIED, "
            "DELETED",
            ["resource", "type"],
            registry=registry,
        )
        self.watch_restarts = Counter(
            "kgwe_gpuworkload_watch_restarts_total",
            "Listings after the first: expired (410 Gone) or failed (connection dropped, API server away)",
            ["resource", "reason"],
            registry=registry,
        )
        self.duration = Histogram(
            "kgwe_gpuworkload_reconcile_duration_seconds",
            "GPUWorkload reconcile duration",
            registry=registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )


class WorkQueue:
    """Keys to reconcile: deduplicated, optionally delayed; one worker holds a key at a time."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}

    def add(self, key: str, after_seconds: float = 0.0) -> None:
        at = time.monotonic() + max(0.0, after_seconds)
        with self._cond:
            if key in self._due and self._due[key] <= at:
                return
            self._due[key] = at
            heapq.heappush(self._heap, (at, key))
            self._cond.notify()

    def get(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded entry
                if self._heap and self._heap[0][0] <= now:
                    _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    return key
                wait = deadline - now
                if self._heap:
                    wait = min(wait, self._heap[0][0] - now)
                if wait <= 0:
                    return None
                self._cond.wait(wait)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class WorkloadReconciler:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        recorder: EventRecorder,
        metrics: WorkloadMetrics,
        is_leader: Callable[[], bool],
        policy_namespace: str = KGWE_NAMESPACE,
        now: Callable[[], datetime] = _utcnow,
        cost_of: Callable[[str, str, dict], dict | None] | None = None,
    ) -> None:
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.recorder = recorder
        self.metrics = metrics
        self.is_leader = is_leader
        self.policy_namespace = policy_namespace
        self.now = now
        self.cost_of = cost_of  # (namespace, name, workload) -> status.cost; None: not metered
        self.grants = NamespaceGrants(api_client, kgwe_namespace=policy_namespace)
        self._dyn: dynamic.DynamicClient | None = None

    # -- cluster facts -------------------------------------------------------------------------------
    @property
    def dyn(self) -> dynamic.DynamicClient:
        if self._dyn is None:
            self._dyn = dynamic.DynamicClient(self.api_client)
        return self._dyn

    def _serves(self, group: str, version: str | None = None) -> bool:
        return cluster_facts.serves(self.api_client, group, version)

    def _policy(self) -> PolicyView:
        """The policy rendered from Git, read now. Without the PodTemplatePolicies the controller decides
        nothing: the reconcile fails, and is tried again."""
        policy = cluster_facts.policy_view(self.api_client, self.policy_namespace)
        if policy.template_policies is None:
            raise PermissionError(f"the controller may not read ConfigMap {POD_TEMPLATE_POLICY_CONFIGMAP}")
        return policy

    # -- children --------------------------------------------------------------------------------------
    def _view(self, namespace: str, name: str, run: int, batch: bool) -> st.RunView:
        selector = f"{WORKLOAD_LABEL}={name}"
        if batch:
            selector += f",{RUN_LABEL}={run}"
            jobs = list_items(self.batch.list_namespaced_job, namespace=namespace, label_selector=selector)
            jobs = [j for j in jobs if not j["metadata"].get("deletionTimestamp")]
            pods = list_items(self.core.list_namespaced_pod, namespace=namespace, label_selector=selector)
            return st.RunView(jobs=jobs, pods=pods)
        deps = list_items(self.apps.list_namespaced_deployment, namespace=namespace, label_selector=selector)
        pods = list_items(self.core.list_namespaced_pod, namespace=namespace, label_selector=selector)
        return st.RunView(deployments=deps, pods=pods)

    def _apply(self, obj: dict, dry_run: bool = False) -> None:
        if not self.is_leader():
            raise _NotLeader
        resource = self.dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj["metadata"]
        try:
            self.dyn.server_side_apply(
                resource,
                body=obj,
                name=meta["name"],
                namespace=meta["namespace"],
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
                **({"dry_run": "All"} if dry_run else {}),
            )
        except ApiException as exc:
            if exc.status != 403:
                raise
            # e.g. the namespace's RoleBinding not granted yet, or removed with the opt-in label
            raise PlanError(
                "Forbidden",
                f"the controller may not write {obj['kind']} {meta['name']} in {meta['namespace']}",
            ) from None

    def _delete_run(self, namespace: str, name: str, run: int) -> None:
        """Delete the run's Jobs and PodGroup; their pods go with them (background cascade)."""
        if not self.is_leader():
            raise _NotLeader
        selector = f"{WORKLOAD_LABEL}={name},{RUN_LABEL}={run}"
        body = client.V1DeleteOptions(propagation_policy="Background")
        for job in list_items(self.batch.list_namespaced_job, namespace=namespace, label_selector=selector):
            try:
                self.batch.delete_namespaced_job(job["metadata"]["name"], namespace, body=body)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        if self._serves("scheduling.k8s.io", "v1beta1"):
            resource = self.dyn.resources.get(api_version=PODGROUP_API, kind="PodGroup")
            try:
                resource.delete(label_selector=selector, namespace=namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def _write_status(self, obj: dict, new_status: dict) -> None:
        if not self.is_leader():
            raise _NotLeader
        meta = obj["metadata"]
        self.custom.patch_namespaced_custom_object_status(
            API_GROUP,
            CRD_VERSION,
            meta["namespace"],
            GPU_WORKLOAD_PLURAL,
            meta["name"],
            {"status": new_status},
            _content_type="application/merge-patch+json",
        )

    # -- one reconcile ---------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> float | None:
        """Returns seconds until this workload wants another look (None: only on change)."""
        start = time.monotonic()
        try:
            return self._reconcile(namespace, name)
        except _NotLeader:
            return None
        finally:
            self.metrics.duration.observe(time.monotonic() - start)

    def _reconcile(self, namespace: str, name: str) -> float | None:
        if not self.grants.listed.is_set():
            return 1.0  # which namespaces opted in is not known yet: decide nothing
        try:
            obj = self.custom.get_namespaced_custom_object(
                API_GROUP, CRD_VERSION, namespace, GPU_WORKLOAD_PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        if obj["metadata"].get("deletionTimestamp"):
            return None
        old = obj.get("status") or {}
        p = _Pass(obj, _copy_status(old), int(obj["metadata"].get("generation") or 0), self.now())
        try:
            wl = GPUWorkload.model_validate(obj)
        except ValidationError as exc:  # said once in a condition; the next edit of the spec brings it back
            loc, message = messages_from_validation(GPUWorkload, exc)[0]
            self._refuse(p, "InvalidSpec", f"{format_path(loc)}: {message}")
            return self._finish(p, old, None)
        try:
            requeue = self._drive(p, wl)
        except PlanError as exc:
            self._refuse(p, exc.reason, str(exc))
            requeue = None if exc.reason in WAIT_FOR_CHANGE else 30.0
        return self._finish(p, old, requeue)

    def _refuse(self, p: _Pass, reason: str, message: str) -> None:
        if p.condition("Admitted", "False", reason, message):
            p.event("Warning", reason, message)
            self.metrics.failed.labels(reason).inc()

    def _finish(self, p: _Pass, old: dict, requeue: float | None) -> float | None:
        p.new["phase"] = st.derive_phase(p.new["conditions"])
        p.new["observedGeneration"] = p.generation
        if p.new != old:
            self._write_status(p.obj, p.new)
        for event_type, reason, message in p.events:
            self.recorder.record(p.obj, event_type, reason, message)
        return requeue

    def _drive(self, p: _Pass, wl: GPUWorkload) -> float | None:
        spec, new = wl.spec, p.new
        if st.is_true(new["conditions"], "Complete") or st.is_true(new["conditions"], "Failed"):
            self._cost(p, wl)
            return None
        run = int(new.get("run") or 0)
        next_retry = parse_rfc3339(new.get("nextRetryTime"))
        if next_retry is not None:
            if p.now < next_retry:
                return (next_retry - p.now).total_seconds()
            run += 1
            new.update(run=run, nextRetryTime=None, runStartTime=None)
        view = self._view(p.namespace, wl.name, run, spec.is_batch)
        exists = bool(view.jobs or view.deployments)
        if spec.suspend:
            changed = p.condition("Suspended", "True", "Suspended", "spec.suspend is true")
        else:
            changed = p.condition("Suspended", "False", "NotSuspended", "")
        if changed and (spec.suspend or exists):
            p.event(
                "Normal", "Suspended" if spec.suspend else "Resumed", "spec.suspend is " + str(spec.suspend)
            )
        new["gpus"] = requested_gpus(wl)
        if not exists:
            if spec.suspend:
                return None
            with tracing.span("kgwe.gpuworkload.admission", **{"kgwe.workload": f"{p.namespace}/{wl.name}"}):
                self._admit(p, wl, run)
            view = self._view(p.namespace, wl.name, run, spec.is_batch)
        elif int(new.get("observedGeneration") or 0) != p.generation or not st.is_true(
            new["conditions"], "Admitted"
        ):
            # a spec edit (e.g. suspend) reaches the children; one refused before is tried again
            applied = self._reapply(p, wl, run)
            message = f"run {run}: {spec.total_pods} pod(s), gang {new.get('gangBackend')}"
            if applied and p.condition("Admitted", "True", "Admitted", message):
                p.event("Normal", "Admitted", message)
        return self._observe(p, wl, view, run)

    def _reapply(self, p: _Pass, wl: GPUWorkload, run: int) -> bool:
        """A spec edit (e.g. suspend) reaches the running children; True when it did. What the policy refuses
        (the namespace's opt-in, a PodTemplatePolicy, the API server's permission) is a refusal like at
        admission. What the children cannot take (a Job's pod template is immutable; the WorkloadRuntime may
        have changed or gone since admission) is said once in a Warning Event and the run goes on: the next
        run is planned from the new spec."""
        try:
            policy = self._policy()
            self._create(p, wl, run, self._facts(wl, run, policy), policy)
            return True
        except PlanError as exc:
            if exc.reason in WAIT_FOR_CHANGE or exc.reason == "Forbidden":
                raise
            why = f"{exc} [{exc.reason}]"
        except ApiException as exc:
            if exc.status not in (400, 422):
                raise
            why = f"the API server refuses the change: {_reason(exc)}"
        p.event(
            "Warning", "SpecNotApplied", f"run {run} keeps its objects: {why}; the next run gets the new spec"
        )
        return False

    def _facts(self, wl: GPUWorkload, run: int, policy: PolicyView) -> Facts:
        """The facts the run's children are planned with (kgwe.policy.admission), read now."""
        native = self._serves("scheduling.k8s.io", "v1beta1")
        kueue = self._serves(cluster_facts.KUEUE_GROUP)
        classes = ClusterView(priority_classes=cluster_facts.priority_classes(self.api_client))
        return resolve_facts(wl, run, policy, classes, native=native, kueue=kueue)

    def _admit(self, p: _Pass, wl: GPUWorkload, run: int) -> None:
        """Refuse (PlanError) with what `kgwe validate` would also report (kgwe.policy.admission), then
        with the namespace's budget quota as it is now; else create the run's children."""
        policy = self._policy()
        cluster = dataclasses.replace(
            cluster_facts.cluster_view(self.api_client),  # live quota: below, as a state of the moment
            enabled_namespaces=self.grants.enabled(),
            kgwe_namespace=self.policy_namespace,
        )
        refused = refusal(findings(wl, p.namespace, policy, cluster))
        if refused:
            raise PlanError(*refused)
        assert cluster.native_gang is not None and cluster.kueue is not None
        facts = resolve_facts(wl, run, policy, cluster, native=cluster.native_gang, kueue=cluster.kueue)
        refused = quota_admission(cluster_facts.budget_quota(self.api_client, p.namespace), quota_needs(wl))
        if refused:
            raise PlanError(*refused)
        children = self._create(p, wl, run, facts, policy, check_first=True)
        p.new.update(
            run=run,
            retryCount=int(p.new.get("retryCount") or 0),
            runStartTime=st.rfc3339(p.now),
            gangBackend=facts.gang_backend,
            strategy=wl.spec.scheduling_strategy or facts.scoring_profile or "default",
            runtime=facts.runtime_name,
        )
        p.event(
            "Normal",
            "Created",
            f"run {run}: " + ", ".join(f"{c['kind']}/{c['metadata']['name']}" for c in children),
        )
        via = f", runtime {facts.runtime_name}" if facts.runtime_name else ""
        message = f"run {run}: {wl.spec.total_pods} pod(s), gang {facts.gang_backend}{via}"
        if p.condition("Admitted", "True", "Admitted", message):
            p.event("Normal", "Admitted", message)

    def _create(
        self, p: _Pass, wl: GPUWorkload, run: int, facts: Facts, policy: PolicyView, check_first: bool = False
    ) -> list[dict]:
        """Apply the run's children, only in a namespace that opted in and only as the PodTemplatePolicies
        allow (again here: a spec edit reaches the children without admission). `check_first`: the API
        server checks them all (dry run) before any is created, so a template it refuses creates nothing and
        becomes InvalidPodTemplate, once."""
        refused = self.grants.refused(p.namespace)
        if refused:
            raise PlanError("NamespaceNotEnabled", refused)
        said = refusal(
            not_allowed(
                wl,
                p.namespace,
                policy.template_policies,
                facts.runtime_name,
                facts.runtime,
                facts.priority_class,
            )
        )
        if said:
            raise PlanError(*said)
        children = plan_children(wl, p.namespace, p.obj["metadata"]["uid"], facts)
        if check_first:
            for child in children:
                try:
                    self._apply(child, dry_run=True)
                except ApiException as exc:
                    if exc.status not in (400, 422):
                        raise
                    what = f"{child['kind']}/{child['metadata']['name']}"
                    raise PlanError(
                        "InvalidPodTemplate", f"the API server refuses {what}: {_reason(exc)}"
                    ) from None
        for child in children:  # PodGroup and Service before the Jobs that make pods
            self._apply(child)
        return children

    def _observe(self, p: _Pass, wl: GPUWorkload, view: st.RunView, run: int) -> float | None:
        spec, new = wl.spec, p.new
        failed = st.failed_job(view) if spec.is_batch else None
        if failed is not None:
            return self._member_failed(p, wl, failed, run)
        if spec.is_batch and st.all_complete(view, len(spec.effective_roles())):
            if p.condition("Complete", "True", "Completed", f"run {run}: every pod succeeded"):
                p.event("Normal", "Completed", f"run {run}: every pod succeeded")
            p.condition("PodsReady", "False", "Completed", "the pods have finished")
            self._cost(p, wl)
            return None
        prog = st.progress(wl, view)
        new["placements"] = st.placements(view)
        new["nodes"] = ",".join(prog.nodes) or None
        want = 0 if spec.suspend else prog.total
        requeue: float | None = 15.0
        if want and prog.scheduled >= want:
            if p.condition("PodsScheduled", "True", "AllScheduled", f"{want}/{want} pods on {new['nodes']}"):
                p.event("Normal", "Scheduled", f"{want} pod(s) on {new['nodes']}")
                self.metrics.scheduled.labels(new.get("strategy") or "default").inc()
        else:
            run_start = parse_rfc3339(new.get("runStartTime"))
            timed_out = st.gang_timed_out(run_start, spec.gang.timeout_seconds, p.now)
            reason = "GangTimeout" if timed_out else ("Suspended" if spec.suspend else "Pending")
            message = f"{prog.scheduled}/{want} pods scheduled"
            if timed_out:
                message += f"; not all within {spec.gang.timeout_seconds}s (gang {new.get('gangBackend')})"
            if p.condition("PodsScheduled", "False", reason, message) and timed_out:
                p.event("Warning", "GangTimeout", message)
                self.metrics.failed.labels("GangTimeout").inc()
            if run_start and not timed_out:
                left = spec.gang.timeout_seconds - (p.now - run_start).total_seconds()
                requeue = max(1.0, min(requeue or 15.0, left + 1))
        ready = bool(want) and prog.ready >= want
        status, reason = ("True", "AllReady") if ready else ("False", "NotReady")
        p.condition("PodsReady", status, reason, f"{prog.ready}/{want} pods ready")
        self._gpu_health(p, new["placements"], prog.nodes)
        self._cost(p, wl)
        return requeue

    def _gpu_health(self, p: _Pass, placed: list[dict[str, Any]], nodes: list[str]) -> None:
        """Condition GPUsHealthy: False (and a Warning Event) while a pod of the run holds a GPU the agent
        reports unhealthy. The workload keeps running: whether to restart is the owner's decision."""
        if not nodes:
            return
        faults: dict[str, dict[int, str]] = {}
        holders: dict[str, dict[int, str]] = {}
        for name in nodes:
            try:
                meta = self.core.read_node(name).metadata
            except ApiException:
                continue
            annotations = meta.annotations or {}
            faults[name] = unhealthy_gpus(annotations)
            holders[name] = gpu_holders({"metadata": {"annotations": annotations}})
        sick = st.unhealthy_placements(placed, p.namespace, faults, holders)
        if sick:
            message = "; ".join(sick)[:1024]
            if p.condition("GPUsHealthy", "False", "GPUUnhealthy", message):
                p.event("Warning", "GPUUnhealthy", message)
        else:
            p.condition(
                "GPUsHealthy", "True", "AllGPUsHealthy", "no pod holds a GPU the agent reports unhealthy"
            )

    def _member_failed(self, p: _Pass, wl: GPUWorkload, failed: Mapping[str, Any], run: int) -> float | None:
        policy = wl.spec.retry_policy
        retries = int(p.new.get("retryCount") or 0)
        conditions = failed["status"].get("conditions") or []
        why = next((c.get("reason") or "" for c in conditions if c.get("type") == "Failed"), "")
        what = f"Job {failed['metadata']['name']} failed ({why})"
        self._delete_run(p.namespace, wl.name, run)
        if retries >= policy.max_retries:
            message = f"{what}; {retries} of {policy.max_retries} retries used"
            if p.condition("Failed", "True", "BackoffLimitExceeded", message):
                p.event("Warning", "BackoffLimitExceeded", message)
                self.metrics.failed.labels("BackoffLimitExceeded").inc()
            p.condition("PodsReady", "False", "Failed", what)
            self._cost(p, wl)
            return None
        delay = st.backoff_seconds(policy, retries)
        at = p.now + timedelta(seconds=delay)
        p.new.update(retryCount=retries + 1, nextRetryTime=st.rfc3339(at), placements=[], nodes=None)
        message = (
            f"{what}: restarting the whole gang in {delay:.0f}s (retry {retries + 1} of {policy.max_retries})"
        )
        p.condition("PodsScheduled", "False", "Restarting", message)
        p.condition("PodsReady", "False", "Restarting", message)
        p.event("Warning", "GangRestart", message)
        self.metrics.failed.labels("MemberFailed").inc()
        self.metrics.retries.inc()
        return delay

    def _cost(self, p: _Pass, wl: GPUWorkload) -> None:
        if self.cost_of is None:
            return
        try:
            cost = self.cost_of(p.namespace, wl.name, p.obj)
        except Exception:  # cost is informative: never fail a reconcile over it
            log.exception("cost of %s failed", wl.name)
            return
        if cost is not None:
            p.new["cost"] = cost


@dataclass
class _Pass:
    """One reconcile of one workload: the object read, the status being built, the Events to emit."""

    obj: dict
    new: dict
    generation: int
    now: datetime
    events: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.obj["metadata"]["namespace"]

    def condition(self, ctype: str, status: str, reason: str, message: str) -> bool:
        return st.set_condition(
            self.new["conditions"], ctype, status, reason, message, self.generation, self.now
        )

    def event(self, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))


class _NotLeader(Exception):
    pass


def _copy_status(old: dict) -> dict:
    import copy

    new = copy.deepcopy(old)
    new.setdefault("conditions", [])
    return new


def _reason(exc: ApiException) -> str:
    """What the API server refused, from its Status: each cause's field and the end of its message (the
    values in between can be whole objects), bounded."""
    import json

    try:
        status = json.loads(exc.body or "{}")
    except (ValueError, TypeError):
        return str(exc.reason)[:1024]
    causes = (status.get("details") or {}).get("causes") or []
    said = [f"{c.get('field', '')}: {str(c.get('message', '')).rsplit(': ', 1)[-1]}" for c in causes[:5]]
    return ("; ".join(said) or str(status.get("message") or exc.reason))[:1024]


class WorkloadController:
    """Watches GPUWorkloads and their Jobs/Pods/Deployments in every namespace; one worker reconciles."""

    def __init__(
        self,
        reconciler: WorkloadReconciler,
        *,
        resync_seconds: float = 60.0,
        watch_timeout_seconds: int = WATCH_SECONDS,
    ) -> None:
        self.reconciler = reconciler
        self.queue = WorkQueue()
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.reconciles = 0
        self._threads: list[threading.Thread] = []
        self._known: set[str] = set()  # GPUWorkload keys, as the watch last saw them
        self._known_lock = threading.Lock()
        reconciler.grants.on_enabled = self._namespace_enabled

    def _namespace_enabled(self, namespace: str) -> None:
        """A namespace opted in: look again at the workloads waiting there."""
        if not self.reconciler.is_leader():
            return
        with self._known_lock:
            keys = sorted(k for k in self._known if k.startswith(namespace + "/"))
        for key in keys:
            self.queue.add(key)

    def resync(self) -> None:
        """Queue every GPUWorkload the watch knows (on becoming leader, and every resync period): periodic
        work such as gang timeouts and cost comes from these looks, without listing again."""
        with self._known_lock:
            keys = sorted(self._known)
        for key in keys:
            self.queue.add(key)

    def start(self, stop: threading.Event) -> None:
        api = self.reconciler
        sources: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
            (
                GPU_WORKLOAD_PLURAL,
                api.custom.list_cluster_custom_object,
                {"group": API_GROUP, "version": CRD_VERSION, "plural": GPU_WORKLOAD_PLURAL},
            ),
            ("jobs", api.batch.list_job_for_all_namespaces, {"label_selector": WORKLOAD_LABEL}),
            ("pods", api.core.list_pod_for_all_namespaces, {"label_selector": WORKLOAD_LABEL}),
            ("deployments", api.apps.list_deployment_for_all_namespaces, {"label_selector": WORKLOAD_LABEL}),
        ]
        for what, fn, kwargs in sources:
            t = threading.Thread(
                target=self._watch, args=(stop, what, fn, kwargs), name=f"kgwe-watch-{what}", daemon=True
            )
            t.start()
            self._threads.append(t)
        t = threading.Thread(
            target=api.grants.run,
            args=(stop, self.watch_timeout_seconds),
            name="kgwe-watch-namespaces",
            daemon=True,
        )
        t.start()
        self._threads.append(t)
        t = threading.Thread(target=self._work, args=(stop,), name="kgwe-workload-controller", daemon=True)
        t.start()
        self._threads.append(t)

    def _key(self, what: str, obj: dict) -> str | None:
        meta = obj.get("metadata") or {}
        if what == GPU_WORKLOAD_PLURAL:
            return f"{meta.get('namespace')}/{meta.get('name')}"
        name = (meta.get("labels") or {}).get(WORKLOAD_LABEL)
        return f"{meta.get('namespace')}/{name}" if name else None

    def _watch(
        self, stop: threading.Event, what: str, fn: Callable[..., Any], kwargs: dict[str, Any]
    ) -> None:
        """One list+watch loop (kgwe.runtime.watch) per kind: a listing queues every workload it names,
        later events only what changed; re-watches resume from the last resourceVersion."""
        metrics = self.reconciler.metrics

        def listed(items: Sequence[dict]) -> None:
            metrics.watch_events.labels(what, "LISTED").inc(len(items))
            if what == GPU_WORKLOAD_PLURAL:
                with self._known_lock:
                    self._known = {k for k in (self._key(what, obj) for obj in items) if k}
            for obj in items:
                self._enqueue(what, obj)

        def changed(kind: str, obj: dict) -> None:
            metrics.watch_events.labels(what, kind).inc()
            key = self._key(what, obj)
            if what == GPU_WORKLOAD_PLURAL and key:
                with self._known_lock:
                    if kind == "DELETED":
                        self._known.discard(key)
                    else:
                        self._known.add(key)
            self._enqueue(what, obj)

        def restarted(error: BaseException | None) -> None:
            metrics.watch_restarts.labels(what, "expired" if error is None else "failed").inc()

        list_and_watch(
            fn,
            on_list=listed,
            on_event=changed,
            on_restart=restarted,
            stop=stop,
            watch_timeout_seconds=self.watch_timeout_seconds,
            **kwargs,
        )

    def _enqueue(self, what: str, obj: dict) -> None:
        key = self._key(what, obj)
        if key and self.reconciler.is_leader():
            self.queue.add(key)

    def _work(self, stop: threading.Event) -> None:
        last_resync = 0.0
        was_leader = False
        while not stop.is_set():
            leader = self.reconciler.is_leader()
            if leader and not was_leader:
                self.reconciler.grants.resync()
            if leader and (not was_leader or time.monotonic() - last_resync >= self.resync_seconds):
                self.resync()
                last_resync = time.monotonic()
            was_leader = leader
            if leader:
                self.reconciler.grants.sync()  # bindings before the workloads that need them
            key = self.queue.get(timeout=1.0)
            if key is None or not leader:
                continue
            namespace, _, name = key.partition("/")
            try:
                again = self.reconciler.reconcile(namespace, name)
            except ApiException as exc:
                if exc.status == 404:  # deleted while it was reconciled: its watch event comes next
                    again = None
                else:
                    log.warning("reconcile of GPUWorkload %s failed: %s %s", key, exc.status, exc.reason)
                    again = 10.0
            except Exception:
                log.exception("reconcile of GPUWorkload %s failed", key)
                again = 10.0
            self.reconciles += 1
            if again is not None:
                self.queue.add(key, again)
