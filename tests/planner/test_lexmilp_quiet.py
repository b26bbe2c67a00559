"""The solver's own printf output never reaches KGWE's stdout (the controller's log)."""

from __future__ import annotations

import ctypes

import numpy as np

from kgwe.planner import lexmilp


def test_solver_printf_output_is_silenced(monkeypatch, capfd):
    real = lexmilp.milp

    def chatty_milp(*args, **kwargs):  # what HiGHS does on some models despite disp=False
        libc = ctypes.CDLL(None)
        libc.printf(b"degeneracy? not possible to find non-active constraint to leave basis\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(lexmilp, "milp", chatty_milp)
    rows = lexmilp.Rows(2)
    rows.add({0: 1.0, 1: 1.0}, 1.0, 2.0)
    x = lexmilp.solve([np.array([1.0, 2.0])], rows, np.array([1, 1]), np.array([3.0, 3.0]))
    print("after the solve")
    out, err = capfd.readouterr()
    assert list(x) == [1.0, 0.0]
    assert "degeneracy" not in out + err
    assert "after the solve" in out  # stdout works again afterwards
