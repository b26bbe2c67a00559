"""optimizer: fitted model records and finished GPUWorkload runs (kgwe.optimizer.tables)

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kgwe_model",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("fitted_s", sa.BigInteger(), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
    )
    op.create_index("ix_kgwe_model_name_fitted", "kgwe_model", ["name", "fitted_s"])
    op.create_table(
        "kgwe_workload_run",
        sa.Column("uid", sa.String(64), primary_key=True),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("workload", sa.String(253), nullable=False),
        sa.Column("runtime", sa.String(253), nullable=False),
        sa.Column("workload_type", sa.String(63), nullable=False),
        sa.Column("shape", sa.String(128), nullable=False),
        sa.Column("pods", sa.Integer(), nullable=False),
        sa.Column("gpu_milli", sa.Integer(), nullable=False),
        sa.Column("started_s", sa.BigInteger(), nullable=False),
        sa.Column("ended_s", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
    )
    op.create_index("ix_kgwe_workload_run_ended", "kgwe_workload_run", ["ended_s"])


def downgrade() -> None:
    op.drop_index("ix_kgwe_workload_run_ended", table_name="kgwe_workload_run")
    op.drop_table("kgwe_workload_run")
    op.drop_index("ix_kgwe_model_name_fitted", table_name="kgwe_model")
    op.drop_table("kgwe_model")
