"""usage intervals and node capacity

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kgwe_usage",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("pod_uid", sa.String(64), nullable=False),
        sa.Column("pod", sa.String(253), nullable=False),
        sa.Column("namespace", sa.String(63), nullable=False),
        sa.Column("team", sa.String(253), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("gpu_product", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("resource", sa.String(64), nullable=False),
        sa.Column("mig_profile", sa.String(32), nullable=True),
        sa.Column("gpu_milli", sa.Integer(), nullable=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False),
        sa.Column("start_s", sa.BigInteger(), nullable=False),
        sa.Column("end_s", sa.BigInteger(), nullable=True),
    )
    op.create_index("ix_kgwe_usage_start", "kgwe_usage", ["start_s"])
    op.create_index("ix_kgwe_usage_end", "kgwe_usage", ["end_s"])
    op.create_index(
        "ux_kgwe_usage_open",
        "kgwe_usage",
        ["pod_uid", "resource"],
        unique=True,
        sqlite_where=sa.text("end_s IS NULL"),
        postgresql_where=sa.text("end_s IS NULL"),
    )
    op.create_table(
        "kgwe_node_capacity",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("gpu_product", sa.String(128), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False),
        sa.Column("start_s", sa.BigInteger(), nullable=False),
        sa.Column("end_s", sa.BigInteger(), nullable=True),
    )
    op.create_index("ix_kgwe_node_start", "kgwe_node_capacity", ["start_s"])
    op.create_index(
        "ux_kgwe_node_open",
        "kgwe_node_capacity",
        ["node"],
        unique=True,
        sqlite_where=sa.text("end_s IS NULL"),
        postgresql_where=sa.text("end_s IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("kgwe_node_capacity")
    op.drop_table("kgwe_usage")
