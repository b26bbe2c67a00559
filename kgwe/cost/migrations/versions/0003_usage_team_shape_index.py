"""SQLite: covering index for chargeback by team and namespace (groups stream from it instead of a sort)

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

from kgwe.cost.tables import USAGE_GROUP_INDEX, USAGE_GROUP_INDEX_COLUMNS

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":  # see kgwe.cost.tables
        op.create_index(USAGE_GROUP_INDEX, "kgwe_usage", list(USAGE_GROUP_INDEX_COLUMNS))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.drop_index(USAGE_GROUP_INDEX, table_name="kgwe_usage")
