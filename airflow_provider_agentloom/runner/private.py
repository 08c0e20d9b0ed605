"""Private homes: the folders of ``agentloom run`` and ``serve`` are 0700 and their files 0600.

A home holds every run's ``conf`` (values typed into ``redact: true`` form fields included) in its
database and task logs, the JWT secret and the login. Another local user must read none of it:

- :func:`ensure_private_home` makes the home (and each folder it has to create on the way) 0700,
  refuses a folder that another user owns, and tightens a home an older version made with the
  umask (0755 folders, 0644 files) the first time it is used again;
- the home's own files are created 0600 (:func:`open_private`, :func:`write_atomically`), and the
  processes that write into a home (the runner's supervisors and Execution API server, serve's
  Airflow components) run with :data:`PRIVATE_UMASK`, so what Airflow and SQLite create there is
  private too (SQLite gives a database's ``-wal``/``-shm``/``-journal`` its database's mode).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

from airflow_provider_agentloom.exceptions import PrivateHomeError

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
"""The umask of every process that writes into a home: no bit for the group or other users."""

FOLDER_MODE = 0o700
FILE_MODE = 0o600
_OTHERS = 0o077


def make_private_dirs(folder: Path) -> None:
    """Create ``folder`` and each missing parent 0700 (``Path.mkdir(parents=True)`` would give the
    parents the umask's mode); folders that already exist are left as they are."""
    missing: list[Path] = []
    current = folder
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            path.mkdir(mode=FOLDER_MODE)
            os.chmod(path, FOLDER_MODE)  # in case the umask took the owner's bits


def ensure_private_home(root: Path) -> None:
    """Make ``root`` a private home folder: created 0700, this user's own, nothing in it for others.

    :raises PrivateHomeError: ``root`` belongs to another user, or cannot be made.
    """
    try:
        make_private_dirs(root)
        info = os.stat(root)
    except OSError as exc:
        raise PrivateHomeError(
            f"cannot make the agentloom home {root}: {exc.strerror}; choose a folder of your own "
            "(--home DIR or AGENTLOOM_HOME)"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise PrivateHomeError(f"the agentloom home {root} is not a folder; choose another (--home DIR)")
    if info.st_uid != os.geteuid():
        raise PrivateHomeError(
            f"the agentloom home {root} belongs to another user (uid {info.st_uid}, you are uid "
            f"{os.geteuid()}); a home holds your runs, their input and logs, so agentloom never uses "
            "another user's: choose a folder of your own (--home DIR or AGENTLOOM_HOME)"
        )
    if stat.S_IMODE(info.st_mode) & _OTHERS:
        tighten(root)


def tighten(root: Path) -> None:
    """Take every group and other bit off ``root`` and everything in it (a home made by an older
    version with the umask's 0755/0644). Symbolic links are not followed; what cannot be changed
    (a file of another user, which only root could have put there) is left as it is."""
    log.debug("Making the home %s private", root)
    _strip_others(root)
    for folder, folders, files in os.walk(root):
        for name in (*folders, *files):
            _strip_others(Path(folder) / name)


def _strip_others(path: Path) -> None:
    try:
        info = os.lstat(path)
        if not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) & _OTHERS:
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~_OTHERS)
    except OSError:
        pass


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """``os.open`` a home file, created 0600; an existing file is made 0600 too (from an older version)."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & _OTHERS:
            os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_atomically(path: Path, text: str, *, mode: int = FILE_MODE, replace: bool = True) -> None:
    """Write ``path`` so a reader never sees it half-written (with ``replace=False``, the first
    of several concurrent writers wins). Private (0600) unless ``mode`` says otherwise."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()  # left by a process of the same pid that died: it would keep its mode
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    try:
        if replace:
            os.replace(temporary, path)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
