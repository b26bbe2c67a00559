"""index usage by node (finds usage on nodes without a capacity record without a table scan)

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_kgwe_usage_node", "kgwe_usage", ["node"])


def downgrade() -> None:
    op.drop_index("ix_kgwe_usage_node", table_name="kgwe_usage")
