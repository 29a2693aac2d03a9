"""Files the caches and the run history write stay inside their directory: no symbolic link is followed
out of it.

A cache directory is shared (CI caches restore it, xdist workers write it, a repository may carry it), so
a link planted in it — an entry named like a cache file, or a two-letter subdirectory — must not make a
run create, append to or replace a file elsewhere. Every write checks that the file's directory resolves
inside the cache's own, and opens the file itself without following a link (``O_NOFOLLOW``); a replaced
file (``os.replace``) replaces a link at its place rather than writing through it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)  # absent on Windows, where links need privileges to plant


class LinkRefused(OSError):
    """A cache path that is, or lies under, a symbolic link leading out of the cache directory."""


def check_inside(root: Path, path: Path) -> None:
    """Raise :class:`LinkRefused` when ``path`` is a link or its directory resolves outside ``root``."""
    if path.is_symlink():
        raise LinkRefused(f"{path} is a symbolic link: not followed")
    base = os.path.realpath(root)
    parent = os.path.realpath(path.parent)
    if parent != base and not parent.startswith(base.rstrip(os.sep) + os.sep):
        raise LinkRefused(f"{path.parent} leads outside {root} (a symbolic link): not followed")


def open_inside(root: Path, path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of ``path`` (its directory made first) after :func:`check_inside`, never through a link."""
    path.parent.mkdir(parents=True, exist_ok=True)
    check_inside(root, path)
    return os.open(path, flags | NO_FOLLOW, mode)


# What a cache directory says of itself when a run creates it, as pytest's own cache does: git ignores it,
# and backup tools know it can be rebuilt (https://bford.info/cachedir/).
SUPPORTING_FILES = {
    ".gitignore": "# Created by pytest-robustexplain automatically.\n*\n",
    "CACHEDIR.TAG": "Signature: 8a477f597d28d172789f06886806bc55\n"
                    "# This file is a cache directory tag created by pytest-robustexplain.\n",
}


def make_cache_dir(directory: Path) -> None:
    """Create ``directory`` for a run's cache; when this creates it, it ignores itself in git. A directory
    that exists already is left as it is (it may be the user's, holding more than the cache)."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in SUPPORTING_FILES.items():
        try:
            fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW, 0o644)
        except OSError:
            continue  # another process wrote it first, or the directory refuses it: the cache still works
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)


def write_atomic(path: Path, text: str, *, root: Path | None = None) -> None:
    """Write ``text`` to ``path`` so that no reader ever sees a partial file; with ``root`` (the directory it
    belongs to), only inside it (:func:`check_inside`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if root is not None:
        check_inside(root, path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        for attempt in range(5):
            try:
                os.replace(tmp, path)
                return
            except PermissionError:  # Windows: the target is open in another process; try again shortly
                if attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
