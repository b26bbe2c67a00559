"""Load a policy repository: walk it, parse every YAML document, validate each object against its kind,
run the cross-object checks, and report every problem of the repository in one go.

Nothing here raises for bad input; problems become Diagnostics. `PolicySet.raise_for_errors()` turns them
into one KgweError for callers that only want valid policy.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from kgwe.errors import KgweError
from kgwe.policy.admission import ClusterView, PolicyView
from kgwe.policy.checks import run_checks
from kgwe.policy.diagnostics import did_you_mean, messages_from_validation
from kgwe.policy.models import KINDS
from kgwe.policy.policy_set import LoadedObject as LoadedObject
from kgwe.policy.policy_set import PolicySet as PolicySet
from kgwe.policy.yaml_source import (
    MAX_TEXT_BYTES,
    YamlDocument,
    YamlSyntaxError,
    parse_documents,
)
from kgwe.vocab import API_GROUP, API_VERSION, DEFAULT_REPORTS_PATH, SEED_WORKLOAD_API_VERSIONS

MAX_FILE_BYTES = MAX_TEXT_BYTES  # one policy file
MAX_FILES = 5_000  # YAML files read from one repository
MAX_REPOSITORY_BYTES = 64 * 1024 * 1024  # YAML read from one repository
YAML_SUFFIXES = (".yaml", ".yml")
SKIPPED_DIRS = frozenset({DEFAULT_REPORTS_PATH})


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _yaml_files(root: Path, ps: PolicySet) -> Iterator[Path]:
    """YAML files under root in a stable order; dotfiles, reports/ and in-repo symlinks skipped;
    symlinks leaving the repository reported."""
    real_root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        keep = []
        for d in sorted(dirnames):
            full = here / d
            if d.startswith(".") or d in SKIPPED_DIRS:
                continue
            if full.is_symlink():
                if not _inside(full.resolve(), real_root):
                    rel = full.relative_to(root).as_posix()
                    ps.add(
                        "error", rel, 1, 1, "", f"symlink leaves the repository (points to {full.resolve()})"
                    )
                continue
            keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            if f.startswith(".") or not f.endswith(YAML_SUFFIXES):
                continue
            full = here / f
            if full.is_symlink():
                if not _inside(full.resolve(), real_root):
                    rel = full.relative_to(root).as_posix()
                    ps.add(
                        "error", rel, 1, 1, "", f"symlink leaves the repository (points to {full.resolve()})"
                    )
                continue
            yield full


def _read_bytes(path: Path, rel: str, ps: PolicySet) -> bytes | None:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            ps.add("error", rel, 1, 1, "", f"file is {size} bytes; policy files may be at most 1 MiB")
            return None
        if ps.bytes_read + size > MAX_REPOSITORY_BYTES:
            ps.add(
                "error", rel, 1, 1, "", f"the repository holds more than {MAX_REPOSITORY_BYTES} bytes of YAML"
            )
            return None
        ps.bytes_read += size
        with path.open("rb") as fh:
            return fh.read(MAX_FILE_BYTES + 1)  # a file grown since stat is refused by the YAML bound
    except OSError as exc:
        ps.add("error", rel, 1, 1, "", f"cannot read file: {exc.strerror or exc}")
        return None


def _load_document(doc: YamlDocument, rel: str, ps: PolicySet) -> None:
    data = doc.data
    if data is None:
        return
    if not isinstance(data, dict):
        ps.add(
            "error",
            rel,
            doc.line,
            doc.column,
            "",
            f"expected a KGWE object (a map), got {type(data).__name__}",
        )
        return
    for dup_path, line, column in doc.duplicate_keys:
        ps.add("error", rel, line, column, dup_path, "key appears twice in the same map")
    api_version, kind = data.get("apiVersion"), data.get("kind")
    meta = data.get("metadata")
    name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
    if not isinstance(api_version, str) or not api_version:
        line, column = doc.where(("apiVersion",))
        ps.add(
            "error", rel, line, column, "apiVersion", f'missing apiVersion (KGWE objects use "{API_VERSION}")'
        )
        return
    if api_version != API_VERSION:
        line, column = doc.where(("apiVersion",))
        if api_version.startswith(API_GROUP + "/"):
            msg = f'unsupported version "{api_version}"; this KGWE reads "{API_VERSION}"'
        elif api_version in SEED_WORKLOAD_API_VERSIONS and kind == "GPUWorkload":
            seed = SEED_WORKLOAD_API_VERSIONS[api_version]
            msg = (
                f'"{api_version}" is {seed}\'s GPUWorkload, not KGWE\'s ("{API_VERSION}"): convert it with '
                f"`kgwe convert {_as_typed(ps.root, rel)}` (it says what each field became and what the "
                "result still needs)"
            )
        else:
            msg = f'"{api_version}" is not a KGWE apiVersion (expected "{API_VERSION}")'
        ps.add("error", rel, line, column, "apiVersion", msg, str(kind or ""), name)
        return
    model = KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        line, column = doc.where(("kind",))
        hint = did_you_mean(str(kind), KINDS) if kind else ""
        msg = f'unknown kind "{kind}"{hint}; known kinds: {", ".join(KINDS)}' if kind else "missing kind"
        ps.add("error", rel, line, column, "kind", msg, "", name)
        return
    try:
        obj = model.model_validate(data)
    except ValidationError as exc:
        ps.invalid_kinds.add(model.KIND)
        for loc, message in messages_from_validation(model, exc):
            line, column = doc.where(loc)
            ps.add("error", rel, line, column, loc, message, model.KIND, name)
        return
    ps.entries.append(LoadedObject(obj=obj, file=rel, doc=doc))


def _as_typed(root: Path, rel: str) -> str:
    """The file as the user can pass it on (the path they gave, or under the directory they gave), quoted
    for a shell."""
    return shlex.quote(str(root) if root.is_file() else (root / rel).as_posix())


def _load_file(path: Path, rel: str, ps: PolicySet) -> None:
    raw = _read_bytes(path, rel, ps)
    if raw is None:
        return
    ps.files += 1
    try:
        docs = parse_documents(raw, ps.yaml_budget, max_bytes=MAX_FILE_BYTES)
    except YamlSyntaxError as exc:
        ps.add("error", rel, exc.line, exc.column, "", str(exc))
        return
    for doc in docs:
        _load_document(doc, rel, ps)


def load_repository(
    path: str | os.PathLike[str],
    *,
    checks: bool = True,
    policy: PolicySet | None = None,
    cluster: ClusterView | None = None,
    cluster_policy: PolicyView | None = None,
    namespace: str | None = None,
) -> PolicySet:
    """Load every KGWE object under `path` (a directory, or one YAML file) and check them together.

    `policy` (a loaded repository), `cluster` (what the cluster has) and `cluster_policy`
    (the PolicyView the cluster runs, used when neither this set nor `policy` has policy objects) are what
    the GPUWorkloads found here are checked against; `namespace` is theirs when they name none.
    Never raises for bad content: see `PolicySet.diagnostics` / `.ok` / `.raise_for_errors()`.
    KgweError only when `path` itself does not exist.
    """
    root = Path(path)
    if not root.exists() and not root.is_symlink():
        raise KgweError(f"{root}: no such file or directory")
    ps = PolicySet(
        root=root, policy=policy, cluster=cluster, cluster_policy=cluster_policy, namespace=namespace
    )
    if root.is_file():
        _load_file(root, root.name, ps)
    else:
        for count, file in enumerate(_yaml_files(root, ps), 1):
            rel = file.relative_to(root).as_posix()
            if count > MAX_FILES or ps.yaml_budget.exhausted or ps.bytes_read >= MAX_REPOSITORY_BYTES:
                limit = f"more than {MAX_FILES} YAML files" if count > MAX_FILES else "too much YAML"
                ps.add(
                    "error", rel, 1, 1, "", f"the repository holds {limit}; files from here on are not read"
                )
                break
            _load_file(file, rel, ps)
    if not ps.entries and not ps.diagnostics:
        what = "no YAML files" if ps.files == 0 else "no KGWE objects"
        ps.add(
            "error",
            root.name if root.is_file() else ".",
            1,
            1,
            "",
            f"{what} found in {root}: the repository is empty",
        )
    if checks:
        run_checks(ps)
    ps.diagnostics.sort()
    return ps
