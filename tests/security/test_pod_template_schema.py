"""A pod template of the wrong shape fails at validation, with file:line, never later in the reconciler.

GPUWorkload.spec.podTemplate reaches the API server through a CRD field that preserves unknown fields, so
the API server takes anything there; before the schema check a template like `affinity: "x"` passed
`kgwe validate` and then raised AttributeError in the reconciler on every pass. Templates are now checked
against the Kubernetes PodTemplateSpec schema (kgwe/policy/pod_template_spec.json)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kgwe.cli import main
from kgwe.policy import load_repository
from kgwe.policy.gpu_workload import GPUWorkload
from kgwe.policy.pod_template import MAX_FINDINGS, schema, template_findings

WORKLOAD = """\
apiVersion: kgwe.nvidia.io/v1
kind: GPUWorkload
metadata: {name: bad, namespace: ml}
spec:
  gpuRequirements: {count: 1}
  podTemplate:
    spec:
      affinity: "x"
      containers:
        - name: main
          image: busybox
"""


def test_affinity_string_is_an_error_at_its_line(tmp_path, capsys):
    path = tmp_path / "wl.yaml"
    path.write_text(WORKLOAD)
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert (
        "wl.yaml:8:7: error: GPUWorkload/bad spec.podTemplate.spec.affinity: expected a map (Affinity)" in out
    )


def test_the_reconcilers_model_refuses_it_with_a_validation_error():
    """What the reconciler runs on every pass: a ValidationError (one InvalidSpec condition), not a crash."""
    with pytest.raises(ValidationError) as err:
        GPUWorkload.model_validate(yaml.safe_load(WORKLOAD))
    assert "spec.affinity" in str(err.value)


@pytest.mark.parametrize(
    ("template", "path", "words"),
    [
        ({"metadata": {"labels": {"app": 1}}}, "spec.podTemplate.metadata.labels.app", "expected a string"),
        ({"spec": {"containers": {"name": "x"}}}, "spec.podTemplate.spec.containers", "expected a list"),
        (
            {"spec": {"containers": [{"name": "x", "image": "i", "ports": [{"containerPort": "80"}]}]}},
            "spec.podTemplate.spec.containers[0].ports[0].containerPort",
            "expected an integer",
        ),
        (
            {
                "spec": {
                    "containers": [{"name": "x", "image": "i", "resources": {"limits": {"memory": "4 GB"}}}]
                }
            },
            "spec.podTemplate.spec.containers[0].resources.limits.memory",
            "is not a quantity",
        ),
        (
            {"spec": {"containers": [{"name": "x", "imag": "i"}]}},
            "spec.podTemplate.spec.containers[0].imag",
            'unknown field "imag" in Container (did you mean "image"?)',
        ),
        (
            {"spec": {"containers": [{"name": "x"}]}},
            "spec.podTemplate.spec.containers[0].image",
            "without an image",
        ),
        (
            {"spec": {"containers": [{"name": "x", "image": "i"}, {"name": "x", "image": "j"}]}},
            "spec.podTemplate.spec.containers[1].name",
            "used twice",
        ),
        (
            {"spec": {"tolerations": [{"tolerationSeconds": "1h"}]}},
            "spec.podTemplate.spec.tolerations[0]",
            "integer",
        ),
        ({"spec": {"hostNetwork": "yes"}}, "spec.podTemplate.spec.hostNetwork", "true or false"),
        (
            {"spec": {"containers": [{"name": "x", "image": "i", "env": [{"value": "v"}]}]}},
            "env[0].name",
            "required",
        ),
    ],
)
def test_wrong_shapes_name_the_field(tmp_path, template, path, words):
    doc = yaml.safe_load(WORKLOAD)
    doc["spec"]["podTemplate"] = template
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(doc))
    ps = load_repository(tmp_path)
    assert any(path in d.path and words in d.message for d in ps.errors), [str(d) for d in ps.errors]


def test_role_templates_and_runtime_templates_are_checked_too(tmp_path):
    doc = yaml.safe_load(WORKLOAD)
    doc["spec"]["podTemplate"] = {}
    doc["spec"]["roles"] = [{"name": "w", "podTemplate": {"spec": {"affinity": ["x"]}}}]
    runtime = (
        "apiVersion: kgwe.nvidia.io/v1\nkind: WorkloadRuntime\nmetadata: {name: rt}\n"
        "spec: {framework: PyTorch, workloadTypes: [Training],\n"
        "  template: {spec: {containers: [{name: t, image: i, args: train.py}]}}}\n"
    )
    (tmp_path / "wl.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "rt.yaml").write_text(runtime)
    ps = load_repository(tmp_path)
    paths = {(d.file, d.path) for d in ps.errors}
    assert ("wl.yaml", "spec.roles[0].podTemplate.spec.affinity") in paths, paths
    assert ("rt.yaml", "spec.template.spec.containers[0].args") in paths, paths
    assert [d.line for d in ps.errors if d.file == "rt.yaml"] == [5]  # the line holding `args`


# Random shapes where a pod template is expected: the real field names (so the walk goes deep) with values
# of every YAML type. Whatever comes, the check returns findings (bounded) and the model a ValidationError.
_FIELDS = sorted({k for s in schema()["schemas"].values() for k in (s.get("properties") or {})})
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(_FIELDS) | st.text(max_size=6), inner, max_size=5),
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(spec=st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=6), meta=_VALUES)
def test_random_templates_never_crash_the_check(spec, meta):
    template = {"metadata": meta, "spec": spec}
    found = template_findings(template)
    assert len(found) <= MAX_FINDINGS
    doc = yaml.safe_load(WORKLOAD)
    doc["spec"]["podTemplate"] = template
    with contextlib.suppress(ValidationError):
        GPUWorkload.model_validate(doc)


def test_shipped_examples_and_runtimes_pass():
    root = Path(__file__).resolve().parents[2]
    for path in [*sorted((root / "docs/examples/gpuworkloads").glob("kgwe-*.yaml")), root / "sample-repo"]:
        ps = load_repository(path)
        assert not [d for d in ps.errors if "Template" in d.path or "template" in d.path], ps.errors
