"""Mutating admission: routes GPU pods of opted-in namespaces to the KGWE scheduler."""
