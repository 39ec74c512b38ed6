"""Fixtures of the image tier: the archive `make image` wrote (hack/build-image.sh names it
in .cache/image/dra-driver.json), or the one DRA_IMAGE_ARCHIVE names (e.g. what `docker
save dra-driver:dev` wrote), read once for the session."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import imagearchive
from tests.support.imagearchive import Entry, ImageArchive

ROOT = Path(__file__).resolve().parents[2]
CURRENT = ROOT / ".cache" / "image" / "dra-driver.json"
# `make test-image` sets it: there a missing archive is a failure, not a skip.
REQUIRED = os.environ.get("DRA_IMAGE_REQUIRED") == "1"


@pytest.fixture(scope="session")
def built() -> dict[str, str]:
    """What the archive is: its path and, when hack/build-image.sh wrote it, its image name."""
    if archive := os.environ.get("DRA_IMAGE_ARCHIVE"):
        return {"archive": archive}
    if not CURRENT.exists():
        (pytest.fail if REQUIRED else pytest.skip)(f"no image archive ({CURRENT}): run make image")
    current: dict[str, str] = json.loads(CURRENT.read_text())
    return current


@pytest.fixture(scope="session")
def image(built: dict[str, str]) -> ImageArchive:
    path = Path(built["archive"])
    if not path.is_file():
        pytest.fail(f"{path} is missing: run make image")
    return imagearchive.read(path)


@pytest.fixture(scope="session")
def files(image: ImageArchive) -> list[tuple[Entry, bytes | None]]:
    """Every entry of every layer with its bytes (deleted files included)."""
    return list(imagearchive.entries(image, content=True))


@pytest.fixture(scope="session")
def tree(image: ImageArchive) -> dict[str, Entry]:
    return imagearchive.merged(image)
