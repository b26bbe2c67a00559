"""SQL tables of the cost store (sqlmodel). Times are integer epoch seconds (UTC) so that overlap
arithmetic is plain integer SQL on SQLite and PostgreSQL alike; the rows convert to aware datetimes.

A pod's open interval is unique per (pod_uid, resource): a partial unique index makes a second
"start" for the same holding impossible, which is what keeps restarts from double counting.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, Index, text
from sqlmodel import Field, SQLModel

from kgwe.cost.usage import NodeCapacity, UsageInterval, from_epoch

# Chargeback groups usage by team (and namespace) and resource shape over a time range. With every column
# it reads in one index in that order, SQLite streams the groups from the index instead of sorting a
# million rows (6x faster). On SQLite only (migration 0003): PostgreSQL hashes the groups, and would
# rather walk this index on a freshly loaded table, fetching every row from the heap (10x slower).
USAGE_GROUP_INDEX = "ix_kgwe_usage_team_shape"
USAGE_GROUP_INDEX_DIMENSIONS = ("team", "namespace")
USAGE_GROUP_INDEX_COLUMNS = (
    *USAGE_GROUP_INDEX_DIMENSIONS,
    "gpu_product",
    "spot",
    "kind",
    "mig_profile",
    "gpu_milli",
    "node",
    "start_s",
    "end_s",
    "count",
)


class UsageRecord(SQLModel, table=True):
    __tablename__ = "kgwe_usage"
    __table_args__ = (
        Index("ix_kgwe_usage_start", "start_s"),
        Index("ix_kgwe_usage_end", "end_s"),
        Index("ix_kgwe_usage_node", "node"),
        Index(
            "ux_kgwe_usage_open",
            "pod_uid",
            "resource",
            unique=True,
            sqlite_where=text("end_s IS NULL"),
            postgresql_where=text("end_s IS NULL"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    pod_uid: str = Field(max_length=64)
    pod: str = Field(max_length=253)
    namespace: str = Field(max_length=63)
    team: str = Field(max_length=253)
    node: str = Field(max_length=253)
    gpu_product: str = Field(max_length=128)
    kind: str = Field(max_length=8)
    resource: str = Field(max_length=64)
    mig_profile: str | None = Field(default=None, max_length=32)
    gpu_milli: int | None = None
    count: int
    spot: bool = False
    start_s: int = Field(sa_column=Column(BigInteger, nullable=False))
    end_s: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))

    def to_interval(self) -> UsageInterval:
        return UsageInterval(
            pod=self.pod,
            namespace=self.namespace,
            team=self.team,
            node=self.node,
            gpu_product=self.gpu_product,
            kind=self.kind,
            count=self.count,
            start=from_epoch(self.start_s),
            end=None if self.end_s is None else from_epoch(self.end_s),
            mig_profile=self.mig_profile,
            gpu_milli=self.gpu_milli,
            spot=self.spot,
            pod_uid=self.pod_uid,
        )

    @property
    def start(self) -> datetime:
        return from_epoch(self.start_s)

    @property
    def end(self) -> datetime | None:
        return None if self.end_s is None else from_epoch(self.end_s)


class NodeRecord(SQLModel, table=True):
    __tablename__ = "kgwe_node_capacity"
    __table_args__ = (
        Index("ix_kgwe_node_start", "start_s"),
        Index(
            "ux_kgwe_node_open",
            "node",
            unique=True,
            sqlite_where=text("end_s IS NULL"),
            postgresql_where=text("end_s IS NULL"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    node: str = Field(max_length=253)
    gpu_product: str = Field(max_length=128)
    gpu_count: int
    spot: bool = False
    start_s: int = Field(sa_column=Column(BigInteger, nullable=False))
    end_s: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))

    def to_capacity(self) -> NodeCapacity:
        return NodeCapacity(
            node=self.node,
            gpu_product=self.gpu_product,
            gpu_count=self.gpu_count,
            start=from_epoch(self.start_s),
            end=None if self.end_s is None else from_epoch(self.end_s),
            spot=self.spot,
        )


def resource_key(kind: str, mig_profile: str | None, gpu_milli: int | None) -> str:
    """One string per resource shape, so uniqueness needs no nullable columns."""
    if kind == "mig":
        return f"mig:{mig_profile}"
    if kind == "shared":
        return f"shared:{gpu_milli}"
    return "whole"
