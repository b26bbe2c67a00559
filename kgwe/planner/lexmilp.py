"""Lexicographic integer programming: minimise objective 1, then 2 among its optima, and so on.

The planner's problem is small once identical GPUs are grouped (variables = GPU classes x candidate layouts,
independent of how many GPUs a class holds), so an exact MILP (HiGHS through scipy) beats a hand-written
heuristic on both quality and code size. One solve per objective; each optimum becomes a constraint.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix, vstack

from kgwe.errors import KgweError

_QUIET = threading.Lock()

# Objectives are integers or sums of integer-weighted shortfalls against fractional targets; this slack keeps
# an optimum found in one stage feasible in the next despite floating point.
_SLACK = 1e-6


@dataclass
class Rows:
    """Sparse constraint rows lo <= A x <= hi, built incrementally."""

    n_vars: int

    def __post_init__(self) -> None:
        self.data: list[float] = []
        self.cols: list[int] = []
        self.ptr: list[int] = [0]
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, coefs: dict[int, float], lo: float, hi: float) -> None:
        for col, value in sorted(coefs.items()):
            if value:
                self.cols.append(col)
                self.data.append(value)
        self.ptr.append(len(self.cols))
        self.lo.append(lo)
        self.hi.append(hi)

    def constraint(self, extra: Sequence[tuple[np.ndarray, float]] = ()) -> LinearConstraint:
        a = csr_matrix((self.data, self.cols, self.ptr), shape=(len(self.lo), self.n_vars))
        lo, hi = list(self.lo), list(self.hi)
        if extra:
            a = vstack([a, *[csr_matrix(row) for row, _ in extra]], format="csr")
            lo += [-np.inf] * len(extra)
            hi += [bound for _, bound in extra]
        return LinearConstraint(a, lo, hi)


def solve(
    objectives: Sequence[np.ndarray],
    rows: Rows,
    integrality: np.ndarray,
    upper: np.ndarray,
    integral: Sequence[bool] = (),
) -> np.ndarray:
    """Minimise `objectives` lexicographically subject to `rows`, 0 <= x <= upper. Returns x (rounded ints
    where integral). `integral[k]` says objective k only takes whole values at feasible points, so its
    optimum can be pinned with an absolute slack of 1/2 instead of a relative one."""
    bounds = Bounds(np.zeros(rows.n_vars), upper)
    fixed: list[tuple[np.ndarray, float]] = []
    x = None
    for k, c in enumerate(objectives):
        if not np.any(c):
            continue
        x = _milp(c, rows.constraint(fixed), integrality, bounds)
        best = float(c @ x)
        whole = k < len(integral) and integral[k]
        fixed.append((c.reshape(1, -1), best + (0.5 if whole else _SLACK * (1 + abs(best)))))
    if x is None:  # every objective was zero: any feasible point will do
        x = _milp(np.zeros(rows.n_vars), rows.constraint(), integrality, bounds)
    return np.where(integrality == 1, np.round(x), x)


def _milp(
    c: np.ndarray, constraints: LinearConstraint, integrality: np.ndarray, bounds: Bounds
) -> np.ndarray:
    """One HiGHS solve. HiGHS' presolve sometimes ends in "Solve error" on tiny feasible models (seen with
    scipy 1.17); the same model then solves without presolve, so retry that way before giving up."""
    message = ""
    for presolve in (True, False):
        with _solver_output_silenced():
            res = milp(
                c,
                constraints=constraints,
                integrality=integrality,
                bounds=bounds,
                options={"mip_rel_gap": 0.0, "presolve": presolve},
            )
        if res.x is not None:
            solution: np.ndarray = res.x  # scipy ships no types
            return solution
        message = res.message
    raise KgweError(f"the MIG plan has no solution ({message})")


@contextlib.contextmanager
def _solver_output_silenced() -> Iterator[None]:
    """Send the C library's stdout to /dev/null while HiGHS runs: with `disp` off it still prints some debug
    lines of its own with printf (e.g. "degeneracy? ..."), which would land in the controller's log. Python's
    own stdout (other threads' prints, e.g. `kgwe demo`'s) is pointed at the real stdout meanwhile; C buffers
    are flushed before stdout comes back."""
    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
    except (OSError, ValueError):  # no real stdout (embedded, closed): nothing to silence
        yield
        return
    with _QUIET:
        python_out = sys.stdout
        python_out.flush()
        saved = os.dup(fd)
        keep = None
        try:
            if python_out is sys.__stdout__:  # Python writes to fd 1: keep them going where they went
                keep = open(  # noqa: SIM115 (closed in the finally below)
                    os.dup(saved),
                    "w",
                    buffering=1,
                    encoding=getattr(python_out, "encoding", None) or "utf-8",
                    errors="replace",
                )
                sys.stdout = keep
            with open(os.devnull, "wb") as null:
                os.dup2(null.fileno(), fd)
            yield
        finally:
            _libc_flush()
            os.dup2(saved, fd)
            os.close(saved)
            if keep is not None:
                sys.stdout = python_out
                keep.close()


def _libc_flush() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)
