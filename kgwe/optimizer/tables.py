"""SQL tables of the optimizer, in the cost store's database (migration 0004 of kgwe/cost/migrations).

`kgwe_model`: every fitted model record (kgwe.optimizer.record) as JSON, newest last; the last
`KEEP_RECORDS` per model are kept. `kgwe_workload_run`: finished GPUWorkload runs, the history the runtime
model learns from — one row per workload uid, written when the workload completes or fails.
Times are integer epoch seconds, as in kgwe.cost.tables.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Text
from sqlmodel import Field, SQLModel

MODEL_TABLE = "kgwe_model"
RUN_TABLE = "kgwe_workload_run"


class ModelRow(SQLModel, table=True):
    __tablename__ = MODEL_TABLE
    __table_args__ = (Index("ix_kgwe_model_name_fitted", "name", "fitted_s"),)

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=63)
    fitted_s: int = Field(sa_column=Column(BigInteger, nullable=False))
    record: str = Field(sa_column=Column(Text, nullable=False))


class RunRow(SQLModel, table=True):
    __tablename__ = RUN_TABLE
    __table_args__ = (Index("ix_kgwe_workload_run_ended", "ended_s"),)

    uid: str = Field(primary_key=True, max_length=64)
    namespace: str = Field(max_length=63)
    workload: str = Field(max_length=253)
    runtime: str = Field(default="", max_length=253)
    workload_type: str = Field(default="", max_length=63)
    shape: str = Field(default="", max_length=128)
    pods: int = 1
    gpu_milli: int = 0  # GPUs all its pods hold, in thousandths of a GPU
    started_s: int = Field(sa_column=Column(BigInteger, nullable=False))
    ended_s: int = Field(sa_column=Column(BigInteger, nullable=False))
    outcome: str = Field(default="", max_length=16)
