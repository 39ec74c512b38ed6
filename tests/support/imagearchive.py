"""Reading an image archive as `buildah push docker-archive:` and `docker save` write it:
`manifest.json` names the image's config (a JSON file) and its layers (tar files), lowest
first, each a member of the archive. Nothing is unpacked to read it: layers are streamed.

Layers are read as they are, every entry of every layer, including what a later layer
deletes (a whiteout hides a file from the running container, not from whoever downloads
the image): `entries()`. `merged()` is the file system a container sees."""

from __future__ import annotations

import copy
import json
import posixpath
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class Entry:
    """One entry of one layer: its normalized path (no leading `/` or `./`)."""

    layer: int
    path: str
    info: tarfile.TarInfo


@dataclass(frozen=True)
class ImageArchive:
    path: Path
    repo_tags: list[str]
    config: dict[str, Any]
    layers: list[str]  # archive members, lowest layer first

    @property
    def env(self) -> dict[str, str]:
        pairs = (e.partition("=") for e in self.config.get("config", {}).get("Env") or [])
        return {k: v for k, _, v in pairs}


def normalize(name: str) -> str:
    path = posixpath.normpath("/" + name).lstrip("/")
    return "" if path == "." else path


def read(path: Path) -> ImageArchive:
    with tarfile.open(path) as outer:
        manifest = _json(outer, "manifest.json")
        if not isinstance(manifest, list) or len(manifest) != 1:
            raise ValueError(f"{path}: manifest.json must describe exactly one image")
        (image,) = manifest
        return ImageArchive(
            path=path,
            repo_tags=list(image.get("RepoTags") or []),
            config=_json(outer, image["Config"]),
            layers=list(image["Layers"]),
        )


def _json(outer: tarfile.TarFile, member: str) -> Any:
    f = outer.extractfile(_member(outer, member))
    if f is None:
        raise ValueError(f"{member} is not a file")
    return json.load(f)


def _member(outer: tarfile.TarFile, name: str) -> tarfile.TarInfo:
    """The member, following the archive's own symlinks (docker-archive's `<id>/layer.tar`)."""
    info = outer.getmember(name)
    for _ in range(8):
        if not info.issym():
            return info
        name = posixpath.normpath(posixpath.join(posixpath.dirname(name), info.linkname))
        info = outer.getmember(name)
    raise ValueError(f"{name}: too many symlinks")


def layers(image: ImageArchive) -> Iterator[tuple[int, tarfile.TarFile]]:
    """Each layer as a tar, lowest first (read from inside the archive, not unpacked)."""
    with tarfile.open(image.path) as outer:
        for index, name in enumerate(image.layers):
            f = outer.extractfile(_member(outer, name))
            if f is None:
                raise ValueError(f"{image.path}: layer {name} is not a file")
            with tarfile.open(fileobj=f, mode="r:*") as layer:
                yield index, layer


def entries(image: ImageArchive, content: bool = False) -> Iterator[tuple[Entry, bytes | None]]:
    """Every entry of every layer, with a regular file's bytes when `content` is set."""
    for index, layer in layers(image):
        for info in layer:
            data = None
            if content and info.isreg():
                f = layer.extractfile(info)
                data = f.read() if f is not None else b""
            yield Entry(index, normalize(info.name), info), data


def whiteouts(members: list[tarfile.TarInfo]) -> tuple[list[str], list[str]]:
    """What a layer deletes from the layers below: (paths, directories emptied)."""
    gone: list[str] = []
    opaque: list[str] = []
    for info in members:
        parent, base = posixpath.split(normalize(info.name))
        if base == OPAQUE:
            opaque.append(parent)
        elif base.startswith(WHITEOUT):
            gone.append(posixpath.join(parent, base[len(WHITEOUT) :]))
    return gone, opaque


def _under(path: str, top: str) -> bool:
    return top == "" or path == top or path.startswith(top + "/")


def merged(image: ImageArchive) -> dict[str, Entry]:
    """The file system a container of the image sees: upper layers win, whiteouts delete."""
    tree: dict[str, Entry] = {}
    for index, layer in layers(image):
        members = layer.getmembers()
        gone, opaque = whiteouts(members)
        for path in list(tree):
            if any(_under(path, g) for g in gone) or any(
                _under(path, o) and path != o for o in opaque
            ):
                del tree[path]
        for info in members:
            path = normalize(info.name)
            if path and not posixpath.basename(path).startswith(WHITEOUT):
                tree[path] = Entry(index, path, info)
    return tree


def _parts(path: str) -> list[str]:
    return [p for p in normalize(path).split("/") if p]


def resolve(tree: dict[str, Entry], path: str) -> Entry | None:
    """The entry `path` names in the merged tree, following symlinks as the image's root would."""
    parts = _parts(path)
    done: list[str] = []
    for _ in range(256):
        if not parts:
            return tree.get("/".join(done)) if done else None
        done.append(parts.pop(0))
        entry = tree.get("/".join(done))
        if entry is None and not parts:
            return None
        if entry is not None and entry.info.issym():
            target = entry.info.linkname
            base = "" if target.startswith("/") else "/".join(done[:-1])
            parts = _parts(posixpath.join("/" + base, target)) + parts
            done = []
    return None


# Python 3.11.4+ checks each member (the "tar" filter: no absolute names, nothing out of
# `dest`); Debian 12's 3.11.2 has no filters, and there each member is extracted under
# its `normalize`d name, which stays inside `dest`.
_TAR_FILTER: dict[str, str] = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}


def unpack(image: ImageArchive, dest: Path) -> None:
    """The merged file system into `dest` (as root: owners and modes kept)."""
    for _, layer in layers(image):
        members = layer.getmembers()
        gone, opaque = whiteouts(members)
        for path in gone:
            _remove(dest / path)
        for path in opaque:
            if (dest / path).is_dir():
                for child in (dest / path).iterdir():
                    _remove(child)
        for info in members:
            path = normalize(info.name)
            if not path or posixpath.basename(path).startswith(WHITEOUT):
                continue
            target = dest / path
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                target.unlink()
            member = copy.copy(info)
            member.name = path
            layer.extract(member, dest, **_TAR_FILTER)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        for child in path.iterdir():
            _remove(child)
        path.rmdir()
