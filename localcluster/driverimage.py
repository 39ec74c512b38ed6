"""The driver's image for a local cluster: built by hack/build-image.sh (`make image`:
the project's Dockerfile, buildah, a Debian base; cached under .cache/image) and
imported into every node's containerd, where the chart's pods run it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from .binaries import REPO_ROOT
from .images import Image

BUILD = REPO_ROOT / "hack" / "build-image.sh"
CURRENT = REPO_ROOT / ".cache" / "image" / "dra-driver.json"
DEFAULT_IMAGE = "dra-driver:dev"


class ImageUnavailable(RuntimeError):
    """The image cannot be built here; the message says why."""


def build_driver_image(image: str = DEFAULT_IMAGE, timeout: float = 2400) -> tuple[Image, float]:
    """The image `image` (name:tag), built unless its archive is cached; with the
    seconds the build took (about 0 when cached)."""
    t0 = time.monotonic()
    res = subprocess.run(
        [str(BUILD)],
        env={**os.environ, "IMAGE": image},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if res.returncode != 0:
        raise ImageUnavailable(f"make image failed:\n{(res.stderr or res.stdout).strip()}")
    current = json.loads(CURRENT.read_text())
    return Image(str(current["image"]), Path(current["archive"]), ""), time.monotonic() - t0


def repository_and_tag(name: str) -> tuple[str, str]:
    """The chart's image.repository and image.tag for a full image name."""
    repo, _, tag = name.rpartition(":")
    return repo.removeprefix("docker.io/library/"), tag
