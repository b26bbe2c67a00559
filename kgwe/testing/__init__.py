"""Test and demo support running real parts: local control plane, simulated GPU nodes, PostgreSQL.

Lives in the package (not tests/) because `kgwe demo` and the benchmarks use it too.
"""
