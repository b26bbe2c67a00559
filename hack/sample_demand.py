"""Write sample-repo/reports/demand-record.json: a week of synthetic demand shaped to sample-repo's teams and
inventory (deterministic: fixed seed and end time), so `kgwe plan` on sample-repo shows an impact section.

    .venv/bin/python hack/sample_demand.py
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from kgwe.impact.record import RECORD_NAME, Shape, decode, encode
from kgwe.impact.synth import TeamDemand, synthesize
from kgwe.resources import sample_repo_dir

UNTIL = datetime(2026, 11, 16, tzinfo=UTC)

TEAMS = (
    TeamDemand(  # model servers on the MIG-partitioned H100 pool
        "inference-prod",
        "inference-platform",
        gpus=64,
        shapes=(
            (Shape("mig", 1, "1g.10gb"), 6),
            (Shape("mig", 1, "2g.20gb"), 2),
            (Shape("mig", 1, "3g.40gb"), 1),
        ),
        mean_hours=24,
        load=0.25,
    ),
    TeamDemand(  # training jobs: 1 to 8 whole GPUs, multi-GPU ones asking for NVLink
        "ml-training",
        "ml-research",
        gpus=80,
        shapes=(
            (Shape("whole", 1), 5),
            (Shape("whole", 2, preference="NVLinkOptimal"), 2),
            (Shape("whole", 4, preference="NVLinkOptimal"), 1),
            (Shape("whole", 8, preference="NVLinkOptimal"), 1),
        ),
        mean_hours=8,
        load=0.7,
    ),
    TeamDemand(  # notebooks sharing GPUs
        "ds-notebooks",
        "data-science",
        gpus=16,
        shapes=(
            (Shape("shared", 1, gpu_milli=250), 3),
            (Shape("shared", 1, gpu_milli=500), 2),
            (Shape("whole", 1), 1),
        ),
        mean_hours=4,
        load=0.5,
    ),
)


def sample_record_bytes() -> bytes:
    """The encoded record, exactly as shipped (a test checks the shipped file is this script's output)."""
    record = synthesize(
        TEAMS,
        gpus_by_product={"NVIDIA-H100-80GB-HBM3": 64, "NVIDIA-A100-SXM4-80GB": 80, "NVIDIA-L40S": 16},
        nodes=20,
        until=UNTIL,
        cluster="prod-eu-1",
    )
    return encode(record)


def main() -> None:
    out = sample_repo_dir() / "reports" / RECORD_NAME
    out.parent.mkdir(exist_ok=True)
    data = sample_record_bytes()
    Path(out).write_bytes(data)
    record = decode(data)
    print(f"{out}: {len(record.pods)} pods, {len(data)} bytes")


if __name__ == "__main__":
    main()
