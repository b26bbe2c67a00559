"""Benchmark of the OCI image: its size, how long `make image` takes, how fast KGWE starts inside it.

    .venv/bin/python bench/image.py [--quick] [--reuse]

Builds the image from scratch into a temporary folder (hack/image/build.sh; `--reuse` takes the cached
build the tests use instead and reports its build time as null), then runs `kgwe --version` inside it with
`buildah run --isolation chroot` (best of 3; --quick: 1). Needs root. Last line: one JSON object with
image_mb (uncompressed layers, 10^6 bytes), archive_mb (the gzipped OCI archive), build_seconds and
version_seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.harness
from tests.harness.image import build_image, container, uncompressed_size_bytes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="time `kgwe --version` once")
    parser.add_argument("--reuse", action="store_true", help="use the cached image: no build time")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kgwe-bench-image-") as tmp:
        started = time.monotonic()
        image = build_image(None if args.reuse else Path(tmp))
        build_seconds = None if args.reuse else round(time.monotonic() - started, 1)
        image_mb = round(uncompressed_size_bytes(image.archive) / 1e6, 1)
        archive_mb = round(image.archive.stat().st_size / 1e6, 1)
        print(
            f"{image.reference}: {image_mb} MB uncompressed, archive {archive_mb} MB,"
            f" built in {build_seconds} s"
        )

        runs = []
        with container(image) as ctr:
            for _ in range(1 if args.quick else 3):
                started = time.monotonic()
                proc = ctr.run(["kgwe", "--version"])
                runs.append(time.monotonic() - started)
                if proc.returncode != 0:
                    raise SystemExit(f"kgwe --version failed in the image: {proc.stderr}")
        version_seconds = round(min(runs), 2)
        print(f"kgwe --version inside the image: {version_seconds} s (best of {len(runs)})")

    print(
        json.dumps(
            {
                "image_mb": image_mb,
                "archive_mb": archive_mb,
                "build_seconds": build_seconds,
                "version_seconds": version_seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
