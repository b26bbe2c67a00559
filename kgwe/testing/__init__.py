"""Test and demo support that runs real parts: the local control plane, simulated GPU nodes, a PostgreSQL server.

Lives in the package (not tests/) because `kgwe demo` and the benchmarks use it too.
"""
