"""The image tier's reader and leak checks (tests/support/imagearchive.py, imageleaks.py)
on archives made here: each check finds what it is for, so the tier (tests/image) cannot
pass by finding nothing."""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from tests.support import imagearchive, imageleaks
from tests.support.imageleaks import Marker

Layer = dict[str, "bytes | str | None"]  # path: file bytes, "->target" symlink, None dir


def _layer_tar(files: Layer) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, content in files.items():
            info = tarfile.TarInfo(path)
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content.removeprefix("->")
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o755
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def make_archive(path: Path, layers: list[Layer], config: dict | None = None) -> Path:
    """A docker-archive as `buildah push docker-archive:` writes it."""
    config = config or {"config": {"Entrypoint": ["dra-driver"], "Cmd": ["run"]}}
    members = {"config.json": json.dumps(config).encode()}
    names = []
    for n, files in enumerate(layers):
        names.append(f"layer{n}.tar")
        members[names[-1]] = _layer_tar(files)
    manifest = [{"Config": "config.json", "RepoTags": ["x:dev"], "Layers": names}]
    members["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def pem(der: bytes) -> bytes:
    body = base64.b64encode(der)
    lines = b"\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return b"-----BEGIN CERTIFICATE-----\n" + lines + b"\n-----END CERTIFICATE-----\n"


DEBIAN_CA = os.urandom(400)
PROXY_CA = os.urandom(400)
BUNDLE_DEBIAN = pem(DEBIAN_CA)
BUNDLE_HOST = pem(DEBIAN_CA) + pem(PROXY_CA)
BASE: Layer = {
    "etc": None,
    "etc/ssl/certs/ca-certificates.crt": BUNDLE_DEBIAN,
    "usr/share/base-files/dot.bashrc": b"# bashrc\n",
    "root": None,
    "root/.bashrc": b"# bashrc\n",
    "usr/bin/python3.13": b"\x7fELF",
    "usr/bin/python3": "->python3.13",
    "usr/bin/python": "->/usr/bin/python3",
}


def files_of(tmp_path: Path, *upper: Layer) -> list[tuple[imagearchive.Entry, bytes | None]]:
    image = imagearchive.read(make_archive(tmp_path / "image.tar", [BASE, *upper]))
    return list(imagearchive.entries(image, content=True))


def ca_markers() -> list[Marker]:
    local = imageleaks.local_certificates(BUNDLE_HOST, [BUNDLE_DEBIAN])
    return [
        *imageleaks.certificate_markers(local),
        Marker("the host's CA bundle", BUNDLE_HOST, frozenset({BUNDLE_DEBIAN})),
    ]


def test_reader_merges_layers_whiteouts_and_symlinks(tmp_path):
    upper: Layer = {"opt/venv/bin/python": "->/usr/bin/python", "etc/ssl/.wh.certs": b""}
    image = imagearchive.read(make_archive(tmp_path / "i.tar", [BASE, upper]))
    assert image.repo_tags == ["x:dev"] and image.layers == ["layer0.tar", "layer1.tar"]
    tree = imagearchive.merged(image)
    assert "etc/ssl/certs/ca-certificates.crt" not in tree  # deleted by the whiteout
    target = imagearchive.resolve(tree, "opt/venv/bin/python")
    assert target is not None and target.path == "usr/bin/python3.13"
    assert imagearchive.resolve(tree, "opt/venv/bin/missing") is None
    # ... but every layer's entries are still read: a deleted file is still published.
    paths = {e.path for e, _ in imagearchive.entries(image)}
    assert "etc/ssl/certs/ca-certificates.crt" in paths


def test_unpack_applies_whiteouts(tmp_path):
    upper: Layer = {"root/.wh..bashrc": b"", "etc/ssl/certs/.wh..wh..opq": b"", "etc/x": b"x"}
    image = imagearchive.read(make_archive(tmp_path / "i.tar", [BASE, upper]))
    dest = tmp_path / "root"
    dest.mkdir()
    imagearchive.unpack(image, dest)
    assert (dest / "usr/bin/python").is_symlink() and (dest / "etc/x").read_bytes() == b"x"
    assert not (dest / "root/.bashrc").exists()
    assert list((dest / "etc/ssl/certs").iterdir()) == []


def test_local_certificates_are_those_debian_does_not_ship():
    assert imageleaks.local_certificates(BUNDLE_HOST, [BUNDLE_DEBIAN]) == [PROXY_CA]
    assert imageleaks.local_certificates(BUNDLE_DEBIAN, [BUNDLE_DEBIAN]) == []


def test_clean_image_has_no_findings(tmp_path):
    files = files_of(tmp_path, {"opt/venv/bin/dra-driver": b"#!/opt/venv/bin/python\n"})
    assert imageleaks.content_findings(files, ca_markers()) == []
    assert imageleaks.path_findings(files) == []


@pytest.mark.parametrize(
    "leak",
    [
        {"etc/ssl/certs/ca-certificates.crt": BUNDLE_HOST},  # the build's bundle, as is
        {"opt/venv/lib/certifi/cacert.pem": b"# extra\n" + pem(PROXY_CA)},  # its CA, in PEM
        {"opt/venv/ca.der": b"x" + PROXY_CA + b"y"},  # in DER
        {"opt/venv/copy.crt": BUNDLE_HOST + b"\n"},  # the bundle, not identical to Debian's
    ],
)
def test_a_local_ca_is_found_in_any_form(tmp_path, leak):
    files = files_of(tmp_path, leak)
    (path,) = leak
    findings = imageleaks.content_findings(files, ca_markers())
    assert findings and all(f.startswith(f"layer 1: /{path} holds ") for f in findings)


def test_a_deleted_leak_is_still_a_leak(tmp_path):
    files = files_of(tmp_path, {"tmp/ca.crt": BUNDLE_HOST}, {"tmp/.wh.ca.crt": b""})
    assert imageleaks.content_findings(files, ca_markers())


def test_debians_own_bundle_is_allowed_where_it_is_identical(tmp_path):
    marker = Marker("the host's CA bundle", BUNDLE_DEBIAN, frozenset({BUNDLE_DEBIAN}))
    files = files_of(tmp_path, {"etc/other.crt": BUNDLE_DEBIAN + b"extra"})
    assert imageleaks.content_findings(files, [marker]) == [
        "layer 1: /etc/other.crt holds the host's CA bundle"
    ]


@pytest.mark.parametrize(
    "path,why",
    [
        ("etc/pip.conf", "pip configuration"),
        ("opt/venv/pip.conf", "pip configuration"),
        ("root/.config/pip/pip.conf", "pip configuration"),
        ("root/.netrc", "netrc credentials"),
        ("root/.pypirc", "package index credentials"),
        ("root/.docker/config.json", "registry credentials"),
        ("root/.cache/pip/http/x", "in a home directory"),
        ("root/.bash_history", "in a home directory"),
        ("home/builder/notes.txt", "in a home directory"),
        ("root/.ssh/id_ed25519", "ssh keys"),
        ("opt/wheels/grpcio.whl", "the host's wheel directory"),
    ],
)
def test_credentials_configuration_and_home_files_are_found(tmp_path, path, why):
    files = files_of(tmp_path, {path: b"secret"})
    findings = imageleaks.path_findings(files, {"/opt/wheels": "the host's wheel directory"})
    assert any(f.startswith(f"layer 1: /{path} ") and why in f for f in findings), findings


def test_a_changed_skeleton_file_is_found(tmp_path):
    files = files_of(tmp_path, {"root/.bashrc": b"export PIP_INDEX_URL=...\n"})
    assert imageleaks.path_findings(files) == [
        "layer 1: /root/.bashrc is in a home directory (not Debian's skeleton file)"
    ]


def test_a_secret_value_is_found_by_name_never_shown(tmp_path):
    markers = imageleaks.secret_values({"PIP_INDEX_URL": "https://u:p@index.example/simple",
                                        "HOME": "/root", "API_TOKEN": "short"})  # fmt: skip
    assert [m.name for m in markers] == ["the value of $PIP_INDEX_URL"]
    files = files_of(tmp_path, {"opt/venv/x.json": b'{"url": "https://u:p@index.example/simple"}'})
    findings = imageleaks.content_findings(files, markers)
    assert findings == ["layer 1: /opt/venv/x.json holds the value of $PIP_INDEX_URL"]
    assert "u:p@" not in findings[0]


@pytest.mark.parametrize(
    "env", ["PIP_INDEX_URL=https://x", "PIP_CERT=/ca.crt", "HTTPS_PROXY=http://p:3128",
            "SSL_CERT_FILE=/ca.crt", "REQUESTS_CA_BUNDLE=/ca.crt"],
)  # fmt: skip
def test_build_settings_in_the_config_are_found(env):
    config = {"config": {"Env": ["PATH=/usr/bin", env]}}
    assert imageleaks.config_findings(config, []) == [
        f"config: Env has {env.partition('=')[0]}, a setting of the build"
    ]
    clean = {"config": {"Env": ["PATH=/usr/bin", "PYTHONUNBUFFERED=1"]}}
    assert imageleaks.config_findings(clean, []) == []


def test_a_secret_in_the_config_history_is_found():
    config = {"history": [{"created_by": "RUN pip install --index-url https://u:p@x/"}]}
    marker = Marker("the value of $PIP_INDEX_URL", b"https://u:p@x/")
    assert imageleaks.config_findings(config, [marker]) == [
        "config: holds the value of $PIP_INDEX_URL"
    ]
