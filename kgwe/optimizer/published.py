"""The optimizer's models as committed beside the cost reports: each newest ModelRecord as
`<reports>/models/<name>.json`, and `<reports>/predictions.md`, the reports' predictions section (what each
model predicts, from which window and how many samples, its held-out scores and notes).

So a person reads the models' standing in the policy repository, and `kgwe submit --dry-run --policy DIR`
predicts a workload's cost offline from the runtime model the controller committed there.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from kgwe.optimizer.record import MAX_RECORD_BYTES, ModelRecord, ModelRecordError
from kgwe.optimizer.registry import MODELS
from kgwe.safetext import markdown_cell, markdown_text
from kgwe.timestamps import format_rfc3339
from kgwe.vocab import DEFAULT_REPORTS_PATH

MODELS_FOLDER = "models"
PREDICTIONS_REPORT = "predictions.md"


def published_files(records: Mapping[str, ModelRecord], now: datetime) -> dict[str, str]:
    """The files to commit under the reports path (relative to it, like the cost reports' own)."""
    files = {
        f"{DEFAULT_REPORTS_PATH}/{MODELS_FOLDER}/{name}.json": record.to_json().decode()
        for name, record in sorted(records.items())
    }
    lines = [
        "# Predictions",
        "",
        f"KGWE's workload optimizer as of {format_rfc3339(now)} (KGWE's docs/optimizer.md): each model",
        "refitted by the controller from this cluster's own records, scored on data held out of the fit.",
        "",
        "| model | predicts | fitted | samples | held-out scores |",
        "|---|---|---|---|---|",
    ]
    notes = []
    for entry in MODELS:
        record = records.get(entry.name)
        if record is None:
            lines.append(f"| {entry.name} | {entry.predicts} | not yet | – | – |")
            continue
        scores = ", ".join(f"{k} {v:g}" for k, v in sorted(record.metrics.items())) or "none yet"
        lines.append(
            f"| {entry.name} | {entry.predicts} | {format_rfc3339(record.fitted_at)} | {record.samples:,} | "
            f"{markdown_cell(scores)} |"
        )
        # a record is read back from the policy repository: what it says is shown as text (kgwe.safetext)
        notes += [markdown_text(f"- {entry.name}: {note}") for note in record.notes]
    if notes:
        lines += ["", "Notes:", "", *notes]
    files[f"{DEFAULT_REPORTS_PATH}/{PREDICTIONS_REPORT}"] = "\n".join(lines) + "\n"
    return files


def read_published(root: Path, name: str) -> ModelRecord | None:
    """Model `name` as committed under `root`'s reports folder, or under its parent's (a policy folder
    inside the repository); None when there is none. A symlink, a file over the record bound or one that
    does not decode is refused with the reason (ModelRecordError)."""
    for base in (root, root.parent):
        path = base / DEFAULT_REPORTS_PATH / MODELS_FOLDER / f"{name}.json"
        if path.is_symlink():
            raise ModelRecordError(f"{path}: a symlink; the committed model is read only as a file")
        if not path.is_file():
            continue
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise ModelRecordError(f"{path}: over {MAX_RECORD_BYTES:,} bytes")
        return ModelRecord.from_json(path.read_bytes())
    return None
