"""Certificates KGWE makes for itself: X.509 building blocks (x509) and when to issue or rotate (rotation)."""
