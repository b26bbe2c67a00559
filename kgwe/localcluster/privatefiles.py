"""Files the local cluster writes as root, where another user might reach: only into directories no one else
can change, never through a link, and keys created exclusively with mode 0600.

Root writing into a directory another user controls (a fixed name under /tmp made first by someone else, a
`--dir` someone else owns, `$TMPDIR` or `$XDG_STATE_HOME` passed through `sudo -E`) lets that user read what
is written or, with a planted link, make root overwrite any file. So a directory root writes in must be
owned by root (this process's user) with every directory above it owned by root too, none of them a link,
and none writable by others unless sticky (as /tmp: others may then add entries but not move root's); and
each file is created with O_EXCL|O_NOFOLLOW after whatever had its name is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from kgwe.errors import KgweError

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(KgweError):
    """A directory root would write in is not root's alone."""


def _problem(path: Path, st: os.stat_result, *, last: bool) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid not in (0, os.geteuid()):
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    writable_by_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable_by_others and (last or not st.st_mode & stat.S_ISVTX):
        return f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def check_directory(path: Path, *, shared_ok: bool = False) -> None:
    """Raise UnsafePath unless `path` (absolute; it may not exist yet) and every existing directory above it
    are root's alone. `shared_ok`: `path` itself may be a sticky directory others write in (as /tmp), for a
    private directory to be made inside it."""
    if not path.is_absolute():
        raise UnsafePath(f"{path} is not an absolute path")
    here = Path("/")
    for part in path.parts[1:]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return  # made by root from here on (make_directory)
        problem = _problem(here, st, last=here == path and not shared_ok)
        if problem:
            raise UnsafePath(problem)


def make_directory(path: Path) -> Path:
    """`path` and what is missing above it, created mode 0700 after check_directory; an existing `path` of
    root's is narrowed to 0700."""
    check_directory(path)
    here = Path("/")
    for part in path.parts[1:]:
        here = here / part
        try:
            os.mkdir(here, 0o700)
        except FileExistsError:
            st = os.lstat(here)  # made meanwhile by someone else? judged again
            problem = _problem(here, st, last=here == path)
            if problem:
                raise UnsafePath(problem) from None
    os.chmod(path, 0o700, follow_symlinks=False)
    return path


def make_temporary_directory(prefix: str, base: Path | None = None) -> Path:
    """A new directory of root's alone (mkdtemp: mode 0700, a name no one could guess or take first) in
    `base` (default: the temporary directory), which must itself be safe to make one in."""
    base = (base or Path(tempfile.gettempdir())).absolute()
    check_directory(base, shared_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def create_private(path: Path, mode: int = 0o600) -> BinaryIO:
    """`path` opened for writing as a new file of `mode`, never through a link: whatever had its name
    before (a file, a planted link) is removed first, and the file is created exclusively."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return os.fdopen(os.open(path, _CREATE, mode), "wb")


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write `path` as create_private does (a key: 0600; a certificate: 0644)."""
    with create_private(path, mode) as out:
        out.write(data)


def copy_files(source: Path, target: Path) -> None:
    """Copy the regular files under `source` (links are skipped, never followed) into `target`, a directory
    made by make_directory or make_temporary_directory, each file created exclusively, mode 0600."""
    for entry in os.scandir(source):
        if entry.is_dir(follow_symlinks=False):
            sub = target / entry.name
            os.mkdir(sub, 0o700)
            copy_files(Path(entry.path), sub)
        elif entry.is_file(follow_symlinks=False):
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as src, create_private(target / entry.name) as out:
                shutil.copyfileobj(src, out)
