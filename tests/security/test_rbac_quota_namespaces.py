"""ResourceQuotas only where a GPUBudget may put them: never in kube-* namespaces or KGWE's own. A budget
claiming one is a policy error with file:line (kgwe validate), and rendering refuses it too."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgwe.errors import KgweError
from kgwe.policy import load_repository
from kgwe.render.render import RenderOptions, render
from kgwe.resources import sample_repo_dir

BUDGET = """\
apiVersion: kgwe.nvidia.io/v1
kind: GPUBudget
metadata: {{name: sneaky}}
spec:
  team: sneaky
  namespaces: [ok-ns, {ns}]
  period: Monthly
  limit: {{amount: "100", currency: USD}}
  quota: {{nvidia.com/gpu: 1}}
"""


@pytest.mark.parametrize("ns", ["kube-system", "kube-public", "kgwe-system"])
def test_a_budget_may_not_claim_a_protected_namespace(tmp_path: Path, ns: str) -> None:
    repo = tmp_path / "repo"
    (repo / "budgets").mkdir(parents=True)
    (repo / "budgets" / "sneaky.yaml").write_text(BUDGET.format(ns=ns))
    ps = load_repository(repo)
    errors = [d for d in ps.errors if "writes no quota there" in d.message]
    assert len(errors) == 1
    assert errors[0].file.endswith("sneaky.yaml") and errors[0].line == 6
    assert errors[0].path.endswith("spec.namespaces[1]") or "namespaces" in str(errors[0].path)


def test_rendering_refuses_kgwe_own_namespace_even_when_renamed() -> None:
    ps = load_repository(sample_repo_dir())
    claimed = ps.budgets[0].spec.namespaces[0]
    with pytest.raises(KgweError, match="KGWE's own"):
        render(ps, options=RenderOptions(namespace=claimed))
