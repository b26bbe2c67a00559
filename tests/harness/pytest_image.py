"""pytest plugin: the KGWE OCI image, built once per test session.

Fixtures:
  kgwe_image       (session)  BuiltImage from hack/image/build.sh (reused from the cache while unchanged)
  image_container  (session)  a buildah working container of it: run commands inside, read its files
  previous_kgwe    (session)  PreviousRelease: the chart and image of tests/compat/previous-commit (cached)

Tests that use them are marked `image` (tests.harness.pytest_lanes). A failed build fails them with the
build script's message; they are never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.image import BuiltImage, Container, ImageError, build_image, container
from tests.harness.previous import PreviousRelease, previous_release


@pytest.fixture(scope="session")
def kgwe_image() -> BuiltImage:
    try:
        return build_image()
    except ImageError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def image_container(kgwe_image: BuiltImage) -> Iterator[Container]:
    with container(kgwe_image) as ctr:
        yield ctr


@pytest.fixture(scope="session")
def previous_kgwe() -> PreviousRelease:
    try:
        return previous_release()
    except ImageError as exc:
        pytest.fail(str(exc), pytrace=False)
