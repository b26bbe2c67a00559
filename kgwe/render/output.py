"""Write rendered files deterministically: same content, byte-identical files; stale renders removed."""

from __future__ import annotations

from pathlib import Path

HEADER = "# Rendered by kgwe from policy; do not edit (changes are overwritten).\n"


def write_files(files: dict[str, str], out_dir: str | Path) -> list[Path]:
    """Write `files` under out_dir; delete .yaml files a previous render left there that are not rendered
    now (only files carrying our header, so nothing else in the directory is touched)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in sorted(files):
        path = out / name
        data = (HEADER + files[name]).encode("utf-8")
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        written.append(path)
    for stale in sorted(out.glob("*.yaml")):
        if stale.name not in files and stale.is_file():
            with stale.open("rb") as fh:
                if fh.read(len(HEADER)) == HEADER.encode():
                    stale.unlink()
    return written
