"""File output of the package: atomic writes, JSON-safe values, file digests, parsed inputs.

Problem
-------
Every output the package writes (fits, predictions, paper tables and numbers,
collector traces and metadata, manifests, downloads) must be either the old
file or the complete new one, never a truncated mix; an output path that is
not a regular file (a device such as ``/dev/sda``, a FIFO, a symbolic link, a
folder) must be refused rather than replaced; JSON outputs must hold only
JSON values (numpy scalars and arrays converted, NaN and infinity written as
``null``); and provenance records need the sha256 of a file's bytes.  These
were written five times with small differences; this module is the one copy.
A configuration file read in (:func:`read_parsed`) is refused with one
message, never a parser's traceback, when it is missing or malformed.

Guarantees of a write (:func:`atomic_open`)
-------------------------------------------
* the target is refused, even with ``force``, when it exists and is not a
  regular file, or when it is one of the command's inputs (same device and
  inode: the same file under any name, hard links included);
* without ``force`` the finished temporary file is *linked* to the target
  name (:func:`os.link` fails if the name exists), so two writers racing for
  one name cannot both succeed; where hard links are unsupported the name is
  reserved with ``O_CREAT | O_EXCL`` before the rename;
* the new file has the mode any other tool's output has (``0o666`` less the
  umask), or the mode of the regular file it replaces;
* an exception, Ctrl-C (SIGINT) or, inside :func:`terminate_as_interrupt`,
  SIGTERM removes the temporary file.  ``kill -9`` (SIGKILL) cannot be caught:
  it can leave a hidden ``.NAME.*.tmp`` file beside the target, which is safe
  to delete.

Standard library only at import time (``perfmodel.report.pipeline`` and
``perfmodel.report.paperio`` run without numpy); :func:`json_safe` converts numpy
and pandas values only when those libraries are already loaded.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import math
import os
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from perfmodel.errors import InputError

__all__ = [
    "Terminated",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output_path",
    "json_safe",
    "read_parsed",
    "sha256_file",
    "terminate_as_interrupt",
]

_BLOCK = 1 << 20


def _describe(mode: int) -> str:
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def _same_file(st: os.stat_result, inputs) -> str | None:
    """The first of ``inputs`` that is the file ``st`` describes (same device and inode)."""
    for src in inputs or ():
        if src is None:
            continue
        try:
            si = os.stat(src)
        except (OSError, ValueError):
            continue
        if (si.st_dev, si.st_ino) == (st.st_dev, st.st_ino):
            return str(src)
    return None


def check_output_path(path, *, force: bool = False, make_parents: bool = False,
                      inputs=()) -> Path:
    """Check that ``path`` may receive a new file; return it as a Path.

    Problem: an atomic write replaces the directory entry ``path``; that is
    right for a regular file and wrong for anything else, and an existing
    output must not be replaced by accident.

    Parameters
    ----------
    path : str or os.PathLike
    force : bool, default False
        Allow replacing an existing regular file.
    make_parents : bool, default False
        Create missing parent folders (else a missing folder is an error).
    inputs : iterable of path, optional
        The files the command reads: an output that is one of them (the same
        file under any name) is refused, even with ``force``.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    InputError
        ``path`` exists and is not a regular file (a symbolic link, even to a
        regular file, a folder, a device, a FIFO or a socket), or is one of
        ``inputs``, or exists and ``force`` is false, or its folder does not
        exist (``make_parents`` false) or is not a folder.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"an output path must be a str or path, got {type(path).__name__}")
    p = Path(path)
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"output {str(p)!r} is {_describe(st.st_mode)}, not a regular file: "
                             "refusing to replace it")
        same = _same_file(st, inputs)
        if same is not None:
            raise InputError(f"output {str(p)!r} is the input {same!r} of this command: "
                             "refusing to overwrite it, even with --force")
        if not force:
            raise InputError(f"{p} exists; pass force=True (--force) to overwrite it")
    parent = p.parent
    if make_parents:
        parent.mkdir(parents=True, exist_ok=True)
    if not parent.exists():
        raise InputError(f"folder {parent} does not exist")
    if not parent.is_dir():
        raise InputError(f"{parent} is not a folder: cannot write {p.name!r} in it")
    return p


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", *, force: bool = False, make_parents: bool = False,
                encoding: str = "utf-8", newline: str | None = "", fsync: bool = False,
                suffix: str = ".tmp", inputs=()) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success rename it onto ``path``.

    Problem: writers that stream (a CSV from pandas, a download) need a file
    handle, and the same guarantee as :func:`atomic_write_text`: ``path``
    holds the old content or the complete new one.  If the ``with`` body
    raises, the temporary file is removed and ``path`` is untouched.

    Parameters
    ----------
    path : str or os.PathLike
        Checked by :func:`check_output_path` (``force``, ``make_parents``).
    mode : {'w', 'wb'}
    encoding, newline : text-mode options of :func:`open`; the default
        ``newline=''`` writes ``'\\n'`` as it is on every platform.
    fsync : bool, default False
        Flush the file to disk before the rename (collector outputs,
        downloads).
    suffix : str
        Suffix of the temporary file (``.part`` for downloads).
    inputs : iterable of path, optional
        The command's input files; see :func:`check_output_path`.

    Yields
    ------
    file object
        The new file has the permissions a plain :func:`open` would give it
        (``0o666`` less the umask), or those of the regular file it replaces.
    """
    if mode not in ("w", "wb"):
        raise InputError(f"mode must be 'w' or 'wb', got {mode!r}")
    inputs = tuple(inputs or ())
    p = check_output_path(path, force=force, make_parents=make_parents, inputs=inputs)
    try:
        perms = stat.S_IMODE(os.stat(p).st_mode)
    except FileNotFoundError:
        perms = 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=suffix)
    except OSError as e:
        raise InputError(f"cannot write {str(p)!r}: cannot create a file in its folder "
                         f"({e.strerror or e})") from None
    try:
        kw = {} if mode == "wb" else {"encoding": encoding, "newline": newline}
        with os.fdopen(fd, mode, **kw) as fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.chmod(tmp, perms)  # mkstemp creates 0600
        # the target may have changed meanwhile
        check_output_path(p, force=force, inputs=inputs)
        if force:
            os.replace(tmp, p)
        else:
            _create_exclusive(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


_NO_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOSYS,
             getattr(errno, "ENOTSUP", errno.EPERM), getattr(errno, "EOPNOTSUPP", errno.EPERM)}


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask (read by setting and restoring it, under a lock)."""
    with _UMASK_LOCK:
        umask = os.umask(0)
        os.umask(umask)
    return umask


def _create_exclusive(tmp: str, p: Path) -> None:
    """Give the finished file ``tmp`` the name ``p``, failing if ``p`` exists.

    :func:`os.link` creates the name only if it does not exist, in one step
    (no window between a check and a rename); on file systems without hard
    links the name is reserved with ``O_CREAT | O_EXCL`` and then replaced by
    the rename.
    """
    exists = InputError(f"{p} exists (created while this output was being written); "
                        "pass force=True (--force) to overwrite it")
    try:
        os.link(tmp, p)
    except FileExistsError:
        raise exists from None
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        try:
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            raise exists from None
        os.replace(tmp, p)
        return
    os.unlink(tmp)


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM inside :func:`terminate_as_interrupt`.

    A ``BaseException`` like :class:`KeyboardInterrupt`, so that the clean-up
    of :func:`atomic_open` (and every ``finally``) runs as it does on Ctrl-C.
    """

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` instead of killing the process.

    Problem: the default action of SIGTERM ends the process at once, leaving
    a write's temporary file behind; raising an exception instead lets the
    write remove it.  Only the main thread can install a handler; elsewhere
    the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise Terminated(signum)

    old = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def atomic_write_text(path, text: str, *, force: bool = False, make_parents: bool = False,
                      encoding: str = "utf-8", fsync: bool = False, inputs=()) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    Problem: a failed or refused write must never truncate what was there.
    Refuses to replace an existing file unless ``force``, and refuses any
    ``path`` that is not a regular file (:func:`check_output_path`).  The
    text is written as it is (no newline translation).

    Parameters
    ----------
    path : str or os.PathLike
    text : str
    force, make_parents : see :func:`check_output_path`
    encoding : str, default 'utf-8'
    fsync : bool, default False
        Flush to disk before the rename.
    inputs : iterable of path, optional
        The command's input files, never overwritten (:func:`check_output_path`).

    Returns
    -------
    pathlib.Path
    """
    if not isinstance(text, str):
        raise InputError(f"text must be a str, got {type(text).__name__}")
    return atomic_write_bytes(path, text.encode(encoding), force=force,
                              make_parents=make_parents, fsync=fsync, inputs=inputs)


def atomic_write_bytes(path, data: bytes, *, force: bool = False, make_parents: bool = False,
                       fsync: bool = False, inputs=()) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    As :func:`atomic_write_text`, for bytes.

    Returns
    -------
    pathlib.Path
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InputError(f"data must be bytes, got {type(data).__name__}")
    with atomic_open(path, "wb", force=force, make_parents=make_parents, fsync=fsync,
                     inputs=inputs) as fh:
        fh.write(data)
    return Path(path)


def json_safe(obj, *, fallback: Callable[[Any], Any] | None = None):
    """Return ``obj`` with every value a JSON value (for ``json.dumps(..., allow_nan=False)``).

    Problem: results hold numpy scalars and arrays, NaN for "not available"
    and paths; JSON has none of them.  Converts recursively:

    * mappings -> dict (keys kept), lists, tuples, sets and numpy arrays -> list;
    * ``bool`` and numpy booleans -> bool; integers and numpy integers -> int;
    * floats and numpy floats -> float, or None when NaN or infinite;
    * ``pathlib.Path`` -> str; ``None``, ``pandas.NA`` and ``pandas.NaT`` -> None;
    * anything else: ``fallback(value)`` when given (e.g. ``str``), else the
      value unchanged (``json.dumps`` then names its type).

    Parameters
    ----------
    obj : any
    fallback : callable, optional

    Returns
    -------
    A structure of dict, list, str, int, float, bool and None.

    Examples
    --------
    >>> json_safe({"a": (1, float("nan")), "b": {2.5, 2.5}})
    {'a': [1, None], 'b': [2.5]}
    """
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: json_safe(v, fallback=fallback) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v, fallback=fallback) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(obj, np.ndarray):
            return [json_safe(v, fallback=fallback) for v in obj.tolist()]
        if isinstance(obj, np.bool_):
            return bool(obj)
        if isinstance(obj, np.integer):
            return int(obj)
        if isinstance(obj, np.floating):
            v = float(obj)
            return v if math.isfinite(v) else None
    pd = sys.modules.get("pandas")
    if pd is not None and (obj is pd.NA or obj is pd.NaT):
        return None
    return fallback(obj) if fallback is not None else obj


def sha256_file(path) -> str:
    """Hex sha256 digest of a file's bytes, read in 1 MiB blocks.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    str
        64 lowercase hex digits.
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


def read_parsed(path, parse: Callable[[str], Any], errors, *, missing: str, invalid: str) -> Any:
    """Parse the text of an input file, or raise InputError with the caller's message.

    Problem: a reader of a configuration file (a model config's JSON, a
    profile bundle's YAML) must refuse a missing file and a malformed one in
    one line each, naming the file, never with the parser's traceback.

    Parameters
    ----------
    path : str or os.PathLike
    parse : callable
        Text -> value (e.g. :func:`json.loads`, :func:`yaml.safe_load`).
    errors : exception type or tuple of types
        What ``parse`` raises on malformed text (other errors propagate).
    missing : str
        The message when ``path`` is not a regular file.
    invalid : str
        The message when ``parse`` fails; ``" (<the parser's message>)"`` is appended.

    Returns
    -------
    What ``parse`` returns.

    Raises
    ------
    InputError
        ``missing`` or ``invalid``.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(missing)
    try:
        return parse(p.read_text())
    except errors as e:
        raise InputError(f"{invalid} ({e})") from None
