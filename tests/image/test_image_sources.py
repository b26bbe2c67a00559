"""The two image routes share one install script and one config; deploy/ names the versioned image; the
dependency lock pins every runtime dependency. Static checks: no image build needed."""

from __future__ import annotations

import re
import shlex
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from tests.harness.image import REPO_ROOT

IMAGE_NAME = "ghcr.io/kgwe/kgwe"


def project() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def containerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = (REPO_ROOT / "Containerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (parts[0].upper(), parts[1] if len(parts) > 1 else "")
        for parts in (line.strip().split(None, 1) for line in joined.splitlines() if line.strip())
    ]


def containerfile_config() -> dict:
    """The image config the Containerfile sets, in the shape of an OCI config (ARG defaults substituted)."""
    args: dict[str, str] = {}
    env: list[str] = []
    labels: dict[str, str] = {}
    config: dict = {}
    for instruction, rest in containerfile():
        if instruction == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
        elif instruction == "ENV":
            env.append(rest)
        elif instruction == "USER":
            config["User"] = rest
        elif instruction in ("ENTRYPOINT", "CMD"):
            config[instruction.title()] = yaml.safe_load(rest)
        elif instruction == "LABEL":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                labels[key] = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)
    return {**config, "Env": env, "Labels": labels, "Args": args}


def build_script_inputs() -> list[str]:
    text = (REPO_ROOT / "hack" / "image" / "build.sh").read_text()
    match = re.search(r"^inputs=\((.*)\)$", text, re.M)
    assert match, "build.sh lists its inputs in inputs=(...)"
    return match.group(1).split()


def test_containerfile_runs_the_shared_install_script_on_the_same_debian_in_the_same_layers():
    steps = containerfile()
    build = (REPO_ROOT / "hack" / "image" / "build.sh").read_text()
    suite = re.search(r"^suite=(\w+)$", build, re.M)
    assert suite and steps[0] == ("FROM", f"debian:{suite.group(1)}-slim AS runtime")  # the same Debian
    runs = [rest for instruction, rest in steps if instruction == "RUN"]
    runtime = "sh /usr/src/kgwe/hack/image/install.sh /usr/src/kgwe runtime"
    kgwe = "sh /usr/src/kgwe-image/install.sh /usr/src/kgwe-wheels kgwe"
    wheel = "sh /usr/src/kgwe/hack/image/wheel.sh /usr/src/kgwe /wheels"
    assert runs[0] == f"--mount=type=bind,source=hack/image,target=/usr/src/kgwe/hack/image {runtime}"
    assert runs[-1].endswith(kgwe) and "from=wheel,source=/wheels" in runs[-1]
    assert any(r.endswith(wheel) for r in runs)
    # the same script and steps in build.sh, the sources at the same places
    assert "sh /usr/src/kgwe/hack/image/install.sh /usr/src/kgwe runtime" in build
    assert "sh /usr/src/kgwe-image/install.sh /usr/src/kgwe-wheels kgwe" in build
    assert "hack/image/wheel.sh" in build
    final = [rest for instruction, rest in steps if instruction == "FROM"][-1]
    assert final == "runtime"  # KGWE's layer on top of the cached runtime layers


def test_both_routes_see_the_same_build_context():
    ignore = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    allowed = sorted(line[1:] for line in ignore if line.startswith("!"))
    assert allowed == sorted(build_script_inputs())


def test_the_build_context_holds_the_wheel_build_hooks():
    """The wheel is built inside the context; a hook pyproject names but the context lacks fails the build."""
    hooks = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["hooks"]
    inputs = build_script_inputs()
    for hook in hooks.values():
        path = hook.get("path", "hatch_build.py")
        assert any(path == i or path.startswith(i.rstrip("/") + "/") for i in inputs), path


def test_containerfile_version_is_the_project_version():
    assert containerfile_config()["Args"]["VERSION"] == project()["version"]


def test_deploy_refers_to_the_versioned_image():
    refs = []
    for path in sorted((REPO_ROOT / "deploy").rglob("*.yaml")):
        if "helm" in path.relative_to(REPO_ROOT / "deploy").parts:
            continue  # the chart's templates (deploy/ holds their rendering, checked here)
        for doc in yaml.safe_load_all(path.read_text()):
            refs += [(path.name, ref) for ref in re.findall(rf"{re.escape(IMAGE_NAME)}[^\s'\"]*", str(doc))]
    assert refs, "deploy/ runs the KGWE image"
    assert {ref for _, ref in refs} == {f"{IMAGE_NAME}:{project()['version']}"}, refs


def test_the_lock_pins_every_runtime_dependency_with_hashes():
    text = (REPO_ROOT / "hack" / "image" / "requirements.lock").read_text()
    pinned = r"^([A-Za-z0-9_.-]+)==(\S+) \\\n(?:\s+--hash=sha256:[0-9a-f]{64}.*\n?)+"
    pins = {m.group(1).lower(): Version(m.group(2)) for m in re.finditer(pinned, text, re.M)}
    assert pins and "--index-url" not in text and "--find-links" not in text
    for dependency in project()["dependencies"]:
        req = Requirement(dependency)
        name = req.name.lower()
        assert name in pins, f"{name} is not pinned: run `make image-lock`"
        assert pins[name] in req.specifier, f"{name}=={pins[name]} outside {req.specifier}: make image-lock"
        for extra in req.extras:  # psycopg[binary] -> psycopg-binary
            assert f"{name}-{extra}" in pins, f"{name}[{extra}] is not pinned: run `make image-lock`"
    dev = {Requirement(d).name.lower() for d in project()["optional-dependencies"]["dev"]}
    assert not dev & pins.keys(), "dev extras never go into the image"
