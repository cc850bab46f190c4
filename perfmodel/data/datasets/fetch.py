"""Resolving a registry name to a verified local file: mirror -> cache -> download."""
from __future__ import annotations

import hashlib
import http.client
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from perfmodel._io import atomic_open, sha256_file
from perfmodel.data.datasets.registry import (
    ENV_HOME,
    ENV_MIRROR,
    ENV_OFFLINE,
    Dataset,
    get_dataset,
)
from perfmodel.errors import ChecksumError, DataUnavailableError, InputError

log = logging.getLogger(__name__)

_TIMEOUT_S = 60
_CHUNK = 1 << 16


# ---------------------------------------------------------------------------
# fetch: mirror -> cache -> download
# ---------------------------------------------------------------------------


def data_home() -> Path:
    """The download cache: ``$PERFMODEL_DATA_HOME``, else ``$XDG_CACHE_HOME/perfmodel``,
    else ``~/.cache/perfmodel``."""
    env = os.environ.get(ENV_HOME)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "perfmodel"


def _checksum_message(ds: Dataset, where: str, actual: str, extra: str = "") -> str:
    return (f"dataset {ds.name!r}: {where} has sha256 {actual}, expected {ds.sha256}"
            f"{extra}")


def _download(url: str, dest: Path, ds: Dataset) -> Path:
    """Stream ``url`` into a temporary file beside ``dest``; verify; rename atomically."""
    h = hashlib.sha256()
    req = urllib.request.Request(url, headers={"User-Agent": "perfmodel-datasets"})
    # a failed or unverified download leaves dest as it was (and no .part file)
    with atomic_open(dest, "wb", force=True, make_parents=True, fsync=True, suffix=".part") as out, \
            urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp:
        while chunk := resp.read(_CHUNK):
            h.update(chunk)
            out.write(chunk)
        actual = h.hexdigest()
        if actual != ds.sha256:
            raise ChecksumError(_checksum_message(
                ds, f"the download from {url}", actual, "; the downloaded file was not kept"))
    return dest


def fetch(name: str, *, download: bool = True) -> Path:
    """Local path of registered dataset ``name``: mirror, else cache, else download.

    Parameters
    ----------
    name : registry name, see :func:`list_datasets`
    download : allow step 3 (also disabled by ``PERFMODEL_OFFLINE=1``)

    Returns
    -------
    pathlib.Path of a file whose sha256 equals the registry's.

    Raises
    ------
    ChecksumError
        The mirror file, or every downloaded copy, has another digest.
    DataUnavailableError
        No mirror copy, no cached copy and no successful download.
    """
    ds = get_dataset(name)
    tried = []
    mirror = os.environ.get(ENV_MIRROR)
    if mirror:
        p = Path(mirror).expanduser() / ds.path
        if p.is_file():
            actual = sha256_file(p)
            if actual != ds.sha256:
                raise ChecksumError(_checksum_message(
                    ds, f"the mirror file {p}", actual,
                    f" (check {ENV_MIRROR}={mirror}; the mirror is left untouched)"))
            return p
        tried.append(f"no file {p} in the mirror {ENV_MIRROR}={mirror}")
    else:
        tried.append(f"{ENV_MIRROR} is not set")
    cached = data_home() / ds.path
    if cached.is_file():
        actual = sha256_file(cached)
        if actual == ds.sha256:
            return cached
        log.warning("%s", _checksum_message(ds, f"the cached file {cached}", actual,
                                            "; removing it and fetching again"))
        cached.unlink()
        tried.append(f"cached copy {cached} had sha256 {actual} (removed)")
    else:
        tried.append(f"no cached copy {cached}")
    offline = os.environ.get(ENV_OFFLINE, "").strip().lower() in ("1", "true", "yes")
    mismatch = None
    if download and not offline:
        for url in ds.urls:
            try:
                return _download(url, cached, ds)
            except ChecksumError as e:
                mismatch = e
                tried.append(str(e))
            except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError,
                    ValueError) as e:
                tried.append(f"download {url} failed: {e}")
    else:
        tried.append("downloads disabled" + (f" ({ENV_OFFLINE}=1)" if offline else ""))
    if mismatch is not None:
        raise mismatch
    raise DataUnavailableError(
        f"dataset {ds.name!r} ({ds.path}) is unavailable: " + "; ".join(tried) + ". "
        f"Set {ENV_MIRROR} to a folder laid out like shared/data/external "
        f"(e.g. export {ENV_MIRROR}=/path/to/shared/data/external, holding {ds.path}), "
        f"or connect to the network, or put the file at {cached}.")


def _read_csv(name: str, **kw) -> pd.DataFrame:
    path = fetch(name)
    df = pd.read_csv(path, **kw)
    df.attrs["source"] = name
    df.attrs["sha256"] = get_dataset(name).sha256
    return df


def _require_columns(df: pd.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputError(f"{what}: missing columns {missing} (has {list(df.columns)})")


def _ones(n: int) -> str:
    return ";".join(["1"] * int(n))


def _repeat(v: int, n: int) -> str:
    return ";".join([str(int(v))] * int(n))
