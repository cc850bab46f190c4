"""File output of the package: atomic writes, JSON-safe values, file digests.

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

Standard library only at import time (``perfmodel.report.pipeline`` and
``perfmodel.report.paperio`` run without numpy); :func:`json_safe` converts numpy
and pandas values only when those libraries are already loaded.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from perfmodel.errors import InputError

__all__ = [
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output_path",
    "json_safe",
    "sha256_file",
]

_BLOCK = 1 << 20


def _describe(mode: int) -> str:
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def check_output_path(path, *, force: bool = False, make_parents: bool = False) -> Path:
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

    Returns
    -------
    pathlib.Path

    Raises
    ------
    InputError
        ``path`` exists and is not a regular file (a symbolic link, even to a
        regular file, a folder, a device, a FIFO or a socket), or exists and
        ``force`` is false, or its folder does not exist (``make_parents``
        false) or is not a folder.
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
                suffix: str = ".tmp") -> Iterator[IO[Any]]:
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

    Yields
    ------
    file object
        The new file has the permissions a plain :func:`open` would give it
        (``0o666`` less the umask), or those of the regular file it replaces.
    """
    if mode not in ("w", "wb"):
        raise InputError(f"mode must be 'w' or 'wb', got {mode!r}")
    p = check_output_path(path, force=force, make_parents=make_parents)
    try:
        perms = stat.S_IMODE(os.stat(p).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        perms = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=suffix)
    try:
        kw = {} if mode == "wb" else {"encoding": encoding, "newline": newline}
        with os.fdopen(fd, mode, **kw) as fh:
            yield fh
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.chmod(tmp, perms)  # mkstemp creates 0600
        check_output_path(p, force=force)  # the target may have changed meanwhile
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path, text: str, *, force: bool = False, make_parents: bool = False,
                      encoding: str = "utf-8", fsync: bool = False) -> Path:
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

    Returns
    -------
    pathlib.Path
    """
    if not isinstance(text, str):
        raise InputError(f"text must be a str, got {type(text).__name__}")
    return atomic_write_bytes(path, text.encode(encoding), force=force,
                              make_parents=make_parents, fsync=fsync)


def atomic_write_bytes(path, data: bytes, *, force: bool = False, make_parents: bool = False,
                       fsync: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    As :func:`atomic_write_text`, for bytes.

    Returns
    -------
    pathlib.Path
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InputError(f"data must be bytes, got {type(data).__name__}")
    with atomic_open(path, "wb", force=force, make_parents=make_parents, fsync=fsync) as fh:
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
