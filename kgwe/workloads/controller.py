"""The GPUWorkload reconciler on the controller runtime (kgwe.runtime.loop), inside `kgwe controller`,
acting only while this replica holds the controller's leader Lease: watches of GPUWorkloads and of their
Jobs, Pods and Deployments queue the workload; a refusal that may lift by itself, or a failure, is retried
after the workload's own exponential backoff.

Per workload: validate -> (suspended? nothing new) -> admission (the check `kgwe validate` runs,
kgwe.policy.admission: the namespace opted in, the pod templates as its PodTemplatePolicy allows,
feasible on this cluster's nodes, a gang engine, scoring profile and PriorityClass resolved; then the
namespace's kgwe-budget quota has room) -> create the run's children in order (PodGroup before the pods) ->
read them back into conditions, phase and placements -> restart the whole gang after a member failure, with
backoff. Pure decisions live in kgwe.policy.admission and .workload_resolution and in
kgwe.workloads.plan and .status; this module only reads and writes.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import ValidationError

from kgwe.cluster.events import EventRecorder
from kgwe.extender.k8s import gpu_holders, unhealthy_gpus
from kgwe.observability import tracing
from kgwe.optimizer.admission import REFUSE, REFUSED_REASON
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
from kgwe.policy.cluster_kinds import Condition
from kgwe.policy.diagnostics import format_path, messages_from_validation
from kgwe.policy.gpu_workload import GPUWorkload, GPUWorkloadStatus
from kgwe.policy.kueue_setup import KueueNamespace
from kgwe.policy.workload_resolution import (
    Facts,
    PlanError,
    child_write,
    controlled_by,
    gang_phrase,
    kueue_pod_names,
    podgroup_name,
)
from kgwe.runtime import conditions
from kgwe.runtime.cluster import Cluster, KubeObject
from kgwe.runtime.conditions import ConditionStatus
from kgwe.runtime.errors import is_conflict, is_forbidden, is_invalid, is_not_found
from kgwe.runtime.kinds import DEPLOYMENT, GPU_WORKLOAD, JOB, KUEUE_WORKLOAD, NODE, POD, POD_GROUP, Kind
from kgwe.runtime.kube import as_cluster
from kgwe.runtime.leader import Gate, NotLeader, check
from kgwe.runtime.loop import DONE, RETRY, ControlLoop, Result, Source
from kgwe.runtime.queue import Backoff, WorkQueue
from kgwe.runtime.status import StatusPatcher
from kgwe.timestamps import format_rfc3339, parse_rfc3339
from kgwe.vocab import (
    GPU_WORKLOAD_PLURAL,
    KGWE_NAMESPACE,
    KUEUE_CONFIGMAP,
    KUEUE_GROUP,
    KUEUE_NAMESPACE,
    POD_TEMPLATE_POLICY_CONFIGMAP,
    RUN_LABEL,
    WORKLOAD_LABEL,
)
from kgwe.workloads import cluster_facts
from kgwe.workloads import status as st
from kgwe.workloads.namespaces import NamespaceGrants
from kgwe.workloads.plan import plan_children, requested_gpus

log = logging.getLogger(__name__)

# Refusals that only an edit lifts (the namespace's label, the spec, a PodTemplatePolicy): no retry of
# their own; label and spec edits are watched, and the periodic resync looks again after a policy change.
# Any other refusal (a full quota, no node to fit, a budget's hold) is retried after the workload's backoff.
WAIT_FOR_CHANGE = frozenset({"NamespaceNotEnabled", "TemplateNotAllowed", REFUSED_REASON})
WATCH_SECONDS = 300  # a watch the server ends after this long is resumed from its last resourceVersion
BACKOFF = Backoff(base_seconds=1.0, cap_seconds=30.0)  # after a refusal that may lift, or a failure
OWNED_CONDITIONS = (*st.CONDITION_TYPES, st.GPUS_HEALTHY, st.KUEUE_ADMITTED)


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

    # what the loop's watches hand over (kgwe.runtime.loop.WatchObserver)
    def listed(self, source: str, count: int) -> None:
        self.watch_events.labels(source, "LISTED").inc(count)

    def changed(self, source: str, event: str) -> None:
        self.watch_events.labels(source, event).inc()

    def restarted(self, source: str, error: BaseException | None) -> None:
        self.watch_restarts.labels(source, "expired" if error is None else "failed").inc()


def _utcnow() -> datetime:
    return datetime.now(UTC)


# (workload, now) -> (status.prediction or None, (Hold|Refuse, reason, message) or None to admit)
Advise = Callable[[Mapping[str, Any], datetime], tuple[dict[str, Any] | None, tuple[str, str, str] | None]]


class WorkloadReconciler:
    def __init__(
        self,
        cluster: Cluster | client.ApiClient,
        *,
        recorder: EventRecorder,
        metrics: WorkloadMetrics,
        is_leader: Gate,
        policy_namespace: str = KGWE_NAMESPACE,
        now: Callable[[], datetime] = _utcnow,
        cost_of: Callable[[str, str, KubeObject], dict[str, Any] | None] | None = None,
        advise: Advise | None = None,
        finished: Callable[[Mapping[str, Any], str, datetime], None] | None = None,
        kueue_config: tuple[str, str] = (KUEUE_NAMESPACE, KUEUE_CONFIGMAP),
    ) -> None:
        self.cluster = as_cluster(cluster)  # an ApiClient: its API server
        self.recorder = recorder
        self.metrics = metrics
        self.is_leader = is_leader
        self.policy_namespace = policy_namespace
        self.now = now
        self.cost_of = cost_of  # (namespace, name, workload) -> status.cost; None: not metered
        self.advise = advise  # the optimizer at admission: status.prediction and a budget's hold or refusal
        self.finished = finished  # (workload, Complete|Failed, when): a finished run for the runtime model
        self.kueue_config = kueue_config  # where Kueue's Configuration is (namespace, ConfigMap)
        self.grants = NamespaceGrants(self.cluster, kgwe_namespace=policy_namespace)
        self.status = StatusPatcher(self.cluster, GPU_WORKLOAD, owned=OWNED_CONDITIONS, gate=is_leader)

    # -- cluster facts -------------------------------------------------------------------------------
    def _serves(self, group: str, version: str | None = None) -> bool:
        return self.cluster.serves(group, version)

    def _policy(self) -> PolicyView:
        """The policy rendered from Git, read now. Without the PodTemplatePolicies the controller decides
        nothing: the reconcile fails, and is tried again."""
        policy = cluster_facts.policy_view(self.cluster, self.policy_namespace)
        if policy.template_policies is None:
            raise PermissionError(f"the controller may not read ConfigMap {POD_TEMPLATE_POLICY_CONFIGMAP}")
        return policy

    # -- children --------------------------------------------------------------------------------------
    def _view(self, namespace: str, name: str, uid: str, run: int, batch: bool) -> st.RunView:
        """The run's Jobs or Deployments (only those this workload controls: a label anyone can set) and
        pods."""
        selector = f"{WORKLOAD_LABEL}={name}"
        if batch:
            selector += f",{RUN_LABEL}={run}"
            jobs = self.cluster.list(JOB, namespace, labels=selector)
            jobs = [
                j
                for j in jobs
                if not j["metadata"].get("deletionTimestamp") and controlled_by(j["metadata"], name, uid)
            ]
            pods = self.cluster.list(POD, namespace, labels=selector)
            return st.RunView(jobs=jobs, pods=pods)
        deps = self.cluster.list(DEPLOYMENT, namespace, labels=selector)
        deps = [d for d in deps if controlled_by(d["metadata"], name, uid)]
        pods = self.cluster.list(POD, namespace, labels=selector)
        return st.RunView(deployments=deps, pods=pods)

    def _apply(self, obj: KubeObject, dry_run: bool = False) -> None:
        """Write one child: created only when absent, updated only while this workload controls it (the
        decision: kgwe.policy.workload_resolution.child_write); an object of its name that is someone else's
        is a ChildNameTaken refusal, and is never written."""
        check(self.is_leader)
        meta, owner = obj["metadata"], obj["metadata"]["ownerReferences"][0]
        what = f"{obj['kind']}/{meta['name']}"
        try:
            live = self.cluster.get(Kind.of(obj), meta["name"], meta["namespace"])
            decision = child_write(
                None if live is None else live.get("metadata"), what, owner["name"], owner["uid"]
            )
            if decision.action == "refuse":
                raise PlanError("ChildNameTaken", decision.why)
            if decision.action == "create":
                self.cluster.create(obj, dry_run=dry_run)
            elif obj["kind"] != "Pod":  # the object judged, not one that replaced it meanwhile
                body = {**obj, "metadata": {**meta, "resourceVersion": decision.resource_version}}
                self.cluster.apply(body, dry_run=dry_run)
            # A Kueue run's pod is created once and never applied over: what Kueue's webhook added at its
            # creation (the scheduling gate) would be this field manager's, and an apply without it would
            # lift the gate before Kueue admits the group.
        except ApiException as exc:
            if is_conflict(exc):  # made or replaced by someone else since it was read: judged again later
                raise PlanError(
                    "ChildNameTaken", f"{what} changed while KGWE wrote it; looking again"
                ) from None
            if not is_forbidden(exc):
                raise
            # e.g. the namespace's RoleBinding not granted yet, or removed with the opt-in label
            raise PlanError(
                "Forbidden",
                f"the controller may not write {obj['kind']} {meta['name']} in {meta['namespace']}",
            ) from None

    def _delete_run(self, namespace: str, name: str, uid: str, run: int, kueue: bool = False) -> None:
        """Delete the run's Jobs and PodGroup, those this workload controls only; their pods go with them
        (background cascade). Each delete is conditional on the uid read, so an object that replaced one
        meanwhile is never deleted. Through Kueue: the pods KGWE made, and their Kueue Workload (Kueue then
        stops the group)."""
        check(self.is_leader)
        selector = f"{WORKLOAD_LABEL}={name},{RUN_LABEL}={run}"
        kinds = [JOB, POD_GROUP] if self._serves(POD_GROUP.group, POD_GROUP.version) else [JOB]
        doomed = [(kind, c) for kind in kinds for c in self.cluster.list(kind, namespace, labels=selector)]
        if kueue:
            pods = self.cluster.list(POD, namespace, labels=selector)
            self._delete_kueue_workload(namespace, podgroup_name(name, run), pods, name, uid)
            doomed += [(POD, p) for p in pods]
        for kind, child in doomed:
            meta = child["metadata"]
            if controlled_by(meta, name, uid):
                self._delete(kind, meta["name"], namespace, meta["uid"])

    def _delete(self, kind: Kind, name: str, namespace: str, uid: str) -> None:
        """Delete one object, that one only (its uid): gone already, or another of its name by now, is
        fine."""
        try:
            self.cluster.delete(kind, name, namespace, uid=uid)
        except ApiException as exc:
            if not is_conflict(exc):
                raise

    def _delete_kueue_workload(
        self, namespace: str, group: str, pods: list[KubeObject], name: str, uid: str
    ) -> None:
        """A Kueue run's Workload, deleted before its pods (Kueue then stops the group), when it is the group
        of `pods` this workload controls (Kueue makes the pods its owners)."""
        if not self._serves(KUEUE_GROUP):
            return
        workload = cluster_facts.kueue_workload(self.cluster, namespace, group)
        if workload is None:
            return
        ours = {p["metadata"]["uid"] for p in pods if controlled_by(p["metadata"], name, uid)}
        if {r.get("uid") for r in workload["metadata"].get("ownerReferences") or []} & ours:
            self._delete(KUEUE_WORKLOAD, group, namespace, workload["metadata"]["uid"])

    # -- one reconcile ---------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> Result:
        """One look at the workload; when to look again (kgwe.runtime.loop.Result)."""
        start = time.monotonic()
        try:
            return self._reconcile(namespace, name)
        except NotLeader:
            return DONE
        finally:
            self.metrics.duration.observe(time.monotonic() - start)

    def _reconcile(self, namespace: str, name: str) -> Result:
        if not self.grants.listed.is_set():
            return Result(after_seconds=1.0)  # which namespaces opted in is not known yet: decide nothing
        obj = self.cluster.get(GPU_WORKLOAD, name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return DONE
        old = copy.deepcopy(obj.get("status") or {})
        p = _Pass(obj, old, int(obj["metadata"].get("generation") or 0), self.now())
        p.conditions = conditions.parse(old.get("conditions"))
        try:
            wl = GPUWorkload.model_validate(obj)
        except ValidationError as exc:  # said once in a condition; the next edit of the spec brings it back
            loc, message = messages_from_validation(GPUWorkload, exc)[0]
            self._refuse(p, "InvalidSpec", f"{format_path(loc)}: {message}")
            self._finish(p)
            return DONE
        try:
            requeue = self._drive(p, wl)
        except PlanError as exc:
            self._refuse(p, exc.reason, str(exc))
            self._finish(p)
            return DONE if exc.reason in WAIT_FOR_CHANGE else RETRY
        self._finish(p)
        return Result(after_seconds=requeue)

    def _refuse(self, p: _Pass, reason: str, message: str) -> None:
        if p.condition("Admitted", "False", reason, message):
            p.event("Warning", reason, message)
            self.metrics.failed.labels(reason).inc()

    def _finish(self, p: _Pass) -> None:
        self.status.write(p.obj, p.status())  # only when it changed
        for event_type, reason, message in p.events:
            self.recorder.record(p.obj, event_type, reason, message)

    def _drive(self, p: _Pass, wl: GPUWorkload) -> float | None:
        spec, new = wl.spec, p.new
        if conditions.is_true(p.conditions, "Complete") or conditions.is_true(p.conditions, "Failed"):
            self._cost(p, wl)
            return None
        run = int(new.get("run") or 0)
        next_retry = parse_rfc3339(new.get("nextRetryTime"))
        if next_retry is not None:
            if p.now < next_retry:
                return (next_retry - p.now).total_seconds()
            run += 1
            new.update(run=run, nextRetryTime=None, runStartTime=None)
        view = self._view(p.namespace, wl.name, p.uid, run, spec.is_batch)
        kueue = new.get("gangBackend") == "Kueue"
        exists = bool(view.jobs or view.deployments or (kueue and st.live_pods(view)))
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
            view = self._view(p.namespace, wl.name, p.uid, run, spec.is_batch)
        elif int(new.get("observedGeneration") or 0) != p.generation or not conditions.is_true(
            p.conditions, "Admitted"
        ):
            # a spec edit (e.g. suspend) reaches the children; one refused before is tried again
            applied = self._reapply(p, wl, run)
            message = f"run {run}: {spec.total_pods} pod(s), {st.gang_words(new, spec)}"
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
            facts = self._facts(wl, run, policy, p.namespace)
            self._create(p, wl, run, facts, policy)
            if facts.gang_backend == "Kueue" and wl.spec.suspend:  # pods cannot be suspended: they go
                self._delete_run(p.namespace, wl.name, p.uid, run, kueue=True)
            return True
        except PlanError as exc:
            if exc.reason in WAIT_FOR_CHANGE or exc.reason in ("Forbidden", "ChildNameTaken"):
                raise
            why = f"{exc} [{exc.reason}]"
        except ApiException as exc:
            if not is_invalid(exc):
                raise
            why = f"the API server refuses the change: {_reason(exc)}"
        p.event(
            "Warning", "SpecNotApplied", f"run {run} keeps its objects: {why}; the next run gets the new spec"
        )
        return False

    def _facts(self, wl: GPUWorkload, run: int, policy: PolicyView, namespace: str) -> Facts:
        """The facts the run's children are planned with (kgwe.policy.admission), read now."""
        native = self._serves(POD_GROUP.group, POD_GROUP.version)
        kueue = self._serves(KUEUE_GROUP)
        classes = ClusterView(priority_classes=cluster_facts.priority_classes(self.cluster))
        here = self._kueue_here(namespace) if kueue else None
        return resolve_facts(wl, run, policy, classes, native=native, kueue=kueue, here=here)

    def _kueue_here(self, namespace: str) -> KueueNamespace:
        setup = cluster_facts.kueue_setup(self.cluster, self.kueue_config)
        return cluster_facts.kueue_namespace(self.cluster, namespace, setup)

    def _admit(self, p: _Pass, wl: GPUWorkload, run: int) -> None:
        """Refuse (PlanError) with what `kgwe validate` would also report (kgwe.policy.admission), then
        with the namespace's budget quota as it is now; else create the run's children."""
        policy = self._policy()
        cluster = cluster_facts.cluster_view(self.cluster)
        here = self._kueue_here(p.namespace) if cluster.kueue else None
        quota = cluster_facts.budget_quota(self.cluster, p.namespace)  # below, as a state of the moment
        cluster = dataclasses.replace(
            cluster,
            enabled_namespaces=self.grants.enabled(),
            kgwe_namespace=self.policy_namespace,
            kueue_namespaces={p.namespace: here} if here is not None else None,
            quotas={p.namespace: quota} if quota else {},
        )
        refused = refusal(findings(wl, p.namespace, policy, cluster))
        if refused:
            raise PlanError(*refused)
        assert cluster.native_gang is not None and cluster.kueue is not None
        facts = resolve_facts(
            wl, run, policy, cluster, native=cluster.native_gang, kueue=cluster.kueue, here=here
        )
        refused = quota_admission(quota, quota_needs(wl))
        if refused:
            raise PlanError(*refused)
        self._predict(p)
        children = self._create(p, wl, run, facts, policy, check_first=True)
        p.new.update(
            run=run,
            retryCount=int(p.new.get("retryCount") or 0),
            runStartTime=format_rfc3339(p.now),
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
        gang = gang_phrase(facts.gang_backend, wl.spec.total_pods, wl.spec.is_batch)
        message = f"run {run}: {wl.spec.total_pods} pod(s), {gang}{via}"
        if p.condition("Admitted", "True", "Admitted", message):
            p.event("Normal", "Admitted", message)

    def _predict(self, p: _Pass) -> None:
        """status.prediction from the optimizer (kgwe.optimizer.admission); a GPUBudget whose
        predictedCostAdmission holds or refuses a workload over what remains stops admission here (Refuse
        also fails it: only an edit or a new object tries again)."""
        if self.advise is None:
            return
        prediction, decision = self.advise(p.obj, p.now)
        if prediction is not None:
            p.new["prediction"] = prediction
        if decision is None:
            return
        action, reason, message = decision
        if action == REFUSE:
            p.condition("Failed", "True", reason, message)
        raise PlanError(reason, message)

    def _finished(self, p: _Pass, outcome: str) -> None:
        """The run just ended (Complete or Failed): the optimizer learns its duration."""
        if self.finished is not None:
            self.finished(
                {**p.obj, "status": {**p.new, "conditions": conditions.dump(p.conditions)}}, outcome, p.now
            )

    def _create(
        self, p: _Pass, wl: GPUWorkload, run: int, facts: Facts, policy: PolicyView, check_first: bool = False
    ) -> list[KubeObject]:
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
                    if not is_invalid(exc):
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
        kueue = new.get("gangBackend") == "Kueue"
        failed = st.member_failure(view, kueue) if spec.is_batch else None
        if failed is not None:
            return self._member_failed(p, wl, failed, run, kueue)
        if spec.is_batch and st.run_complete(view, wl, kueue):
            if p.condition("Complete", "True", "Completed", f"run {run}: every pod succeeded"):
                p.event("Normal", "Completed", f"run {run}: every pod succeeded")
                self._finished(p, "Complete")
            p.condition("PodsReady", "False", "Completed", "the pods have finished")
            self._cost(p, wl)
            return None
        queued = self._kueue_observe(p, wl, view, run) if kueue and not spec.suspend else None
        prog = st.progress(wl, view)
        new["placements"] = st.placements(view)
        new["nodes"] = ",".join(prog.nodes) or None
        want = 0 if spec.suspend else prog.total
        requeue: float | None = 15.0
        if want and prog.scheduled >= want:
            if p.condition("PodsScheduled", "True", "AllScheduled", f"{want}/{want} pods on {new['nodes']}"):
                p.event("Normal", "Scheduled", f"{want} pod(s) on {new['nodes']}")
                self.metrics.scheduled.labels(new.get("strategy") or "default").inc()
        elif queued is not None:  # Kueue holds the pods: queueing time is not the gang's to time out
            p.condition(
                "PodsScheduled", "False", "Queued", f"{prog.scheduled}/{want} pods scheduled; {queued}"
            )
        else:
            run_start = parse_rfc3339(new.get("runStartTime"))
            timed_out = st.gang_timed_out(run_start, spec.gang.timeout_seconds, p.now)
            reason = "GangTimeout" if timed_out else ("Suspended" if spec.suspend else "Pending")
            message = f"{prog.scheduled}/{want} pods scheduled"
            if timed_out:
                message += f"; not all within {spec.gang.timeout_seconds}s ({st.gang_words(new, spec)})"
            if p.condition("PodsScheduled", "False", reason, message) and timed_out:
                p.event("Warning", "GangTimeout", message)
                self.metrics.failed.labels("GangTimeout").inc()
            if run_start and not timed_out:
                left = spec.gang.timeout_seconds - (p.now - run_start).total_seconds()
                requeue = max(1.0, min(requeue or 15.0, left + 1))
        ready = bool(want) and prog.ready >= want
        status: ConditionStatus = "True" if ready else "False"
        reason = "AllReady" if ready else "NotReady"
        p.condition("PodsReady", status, reason, f"{prog.ready}/{want} pods ready")
        self._gpu_health(p, new["placements"], prog.nodes)
        self._cost(p, wl)
        return requeue

    def _kueue_observe(self, p: _Pass, wl: GPUWorkload, view: st.RunView, run: int) -> str | None:
        """Through Kueue: replace the pods it preempted (it deletes them and leaves that to their maker), and
        say what Kueue says of the run's Workload (condition KueueAdmitted). Returns Kueue's message while
        it holds the pods, None once it admitted them."""
        disrupted, missing = st.kueue_replacements(view, kueue_pod_names(wl, run))
        for name in disrupted:
            check(self.is_leader)
            self.cluster.delete(POD, name, p.namespace)  # (False: gone already)
        if missing and not disrupted:
            policy = self._policy()
            self._create(p, wl, run, self._facts(wl, run, policy, p.namespace), policy)
        group = podgroup_name(wl.name, run)
        workload = cluster_facts.kueue_workload(self.cluster, p.namespace, group)
        status, reason, message = st.kueue_admission(workload, group, wl.spec.total_pods)
        held = conditions.find(p.conditions, st.KUEUE_ADMITTED)  # (set in place below: its values, now)
        before = None if held is None else (held.status, held.reason)
        p.condition(st.KUEUE_ADMITTED, status, reason, message)
        if before != (status, reason):  # an Event per change of state
            p.event("Normal" if status == "True" else "Warning", f"Kueue{reason}", message)
            if status == "True" and reason == "Admitted":  # the gang's time to be placed starts now
                p.new["runStartTime"] = format_rfc3339(p.now)
        return None if status == "True" else message

    def _gpu_health(self, p: _Pass, placed: list[dict[str, Any]], nodes: list[str]) -> None:
        """Each placement's GPUs as the node agent read them from the kubelet, and condition GPUsHealthy:
        False (and a Warning Event) while a pod of the run holds a GPU the agent reports unhealthy. The
        workload keeps running: whether to restart is the owner's decision."""
        if not nodes:
            return
        faults: dict[str, dict[int, str]] = {}
        holders: dict[str, dict[int, str]] = {}
        for name in nodes:
            try:
                node = self.cluster.get(NODE, name)
            except ApiException:
                continue
            annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
            faults[name] = unhealthy_gpus(annotations)
            holders[name] = gpu_holders({"metadata": {"annotations": annotations}})
        placed = p.new["placements"] = st.with_held_gpus(placed, p.namespace, holders)
        sick = st.unhealthy_placements(placed, faults)
        if sick:
            message = "; ".join(sick)[:1024]
            if p.condition(st.GPUS_HEALTHY, "False", "GPUUnhealthy", message):
                p.event("Warning", "GPUUnhealthy", message)
        else:
            p.condition(
                st.GPUS_HEALTHY, "True", "AllGPUsHealthy", "no pod holds a GPU the agent reports unhealthy"
            )

    def _member_failed(self, p: _Pass, wl: GPUWorkload, what: str, run: int, kueue: bool) -> float | None:
        policy = wl.spec.retry_policy
        retries = int(p.new.get("retryCount") or 0)
        self._delete_run(p.namespace, wl.name, p.uid, run, kueue)
        if retries >= policy.max_retries:
            message = f"{what}; {retries} of {policy.max_retries} retries used"
            if p.condition("Failed", "True", "BackoffLimitExceeded", message):
                p.event("Warning", "BackoffLimitExceeded", message)
                self.metrics.failed.labels("BackoffLimitExceeded").inc()
                self._finished(p, "Failed")
            p.condition("PodsReady", "False", "Failed", what)
            self._cost(p, wl)
            return None
        delay = st.backoff_seconds(policy, retries)
        at = p.now + timedelta(seconds=delay)
        p.new.update(retryCount=retries + 1, nextRetryTime=format_rfc3339(at), placements=[], nodes=None)
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
    """One reconcile of one workload: the object read, the status being built (its conditions as the
    model), the Events to emit."""

    obj: KubeObject
    new: dict[str, Any]  # the status being built, as the API holds it (its conditions apart)
    generation: int
    now: datetime
    events: list[tuple[str, str, str]] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"]["uid"])

    def condition(self, ctype: str, status: ConditionStatus, reason: str, message: str) -> bool:
        return conditions.set_condition(
            self.conditions, ctype, status, reason, message, generation=self.generation, now=self.now
        )

    def status(self) -> GPUWorkloadStatus:
        """The status this pass leads to, through the model (None values: absent)."""
        self.new["conditions"] = conditions.dump(self.conditions)
        self.new["phase"] = st.derive_phase(self.conditions)
        self.new["observedGeneration"] = self.generation
        return GPUWorkloadStatus.model_validate(self.new)

    def event(self, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))


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
    """GPUWorkloads and their Jobs/Pods/Deployments in every namespace, watched; one worker reconciles."""

    def __init__(
        self,
        reconciler: WorkloadReconciler,
        *,
        resync_seconds: float = 60.0,
        watch_timeout_seconds: int = WATCH_SECONDS,
    ) -> None:
        self.reconciler = reconciler
        self.watch_timeout_seconds = watch_timeout_seconds
        children = [
            Source(plural, kind, key=_workload_of, labels=WORKLOAD_LABEL)
            for plural, kind in (("jobs", JOB), ("pods", POD), ("deployments", DEPLOYMENT))
        ]
        self.loop = ControlLoop(
            GPU_WORKLOAD_PLURAL,
            reconciler.cluster,
            self._reconcile,
            [Source(GPU_WORKLOAD_PLURAL, GPU_WORKLOAD, key=_key), *children],
            gate=reconciler.is_leader,
            queue=WorkQueue(backoff=BACKOFF),
            resync_seconds=resync_seconds,
            observer=reconciler.metrics,
            on_leading=reconciler.grants.resync,  # every binding checked again
            on_tick=reconciler.grants.sync,  # bindings before the workloads that need them
            watch_timeout_seconds=watch_timeout_seconds,
        )
        reconciler.grants.on_enabled = self._namespace_enabled

    @property
    def queue(self) -> WorkQueue:
        return self.loop.queue

    @property
    def reconciles(self) -> int:
        return self.loop.reconciles

    @property
    def resync_seconds(self) -> float | None:
        """How often every workload is looked at again (gang timeouts, cost), from the watch's keys."""
        return self.loop.resync_seconds

    @resync_seconds.setter
    def resync_seconds(self, seconds: float | None) -> None:
        self.loop.resync_seconds = seconds

    def _namespace_enabled(self, namespace: str) -> None:
        """A namespace opted in: look again at the workloads waiting there."""
        for key in self.loop.known():
            if key.startswith(namespace + "/"):
                self.loop.add(key)

    def resync(self) -> None:
        """Queue every GPUWorkload the watch knows (on becoming leader, every resync period, and when the
        prices in force change): periodic work such as gang timeouts and cost comes from these looks."""
        self.loop.resync()

    def start(self, stop: threading.Event) -> None:
        grants = threading.Thread(
            target=self.reconciler.grants.run,
            args=(stop, self.watch_timeout_seconds),
            name="kgwe-watch-namespaces",
            daemon=True,
        )
        grants.start()
        self.loop.start(stop)

    def _reconcile(self, key: str) -> Result:
        namespace, _, name = key.partition("/")
        try:
            return self.reconciler.reconcile(namespace, name)
        except ApiException as exc:
            if is_not_found(exc):  # deleted while it was reconciled: its watch event comes next
                return DONE
            log.warning("reconcile of GPUWorkload %s failed: %s %s", key, exc.status, exc.reason)
            return RETRY


def _key(obj: KubeObject) -> str | None:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("name") else None


def _workload_of(obj: KubeObject) -> str | None:
    """The key of the workload a child (Job, Pod, Deployment) belongs to, by its label."""
    meta = obj.get("metadata") or {}
    name = (meta.get("labels") or {}).get(WORKLOAD_LABEL)
    return f"{meta.get('namespace')}/{name}" if name else None
