"""Change the scoring strategy the way GitOps does: edit `spec.strategy` of a ScoringProfile in a local
checkout of the policy repository, keep its comments, and print the diff to commit. The controller applies
it after the commit is pushed; nothing is sent to the cluster.

The profile is `--profile NAME`, else the repository's default one (spec.default: true), else its only one.

examples:
  kgwe strategy Spread                          # in the checkout's root
  kgwe strategy BinPack --repo ~/gpu-policy --profile topology-first
  kgwe strategy Spread --dry-run                # show the diff, write nothing
  kgwe strategy least_utilized                  # AgentaFlow's word for LeastLoaded
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from kgwe.errors import KgweError
from kgwe.vocab import STRATEGIES, strategy_for_word


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "strategy",
        metavar="NAME",
        help=f"one of {', '.join(STRATEGIES)}, or a seed's spelling of one (best_fit, least_utilized, ...)",
    )
    parser.add_argument("--repo", default=".", help="the policy checkout (the folder KGWE reads; default: .)")
    parser.add_argument("--profile", help="the ScoringProfile to change (default: the default profile)")
    parser.add_argument("--dry-run", action="store_true", help="print the diff, change no file")


def run(args: argparse.Namespace) -> int:
    from kgwe.fleet.strategy import insert_strategy, replace_strategy, unified_diff
    from kgwe.policy.diagnostics import did_you_mean
    from kgwe.policy.loader import load_repository
    from kgwe.policy.scoring_profile import ScoringProfile
    from kgwe.workloads.convert import strategy_caveats

    if args.strategy not in STRATEGIES:
        word = args.strategy
        args.strategy = strategy_for_word(word)  # the seeds' spellings, as `kgwe convert` maps them
        if args.strategy is None:
            hint = did_you_mean(word, STRATEGIES)
            raise KgweError(f'unknown strategy "{word}"{hint}; known: {", ".join(STRATEGIES)}')
        print(f'"{word}" is {args.strategy}', file=sys.stderr)
        for caveat in strategy_caveats(word):
            print(f"warning: {caveat}", file=sys.stderr)
    root = Path(args.repo)
    if not root.is_dir():
        raise KgweError(f"{root}: not a directory (pass the policy checkout with --repo)")
    ps = load_repository(root, checks=False)
    entries = ps.entries_of(ScoringProfile)
    by_name = {e.obj.metadata.name: e for e in entries}
    if args.profile:
        if args.profile not in by_name:
            hint = did_you_mean(args.profile, by_name)
            known = ", ".join(sorted(by_name)) or "none"
            raise KgweError(f'no ScoringProfile "{args.profile}" in {root}{hint}; known: {known}')
        entry = by_name[args.profile]
    else:
        defaults = [e for e in entries if e.obj.spec.default]
        # With errors in the checkout the default profile may be among the unreadable files: never guess
        chosen = defaults or ([] if ps.errors else entries)
        if len(chosen) != 1:
            for d in sorted(ps.errors):
                print(d, file=sys.stderr)
            what = (
                "no default ScoringProfile" if len(chosen) < 2 else f"{len(chosen)} default ScoringProfiles"
            )
            raise KgweError(f"{root}: {what} found; name the profile to change with --profile")
        entry = chosen[0]
    profile = entry.obj
    name = profile.metadata.name
    path = root / entry.file
    where = f"{entry.file}:{entry.doc.line}"
    if profile.spec.strategy == args.strategy and ("spec", "strategy") in entry.doc.positions:
        print(f"ScoringProfile/{name} already uses {args.strategy} ({where}); nothing to change")
        return 0
    if path.is_symlink():
        raise KgweError(f"{path} is a symbolic link; change spec.strategy of ScoringProfile/{name} by hand")
    before = path.read_text(encoding="utf-8")
    positions = entry.doc.positions
    if ("spec", "strategy") in positions:
        line, column = positions[("spec", "strategy")]
        after = replace_strategy(before, line, column, args.strategy)
    elif ("spec",) in positions:
        children = [pos for key, pos in positions.items() if len(key) == 2 and key[0] == "spec"]
        spec_line, spec_column = positions[("spec",)]
        column = min((c for _, c in children), default=spec_column + 2)
        after = insert_strategy(before, spec_line, column, args.strategy)
    else:
        raise KgweError(
            f"ScoringProfile/{name} ({where}) has no spec: add `spec: {{strategy: {args.strategy}}}`"
        )
    _check(after, path, entry.doc.line, name, args.strategy)
    sys.stdout.write(unified_diff(before, after, entry.file))
    if args.dry_run:
        return 0
    _write(path, after)
    print(
        f"changed ScoringProfile/{name} to {args.strategy} in {path}; commit and push it for the controller "
        "to roll it out",
        file=sys.stderr,
    )
    return 0


def _check(text: str, path: Path, line: int, name: str, strategy: str) -> None:
    """The edited document must still be the same valid ScoringProfile, now with the new strategy."""
    from kgwe.policy.loader import load_repository
    from kgwe.policy.scoring_profile import ScoringProfile

    with tempfile.TemporaryDirectory(prefix="kgwe-strategy-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(text, encoding="utf-8")
        ps = load_repository(copy, checks=False)
    ok = [e for e in ps.entries_of(ScoringProfile) if e.obj.metadata.name == name]
    if not ok or ok[0].obj.spec.strategy != strategy or ps.errors:
        raise KgweError(f"{path}:{line}: could not change the strategy safely; change it by hand")


def _write(path: Path, text: str) -> None:
    """Replace the file in one step (a crash leaves the old or the new file, never half of one)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
