"""A GPUWorkload's pod template is no way around the namespace's rules: host namespaces and ports, hostPath,
privileged containers, added capabilities, system-* PriorityClasses and other ServiceAccounts are refused
unless a PodTemplatePolicy in the repository allows them — `kgwe validate` says where, with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgwe.policy import load_repository
from kgwe.policy.pod_template_policy import (
    DEFAULT_SPEC,
    PodTemplatePolicySpec,
    pod_template_policies_json,
    policies_from_json,
    template_violations,
)

WORKLOAD = """\
apiVersion: kgwe.nvidia.io/v1
kind: GPUWorkload
metadata: {{name: job, namespace: {namespace}}}
spec:
  gpuRequirements: {{count: 1}}
  podTemplate:
    spec:
{template}
"""


# A repository's policy for every namespace no other policy names, allowing nothing.
NOTHING = "apiVersion: kgwe.nvidia.io/v1\nkind: PodTemplatePolicy\nmetadata: {name: nothing}\nspec: {}\n"


def _validate(tmp_path: Path, template: str, policy: str = NOTHING, namespace: str = "ml-team") -> list[str]:
    """`kgwe validate` of one workload and a policy: its errors as 'line path: message'."""
    (tmp_path / "job.yaml").write_text(WORKLOAD.format(namespace=namespace, template=template))
    if policy:
        (tmp_path / "policy.yaml").write_text(policy)
    return [f"{d.line} {d.path}: {d.message}" for d in load_repository(tmp_path).errors]


CONTAINER = """\
      containers:
        - name: main
          image: busybox
"""


@pytest.mark.parametrize(
    ("template", "line", "path"),
    [
        ("      hostNetwork: true\n" + CONTAINER, 8, "spec.podTemplate.spec.hostNetwork"),
        ("      hostPID: true\n" + CONTAINER, 8, "spec.podTemplate.spec.hostPID"),
        ("      hostIPC: true\n" + CONTAINER, 8, "spec.podTemplate.spec.hostIPC"),
        ("      serviceAccountName: deployer\n" + CONTAINER, 8, "spec.podTemplate.spec.serviceAccountName"),
        ("      serviceAccount: deployer\n" + CONTAINER, 8, "spec.podTemplate.spec.serviceAccount"),
        (
            "      priorityClassName: system-node-critical\n" + CONTAINER,
            8,
            "spec.podTemplate.spec.priorityClassName",
        ),
        (
            CONTAINER + "          securityContext: {privileged: true}\n",
            11,
            "spec.podTemplate.spec.containers[0].securityContext.privileged",
        ),
        (
            CONTAINER + "          securityContext: {capabilities: {add: [NET_RAW, SYS_ADMIN]}}\n",
            11,
            "spec.podTemplate.spec.containers[0].securityContext.capabilities.add[0]",
        ),
        (
            CONTAINER + "          ports: [{containerPort: 80, hostPort: 80}]\n",
            11,
            "spec.podTemplate.spec.containers[0].ports[0].hostPort",
        ),
        (
            "      initContainers:\n"
            "        - {name: init, image: busybox, securityContext: {privileged: true}}\n" + CONTAINER,
            9,
            "spec.podTemplate.spec.initContainers[0].securityContext.privileged",
        ),
        (
            CONTAINER + "      volumes:\n        - {name: root, hostPath: {path: /}}\n",
            12,
            "spec.podTemplate.spec.volumes[0].hostPath.path",
        ),
    ],
)
def test_each_escape_is_refused_at_its_line(tmp_path, template, line, path):
    errors = _validate(tmp_path, template)
    assert any(e.startswith(f"{line} {path}: ") for e in errors), errors
    assert all('PodTemplatePolicy "nothing" does not allow it' in e for e in errors), errors


def test_without_any_policy_in_the_repository_they_are_warnings(tmp_path):
    """A manifest checked apart from the policy repository: the cluster's policy may allow what it asks."""
    template = "      hostNetwork: true\n" + CONTAINER
    (tmp_path / "job.yaml").write_text(WORKLOAD.format(namespace="ml-team", template=template))
    ps = load_repository(tmp_path / "job.yaml")
    assert ps.ok
    assert [(d.line, d.path, d.message) for d in ps.warnings] == [
        (
            8,
            "spec.podTemplate.spec.hostNetwork",
            "the node's network namespace: refused unless a PodTemplatePolicy allows it (spec.hostNetwork) "
            "[TemplateNotAllowed]",
        )
    ]


def test_an_ordinary_template_passes(tmp_path):
    template = CONTAINER + (
        "          securityContext: {runAsNonRoot: true, capabilities: {drop: [ALL]}}\n"
        "          ports: [{containerPort: 8080}]\n"
        "      priorityClassName: high\n"
        "      serviceAccountName: default\n"
        "      volumes: [{name: scratch, emptyDir: {}}]\n"
    )
    assert _validate(tmp_path, template) == []


POLICY = """\
apiVersion: kgwe.nvidia.io/v1
kind: PodTemplatePolicy
metadata: {name: rdma}
spec:
  namespaces: [ml-team]
  capabilities: [IPC_LOCK]
  hostPaths: [{pathPrefix: /mnt/datasets}]
  serviceAccounts: [dataset-reader]
"""


def test_a_policy_allows_what_it_lists_for_its_namespaces_only(tmp_path):
    template = (
        "      serviceAccountName: dataset-reader\n"
        + CONTAINER
        + "          securityContext: {capabilities: {add: [CAP_IPC_LOCK]}}\n"
        "          volumeMounts: [{name: data, mountPath: /data, readOnly: true}]\n"
        "      volumes: [{name: data, hostPath: {path: /mnt/datasets/imagenet}}]\n"
    )
    assert _validate(tmp_path, template, POLICY) == []
    other = _validate(tmp_path, template, POLICY, namespace="other-team")
    assert len(other) == 3, other  # the policy is for ml-team: elsewhere nothing is allowed
    # what the policy does not list stays refused in its own namespace, and the message names it
    errors = _validate(tmp_path, template + "      hostNetwork: true\n", POLICY)
    assert errors == [
        '15 spec.podTemplate.spec.hostNetwork: the node\'s network namespace: PodTemplatePolicy "rdma" does '
        "not allow it (spec.hostNetwork) [TemplateNotAllowed]"
    ]


@pytest.mark.parametrize(
    ("path", "read_only", "refused"),
    [
        ("/mnt/datasets", True, False),
        ("/mnt/datasets/", True, False),
        ("/mnt/datasets/a/b", True, False),
        ("/mnt/datasets-private", True, True),  # a sibling, not below the prefix
        ("/mnt/datasets/../../etc", True, True),  # climbs out
        ("/mnt", True, True),  # above it
        ("mnt/datasets", True, True),  # relative
        ("/mnt/datasets/a", False, True),  # a writable mount of a read-only allowance
    ],
)
def test_host_paths_by_whole_components_and_read_only(path, read_only, refused):
    allow = PodTemplatePolicySpec.model_validate({"hostPaths": [{"pathPrefix": "/mnt/datasets"}]})
    template = {
        "spec": {
            "containers": [
                {"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/d", "readOnly": read_only}]}
            ],
            "volumes": [{"name": "v", "hostPath": {"path": path}}],
        }
    }
    assert bool(template_violations(template, allow)) is refused


def test_roles_priority_and_ephemeral_containers_are_checked_too(tmp_path):
    (tmp_path / "job.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kgwe.nvidia.io/v1",
                "kind": "GPUWorkload",
                "metadata": {"name": "job"},
                "spec": {
                    "gpuRequirements": {"count": 1},
                    "priority": "system-cluster-critical",
                    "roles": [
                        {"name": "launcher", "replicas": 1},
                        {
                            "name": "worker",
                            "replicas": 2,
                            "podTemplate": {
                                "spec": {
                                    "containers": [{"name": "w", "image": "busybox"}],
                                    "ephemeralContainers": [
                                        {
                                            "name": "debug",
                                            "image": "busybox",
                                            "securityContext": {"privileged": True},
                                        }
                                    ],
                                }
                            },
                        },
                    ],
                    "podTemplate": {"spec": {"containers": [{"name": "l", "image": "busybox"}]}},
                },
            },
            sort_keys=False,
        )
    )
    (tmp_path / "policy.yaml").write_text(NOTHING)
    paths = {d.path for d in load_repository(tmp_path).errors}
    assert paths == {
        "spec.priority",
        "spec.roles[1].podTemplate.spec.ephemeralContainers[0].securityContext.privileged",
    }


def test_policies_must_not_overlap(tmp_path):
    (tmp_path / "a.yaml").write_text(POLICY)
    (tmp_path / "b.yaml").write_text(POLICY.replace("name: rdma", "name: rdma-again"))
    (tmp_path / "c.yaml").write_text(NOTHING)
    (tmp_path / "d.yaml").write_text(
        "apiVersion: kgwe.nvidia.io/v1\nkind: PodTemplatePolicy\nmetadata: {name: everyone-too}\nspec: {}\n"
    )
    errors = [(d.file, d.line, d.message) for d in load_repository(tmp_path).errors]
    assert ("b.yaml", 5, 'namespace "ml-team" already has PodTemplatePolicy "rdma" (a.yaml:1)') in errors
    assert any(
        f == "d.yaml" and "a second PodTemplatePolicy for every other namespace" in m for f, _, m in errors
    )
    assert len(errors) == 2


def test_bad_policy_fields_are_errors_with_their_line(tmp_path):
    (tmp_path / "p.yaml").write_text(
        "apiVersion: kgwe.nvidia.io/v1\nkind: PodTemplatePolicy\nmetadata: {name: p}\nspec:\n"
        "  capabilities: [ipc_lock]\n  hostPaths: [{pathPrefix: /data/../etc}]\n  hostNetwork: yes-please\n"
    )
    errors = {(d.line, d.path) for d in load_repository(tmp_path).errors}
    assert errors == {
        (5, "spec.capabilities"),
        (6, "spec.hostPaths[0].pathPrefix"),
        (7, "spec.hostNetwork"),
    }


def test_what_the_controller_reads_is_what_was_rendered():
    policies = policies_from_json(
        pod_template_policies_json(
            [
                *policies_from_json('[{"name": "b", "spec": {"capabilities": ["IPC_LOCK"]}}]'),
                *policies_from_json('[{"name": "a", "spec": {"namespaces": ["x"], "hostIPC": true}}]'),
            ]
        )
    )
    assert [p.name for p in policies] == ["a", "b"]
    assert policies[0].spec.host_ipc and policies[1].spec.capabilities == ["IPC_LOCK"]
    for bad in ('{"name": "a"}', "[1]", '[{"name": "a", "spec": {"privileged": "sure"}}]', "not json"):
        with pytest.raises(ValueError):
            policies_from_json(bad)
    assert PodTemplatePolicySpec() == DEFAULT_SPEC  # nothing allowed without a policy


RDMA_RUNTIME = Path(__file__).parents[1] / "workloads" / "fixtures" / "deepspeed-rdma-runtime.yaml"


def test_a_runtimes_template_is_judged_as_the_pods_get_it(tmp_path):
    """A workload without containers gets its runtime's template: what the runtime adds is judged too, named
    as the runtime's; what the workload lays over it is the workload's own."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "runtime.yaml").write_text(RDMA_RUNTIME.read_text())
    (repo / "policy.yaml").write_text(POLICY)  # IPC_LOCK in ml-team only

    def errors(namespace: str, template: str) -> list[str]:
        doc = yaml.safe_load(WORKLOAD.format(namespace=namespace, template=template))
        doc["spec"] |= {"framework": "DeepSpeed", "workloadType": "DistributedTraining"}
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        ps = load_repository(tmp_path / "job.yaml", policy=load_repository(repo))
        return [f"{d.line} {d.path}: {d.message}" for d in ps.errors]

    node_selector = "      nodeSelector: {pool: rdma}\n"  # laid over the runtime's: nothing to judge
    assert errors("ml-team", node_selector) == []
    assert errors("other-team", node_selector) == [
        "10 spec.podTemplate.spec.containers[0].securityContext.capabilities.add[0]: the capability "
        "IPC_LOCK: refused unless a PodTemplatePolicy allows it (spec.capabilities) (from WorkloadRuntime "
        "deepspeed-rdma) [TemplateNotAllowed]"
    ]
    assert errors("ml-team", "      hostIPC: true\n") == [
        '11 spec.podTemplate.spec.hostIPC: the node\'s IPC namespace: PodTemplatePolicy "rdma" does not '
        "allow it (spec.hostIPC) [TemplateNotAllowed]"
    ]


def test_a_manifest_is_judged_by_the_policy_repository_it_is_checked_against(tmp_path):
    """`kgwe validate --policy DIR FILE`: the repository's PodTemplatePolicies decide (errors), as they decide
    on the cluster; the manifest alone only warns."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "policy.yaml").write_text(POLICY)
    (tmp_path / "job.yaml").write_text(
        WORKLOAD.format(namespace="ml-team", template="      hostPID: true\n" + CONTAINER)
    )
    alone = load_repository(tmp_path / "job.yaml")
    against = load_repository(tmp_path / "job.yaml", policy=load_repository(repo))
    assert alone.ok and [d.path for d in alone.warnings] == ["spec.podTemplate.spec.hostPID"]
    assert [
        (d.path, d.message.endswith('"rdma" does not allow it (spec.hostPID) [TemplateNotAllowed]'))
        for d in against.errors
    ] == [("spec.podTemplate.spec.hostPID", True)]


def test_an_integer_priority_is_judged_by_the_class_it_resolves_to_on_the_cluster():
    from kgwe.policy.admission import ClusterView, PolicyView, findings
    from kgwe.policy.gpu_workload import GPUWorkload

    doc = yaml.safe_load(WORKLOAD.format(namespace="ml-team", template=CONTAINER))
    wl = GPUWorkload.model_validate({**doc, "spec": {**doc["spec"], "priority": 2000000000}})
    policy = PolicyView(template_policies=[])
    classes = {"system-cluster-critical": 2000000000, "high": 1000}

    def refused(cluster: ClusterView) -> list[tuple[str, str]]:
        return [
            (f.reason, ".".join(map(str, f.path)))
            for f in findings(wl, "ml-team", policy, cluster)
            if f.severity == "error"
        ]

    assert refused(ClusterView()) == []  # offline: which class it gets is not known
    assert refused(ClusterView(priority_classes=classes)) == [("TemplateNotAllowed", "spec.priority")]
    classes["system-cluster-critical"] = 2000001000  # now above it: "high" it is
    assert refused(ClusterView(priority_classes=classes)) == []
