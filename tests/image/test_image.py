"""The image tier (make test-image): the image users install, opened layer by layer.

It is the driver, runnable as the chart runs it (entrypoint, PATH, the virtualenv, every
handler plugin), and it carries nothing of the machine that built it: no certificate of
its CA bundle that Debian does not ship (a TLS-intercepting proxy's CA), no pip
configuration or credentials, no file of a home directory, no secret of its environment,
no build setting in the image's configuration. Every layer is read, files a later layer
deletes included. tests/unit/test_image_checks.py shows each check finding what it is for."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support import imagearchive, imageleaks
from tests.support.imageleaks import Marker

from .conftest import ROOT

pytestmark = pytest.mark.image

VENV = "opt/dra-driver"
BUNDLE = "etc/ssl/certs/ca-certificates.crt"
HOST_BUNDLE = Path("/" + BUNDLE)
# The .crt files Debian's ca-certificates package ships; the bundle is made of them.
HOST_DEBIAN_CAS = Path("/usr/share/ca-certificates/mozilla")


def plugins() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(project["project"]["entry-points"]["dradriver.handlers"])


def clean(findings: list[str]) -> None:
    assert not findings, "the image carries what it must not:\n" + "\n".join(findings)


def test_the_archive_names_the_image(image, built):
    if "image" not in built:
        pytest.skip("DRA_IMAGE_ARCHIVE: no name to compare with")
    assert image.repo_tags == [built["image"]]


def test_entrypoint_cmd_and_path(image):
    config = image.config["config"]
    assert config["Entrypoint"] == ["dra-driver"]
    assert config["Cmd"] == ["run"]
    path = image.env["PATH"].split(":")
    assert path[0] == f"/{VENV}/bin", path
    assert "/usr/bin" in path and "/bin" in path, path


def test_the_venv_holds_dra_driver_and_only_the_venv_came_from_the_build(tree):
    for path in (f"{VENV}/pyvenv.cfg", f"{VENV}/bin/dra-driver"):
        assert path in tree and tree[path].info.isreg(), f"/{path} missing"
    assert tree[f"{VENV}/bin/dra-driver"].info.mode & 0o111
    python = imagearchive.resolve(tree, f"{VENV}/bin/python")
    assert python is not None and python.info.isreg(), "the venv's python points nowhere"
    # --without-pip, and the build stage (WORKDIR /src, pip's cache) stays behind.
    assert not [p for p in tree if p.startswith(VENV) and "/site-packages/pip/" in p]
    assert "src" not in tree


def test_the_ca_bundle_holds_only_what_debian_ships(tree, files):
    """The image's own bundle is made of its ca-certificates package's certificates."""
    bundle = next(d for e, d in reversed(files) if e.path == BUNDLE and d is not None)
    shipped = [d for e, d in files if e.path.startswith("usr/share/ca-certificates/") and d]
    assert shipped, "the image has no ca-certificates package"
    assert imageleaks.certificates(bundle), f"/{BUNDLE} holds no certificate"
    if local := imageleaks.local_certificates(bundle, shipped):
        pytest.fail(f"/{BUNDLE} holds {len(local)} certificates its package does not ship")


def test_no_ca_of_the_build_machine(files):
    """The build machine's own CAs (those Debian does not ship) are in no file of any
    layer, in PEM or DER; its whole bundle only where it is byte for byte the base's own."""
    if not HOST_BUNDLE.is_file():
        pytest.skip(f"this machine has no {HOST_BUNDLE}")
    host = HOST_BUNDLE.read_bytes()
    debian = [p.read_bytes() for p in sorted(HOST_DEBIAN_CAS.glob("*.crt"))]
    local = imageleaks.local_certificates(host, debian)
    # The base's bundle: the lowest layer's, from Debian's ca-certificates.
    base = next(d for e, d in files if e.path == BUNDLE and d is not None)
    markers = [
        *imageleaks.certificate_markers(local, "this machine's local CA"),
        Marker(f"this machine's {HOST_BUNDLE}", host, frozenset({base})),
    ]
    clean(imageleaks.content_findings(files, markers))
    print(f"checked {len(local)} local CA certificates of {HOST_BUNDLE} and the bundle itself")


def test_no_credentials_configuration_or_home_files(files):
    forbidden = {"src": "the build stage's source directory"}
    for links in os.environ.get("PIP_FIND_LINKS", "").split():
        if links.startswith("/"):
            forbidden[links] = "the build machine's PIP_FIND_LINKS"
    clean(imageleaks.path_findings(files, forbidden))


def test_no_secret_or_path_of_the_build_machine(image, files):
    markers = [
        *imageleaks.secret_values(dict(os.environ)),
        Marker("the checkout's path on the build machine", str(ROOT).encode()),
    ]
    clean(imageleaks.content_findings(files, markers))
    clean(imageleaks.config_findings(image.config, markers))


def test_the_image_runs_dra_driver_handlers(image, tmp_path):
    """Unpacked and run as a runtime would: its entrypoint, its environment, its root."""
    if os.geteuid() != 0:
        pytest.skip("needs root (chroot)")
    root = tmp_path / "rootfs"
    root.mkdir()
    imagearchive.unpack(image, root)
    command = [*image.config["config"]["Entrypoint"], "handlers"]
    res = subprocess.run(
        ["chroot", str(root), *command],
        env=image.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines()[1:] if line.strip()]
    assert {row[-1] for row in rows} == plugins(), res.stdout


def test_the_image_has_the_commands_of_the_charts_readiness_probe(image, tmp_path):
    """The chart's readiness probe is a shell script (templates/driver/daemonset.yaml):
    each command it runs is on the image's PATH."""
    if os.geteuid() != 0:
        pytest.skip("needs root (chroot)")
    root = tmp_path / "rootfs"
    root.mkdir()
    imagearchive.unpack(image, root)
    for tool in ("sh", "cat", "sed", "cut"):
        res = subprocess.run(
            ["chroot", str(root), "sh", "-c", f"command -v {tool}"],
            env=image.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert res.returncode == 0 and res.stdout.strip(), (tool, res.stderr)
