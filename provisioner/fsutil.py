"""Files and folders the provisioner creates hold run details (and, briefly, secrets): the
ledger, the rollout lock, reports, the runner's private data folder, the debug log.

They are created owner-only: files 0600, folders 0700, by ``os.open``/``mkdir`` with that mode,
so the operator's umask can only narrow them further; nothing here ever widens a mode.
Shared helpers so every writer (reports, ledger, lock, runner) does the same.

Symlinks are never replaced (issue 17: ``verify --junit /dev/stderr`` as root replaced the
``/dev/stderr`` link with a regular file). :func:`write_atomic` follows the path to what it
names and:

* a regular file, or a new file in an existing folder: written atomically there, in the
  target's own folder (the links on the way are kept);
* a character device or a FIFO (``/dev/null``, a terminal, a pipe) or a file descriptor's
  name (``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``): with
  ``special_ok`` (reports), written directly: opened for appending, never created, truncated
  or re-moded (not atomic: a stream has no "old version"); without it, refused;
* anything else (a directory, a socket, a block device): refused;
* a symlink in a sticky, world-writable folder (``/tmp``) owned by neither the caller nor the
  folder's owner: refused, the rule of Linux's ``fs.protected_symlinks``, which a rename over
  the resolved target would otherwise get around.

Refusals raise :class:`SpecialFileError` (an ``OSError``).

The folders the provisioner writes its own state into (the ledger's folder, the runner folder
beside it, the project state folder) go through :func:`owned_dir` first: a folder another
local user owns or can write is refused (:class:`UnsafeFolderError`) before anything is
written in it, as OpenSSH's ``StrictModes`` refuses such a ``~/.ssh`` (issue 45: a ``runner``
folder made first by another user let them swap the gate script the rollout runs as root).
Files in those folders are opened with ``O_NOFOLLOW`` (:func:`open_private`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def project_state_dir() -> Path:
    """The provisioner's own state folder: ``$XDG_STATE_HOME/gdsfleet`` (default
    ``~/.local/state/gdsfleet``), home of the default ledger, the project-managed known_hosts
    and the debug log."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "gdsfleet"


def is_project_state_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is :func:`project_state_dir` (not a folder the operator named)."""
    mine = project_state_dir()
    try:
        return os.path.samefile(path, mine)
    except OSError:
        return os.path.abspath(path) == os.path.abspath(mine)


def narrow_owned(path: str | os.PathLike[str]) -> bool:
    """Take the group/other bits off ``path`` when it is the caller's own and not a symlink
    (never adding a bit); True when its mode changed."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid() or not mode & 0o077:
        return False
    os.chmod(path, mode & 0o700)
    return True


def private_dir(path: str | os.PathLike[str], *, narrow: bool = False) -> Path:
    """Create ``path`` (and missing parents) 0700; ``narrow``: also take group/other bits off
    an existing folder that the provisioner owns (e.g. ``runner/``), never adding any.

    The provisioner's own state folder (:func:`project_state_dir`) is always narrowed: the
    docs promise it is 0700, and an older version created it 0755. A folder the operator
    named (``--ledger ~/ledger.sqlite``: their home) is never chmod'ed; only what this
    creates is 0700."""
    p = Path(path)
    narrow = narrow or is_project_state_dir(p)
    missing = []
    cur = p
    while not cur.exists() and cur != cur.parent:
        missing.append(cur)
        cur = cur.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=DIR_MODE)
    if narrow and not missing:
        narrow_owned(p)
    return p


class UnsafeFolderError(OSError):
    """A folder :func:`owned_dir` will not write in; the message names it and the fix."""


def _who(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name}, uid {uid}"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _unsafe(path: Path, st: os.stat_result, *, mine: bool) -> str | None:
    """Why ``path`` (lstat ``st``) is not safe to write in (``mine``: the folder itself, which
    must be the caller's; else a folder above it, which may also be root's and, with the
    sticky bit, writable by others: no one can then rename what is not theirs); None if safe.
    The fix it names never trusts what another user made (no chown of a planted folder)."""
    me = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    elsewhere = "or choose a --ledger in a folder of your own"
    if stat.S_ISLNK(st.st_mode):
        return (f"{path} is a symbolic link (to {os.readlink(path)}), not followed: remove "
                f"the link, {elsewhere}")
    if st.st_uid != me and (mine or st.st_uid != 0):
        whose = "not by you" if mine else "neither by you nor by root"
        return (f"{path} is owned by {_who(st.st_uid)}, {whose} ({_who(me)}): that user can "
                f"put anything in it; choose a --ledger in a folder of your own (or, once you "
                f"have checked what is in it, remove it or make it yours)")
    if mode & 0o022 and (mine or not mode & stat.S_ISVTX):
        fix = (f"make a folder of your own in it (mkdir -m 0700 {path / 'gdsfleet'}) and "
               f"keep the ledger there" if mode & stat.S_ISVTX
               else f"chmod go-w {path}, {elsewhere}")
        return (f"{path} is writable by group or others (mode {mode:04o}): another user can "
                f"create or swap files in it; {fix}")
    return None


def owned_dir(path: str | os.PathLike[str], *, follow: bool = True) -> Path:
    """The folder ``path`` (links resolved), checked and created as OpenSSH's ``StrictModes``
    checks ``~/.ssh``: it must be a real folder owned by the caller that neither group nor
    others can write; every folder above it must be the caller's or root's, and writable by
    others only with the sticky bit (``/tmp``). Missing folders are created 0700, each
    checked once made. Raises :class:`UnsafeFolderError` naming the folder and the fix,
    before anything is written in it (``NotADirectoryError`` for a file where a folder
    should be). A folder that passes is returned as it is (never
    chmod'ed: :func:`private_dir` narrows the provisioner's own). ``follow=False``: the
    last part is a name the provisioner chose (``runner``): a link there is refused."""
    p = Path(os.path.abspath(Path(path).expanduser()))
    real = Path(os.path.realpath(p)) if follow else Path(os.path.realpath(p.parent)) / p.name
    chain = [*reversed(real.parents), real]
    for i, cur in enumerate(chain):
        mine = i == len(chain) - 1
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked the same
                os.mkdir(cur, DIR_MODE)
            st = os.lstat(cur)
            mine = True  # a folder it made (or found made just now) must be the caller's
        if not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            # not a question of trust: the caller's error for a path that cannot be used
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(cur))
        why = _unsafe(cur, st, mine=mine)
        if why is not None:
            raise UnsafeFolderError(errno.EPERM, why, str(cur))
    return real


def create_private(path: str | os.PathLike[str]) -> bool:
    """Create an empty 0600 file unless it exists; True when it was created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def open_private(path: str | os.PathLike[str], flags: int = os.O_WRONLY | os.O_APPEND, *,
                 follow: bool = False) -> int:
    """``os.open`` that creates a missing file 0600 (umask-narrowed); returns the fd. A link
    is not followed (``O_NOFOLLOW``: ``ELOOP``) unless ``follow`` (a path the operator named,
    ``--events-log``, ``$GDSFLEET_DEBUG_LOG``)."""
    nofollow = 0 if follow else os.O_NOFOLLOW
    return os.open(path, flags | os.O_CREAT | nofollow, FILE_MODE)


def append_private(path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` to a file created 0600 when missing."""
    fd = open_private(path)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def write_private(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``path`` atomically (temp file in the same folder, fsync, rename), mode 0600
    narrowed by the umask; a missing folder is created 0700."""
    write_atomic(path, data, mode=FILE_MODE)


class SpecialFileError(OSError):
    """A path :func:`write_atomic` will not write (see the module's docstring)."""


# a file descriptor's own name: the kernel's "magic" link does the right thing, readlink
# gives "pipe:[123]" or the file it was opened on, which must not be renamed over
_FD_PATH = re.compile(r"^/(proc/(self|thread-self|[0-9]+)|dev)/fd/[0-9]+$")
_FD_NAMES = ("/dev/stdin", "/dev/stdout", "/dev/stderr")


def resolve_output(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """Where a write to ``path`` lands: (the final, non-link path, True when it names a file
    descriptor). Follows the links one by one; refuses one that ``fs.protected_symlinks``
    would not follow."""
    p = Path(os.path.abspath(Path(path).expanduser()))
    for _ in range(40):
        if str(p) in _FD_NAMES or _FD_PATH.match(str(p)):
            return p, True
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            break
        if not stat.S_ISLNK(st.st_mode):
            break
        _check_protected_link(p, st)
        p = Path(os.path.normpath(Path(os.path.realpath(p.parent)) / os.readlink(p)))
    else:
        raise SpecialFileError(errno.ELOOP, "too many levels of symbolic links", str(path))
    # the folder, with its own links resolved (the rename happens in the real folder)
    with contextlib.suppress(OSError):
        return Path(os.path.realpath(p.parent)) / p.name, False
    return p, False


def _check_protected_link(link: Path, st: os.stat_result) -> None:
    try:
        dst = os.stat(link.parent)
    except OSError:
        return
    sticky_public = dst.st_mode & stat.S_ISVTX and dst.st_mode & stat.S_IWOTH
    if sticky_public and st.st_uid not in (os.geteuid(), dst.st_uid):
        raise SpecialFileError(
            errno.EACCES, f"a symlink owned by uid {st.st_uid} in the sticky, world-writable "
            f"folder {link.parent}: not followed (as fs.protected_symlinks would not); give the "
            f"real path", str(link))


def _write_stream(path: Path, data: bytes) -> None:
    """Write a character device, FIFO or file descriptor's name: appended, not created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads, a socket
            raise SpecialFileError(errno.ENXIO, "cannot be opened for writing (a FIFO with no "
                                   "reader, or a socket)", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)
                or stat.S_ISREG(st.st_mode) or stat.S_ISSOCK(st.st_mode)):
            raise SpecialFileError(errno.EINVAL, "not a stream or file", str(path))
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *,
                 mode: int = FILE_MODE, special_ok: bool = False) -> None:
    """Write ``path`` atomically: a temp file in the target's own folder (the rename never
    crosses a filesystem), ``mode`` narrowed by the umask, fsync, rename. A reader sees the old
    file or the new one, never half of one. A missing folder is created 0700 for a private
    ``mode``, or as a plain ``mkdir`` would for a file others read.

    A symlink is followed, never replaced; a device, FIFO or file descriptor's name is written
    directly with ``special_ok`` and refused otherwise (module docstring)."""
    blob = data.encode("utf-8") if isinstance(data, str) else data
    target, is_fd = resolve_output(path)
    if is_fd:
        if not special_ok:
            raise SpecialFileError(errno.EINVAL, "names a file descriptor, not a file",
                                   str(path))
        _write_stream(target, blob)
        return
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(target)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            if not special_ok:
                raise SpecialFileError(errno.EINVAL, "is a device or FIFO, not a file",
                                       str(path))
            _write_stream(target, blob)
            return
        if not stat.S_ISREG(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise SpecialFileError(errno.EINVAL, f"is {what}", str(path))
    if mode & 0o077:  # a file others read (the Prometheus textfile): its folder must be too
        target.parent.mkdir(parents=True, exist_ok=True)
    else:
        private_dir(target.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    try:
        os.fchmod(fd, mode & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def current_umask() -> int:
    """The process umask, read without changing it where /proc says it."""
    with contextlib.suppress(OSError, ValueError), \
            open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    old = os.umask(0o077)
    os.umask(old)
    return old


__all__ = ["DIR_MODE", "FILE_MODE", "SpecialFileError", "UnsafeFolderError", "append_private",
           "create_private", "current_umask", "is_project_state_dir", "narrow_owned",
           "open_private", "owned_dir", "private_dir", "project_state_dir", "resolve_output",
           "write_atomic", "write_private"]
