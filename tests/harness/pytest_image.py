"""pytest plugin: the KGWE OCI image, built once per test session.

Fixtures:
  kgwe_image       (session)  BuiltImage from hack/image/build.sh (reused from the cache while unchanged)
  image_container  (session)  a buildah working container of it: run commands inside, read its files

Tests that use them are marked `image` (added automatically if missing). A failed build fails them with the
build script's message; they are never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.image import BuiltImage, Container, ImageError, build_image, container

_IMAGE_FIXTURES = {"kgwe_image", "image_container"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "image: builds the OCI image (mmdebstrap + buildah, as root) and runs KGWE inside it"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _IMAGE_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("image"):
            item.add_marker(pytest.mark.image)


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
