"""Alembic migrations of the cost store; run through kgwe.cost.store.migrate(), no alembic.ini needed."""
