"""Tests of perfmodel._io: atomic writes, JSON-safe values, file digests, parsed inputs."""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel._io import (
    atomic_open,
    atomic_write_bytes,
    atomic_write_text,
    check_output_path,
    json_safe,
    read_parsed,
    sha256_file,
)
from perfmodel.errors import InputError


def _leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


# ---------------------------------------------------------------------------
# atomic writes
# ---------------------------------------------------------------------------

def test_write_new_file_and_refuse_to_overwrite_without_force(tmp_path):
    p = tmp_path / "out.txt"
    assert atomic_write_text(p, "one\n") == p
    assert p.read_bytes() == b"one\n"
    with pytest.raises(InputError, match="exists; pass force=True"):
        atomic_write_text(p, "two\n")
    assert p.read_text() == "one\n"
    atomic_write_text(p, "two\r\n", force=True)
    assert p.read_bytes() == b"two\r\n"  # written as it is, no newline translation
    assert _leftovers(tmp_path, {"out.txt"}) == []


def test_bytes_encoding_and_missing_folder(tmp_path):
    atomic_write_bytes(tmp_path / "b.bin", b"\x00\xff")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    atomic_write_text(tmp_path / "u.txt", "\u00b5s")
    assert (tmp_path / "u.txt").read_bytes() == "\u00b5s".encode()
    with pytest.raises(InputError, match="folder .* does not exist"):
        atomic_write_text(tmp_path / "no" / "x.txt", "x")
    atomic_write_text(tmp_path / "no" / "x.txt", "x", make_parents=True)
    assert (tmp_path / "no" / "x.txt").read_text() == "x"
    with pytest.raises(InputError, match="text must be a str"):
        atomic_write_text(tmp_path / "t.txt", b"x")
    with pytest.raises(InputError, match="data must be bytes"):
        atomic_write_bytes(tmp_path / "t.bin", "x")


def test_permissions_of_new_and_replaced_files(tmp_path):
    umask = os.umask(0o022)
    try:
        p = atomic_write_text(tmp_path / "new.txt", "x")
        assert stat.S_IMODE(p.stat().st_mode) == 0o644  # as open() gives, not mkstemp's 0600
        os.chmod(p, 0o640)
        atomic_write_text(p, "y", force=True)
        assert stat.S_IMODE(p.stat().st_mode) == 0o640
    finally:
        os.umask(umask)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("old\n")
    with pytest.raises(RuntimeError, match="boom"), atomic_open(p, "w", force=True) as fh:
        fh.write("half a new file")
        raise RuntimeError("boom")
    assert p.read_text() == "old\n"
    assert _leftovers(tmp_path, {"t.csv"}) == []


def test_streaming_write_with_fsync_and_suffix(tmp_path):
    p = tmp_path / "d.dat"
    with atomic_open(p, "wb", fsync=True, suffix=".part") as fh:
        fh.write(b"abc")
        (tmp,) = _leftovers(tmp_path, set())
        assert tmp.startswith(".d.dat.") and tmp.endswith(".part")
    assert p.read_bytes() == b"abc"
    with pytest.raises(InputError, match="mode must be"), atomic_open(p, "a"):
        pass


def test_symlink_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("keep")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    with pytest.raises(InputError, match="is a symbolic link, not a regular file"):
        atomic_write_text(link, "new", force=True)
    assert link.is_symlink() and target.read_text() == "keep"


def test_folder_fifo_and_device_are_refused(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match="is a folder, not a regular file"):
        atomic_write_text(tmp_path / "d", "x", force=True)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is a FIFO"):
        atomic_write_text(fifo, "x", force=True)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if os.path.exists("/dev/null"):
        with pytest.raises(InputError, match="character device.*refusing to replace it"):
            check_output_path("/dev/null", force=True)


def test_check_output_path_arguments(tmp_path):
    with pytest.raises(InputError, match="must be a str or path"):
        check_output_path(3)
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(InputError, match="is not a folder"):
        check_output_path(f / "x.txt")
    assert check_output_path(tmp_path / "fresh.txt") == tmp_path / "fresh.txt"


# ---------------------------------------------------------------------------
# JSON-safe values
# ---------------------------------------------------------------------------

def test_json_safe_converts_numpy_nan_paths_and_containers():
    obj = {
        "i": np.int64(3), "f": np.float32(0.5), "nan": float("nan"), "inf": np.float64(np.inf),
        "b": np.bool_(True), "arr": np.array([[1.0, np.nan], [2.0, 3.0]]),
        "t": (1, 2), "s": {4}, "p": Path("a/b"), "na": pd.NA, "nat": pd.NaT, "none": None,
        "nested": [{"x": np.array([1, 2], dtype=np.int32)}], "bool": False, "str": "x",
    }
    out = json_safe(obj)
    assert out == {
        "i": 3, "f": 0.5, "nan": None, "inf": None, "b": True,
        "arr": [[1.0, None], [2.0, 3.0]], "t": [1, 2], "s": [4], "p": "a/b",
        "na": None, "nat": None, "none": None, "nested": [{"x": [1, 2]}], "bool": False,
        "str": "x",
    }
    assert type(out["i"]) is int and type(out["b"]) is bool and type(out["f"]) is float
    json.dumps(out, allow_nan=False)


def test_json_safe_unknown_values_and_fallback():
    class Thing:
        def __str__(self):
            return "thing"

    t = Thing()
    assert json_safe([t]) == [t]  # json.dumps then names the type
    assert json_safe({"a": t}, fallback=str) == {"a": "thing"}


def test_json_safe_keeps_float_values_bit_for_bit():
    x = np.float64(0.1) + np.float64(0.2)
    assert json.dumps(json_safe({"x": x})) == json.dumps({"x": float(x)})


# ---------------------------------------------------------------------------
# digests
# ---------------------------------------------------------------------------

def test_sha256_file(tmp_path):
    p = tmp_path / "big.bin"
    data = os.urandom(3 * (1 << 20) + 7)  # spans several read blocks
    p.write_bytes(data)
    assert sha256_file(p) == hashlib.sha256(data).hexdigest()
    with pytest.raises(FileNotFoundError):
        sha256_file(tmp_path / "missing")


def test_create_without_links_still_refuses_an_existing_name(tmp_path, monkeypatch):
    """Where hard links are unsupported the name is reserved with O_EXCL, then renamed."""
    import errno as _errno

    from perfmodel import _io

    def no_link(src, dst):
        raise OSError(_errno.EPERM, "links not supported here")

    monkeypatch.setattr(_io.os, "link", no_link)
    target = tmp_path / "out.txt"
    _io.atomic_write_text(target, "first")
    assert target.read_text() == "first"
    with pytest.raises(InputError, match="exists"):
        _io.atomic_write_text(target, "second")
    _io.atomic_write_text(target, "third", force=True)
    assert target.read_text() == "third"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_output_that_is_an_input_is_refused(tmp_path):
    from perfmodel._io import atomic_write_text, check_output_path

    src = tmp_path / "in.csv"
    src.write_text("a\n1\n")
    with pytest.raises(InputError, match="input"):
        check_output_path(src, force=True, inputs=[src])
    with pytest.raises(InputError, match="input"):
        atomic_write_text(src, "x", force=True, inputs=[tmp_path / "missing.csv", src])
    assert src.read_text() == "a\n1\n"
    atomic_write_text(tmp_path / "out.csv", "x", inputs=[src])  # another name: fine


# ---------------------------------------------------------------------------
# parsed inputs
# ---------------------------------------------------------------------------

def test_read_parsed_returns_the_parse_or_one_message(tmp_path):
    kw = {"missing": "cfg: no file", "invalid": "cfg: not JSON"}
    p = tmp_path / "a.json"
    with pytest.raises(InputError, match="^cfg: no file$"):
        read_parsed(p, json.loads, json.JSONDecodeError, **kw)
    with pytest.raises(InputError, match="^cfg: no file$"):
        read_parsed(tmp_path, json.loads, json.JSONDecodeError, **kw)  # a folder
    p.write_text('{"a": [1, 2]}')
    assert read_parsed(str(p), json.loads, json.JSONDecodeError, **kw) == {"a": [1, 2]}
    p.write_text("{nope")
    with pytest.raises(InputError, match=r"^cfg: not JSON \(Expecting property name"):
        read_parsed(p, json.loads, json.JSONDecodeError, **kw)
    with pytest.raises(json.JSONDecodeError):  # an error type not named propagates
        read_parsed(p, json.loads, KeyError, **kw)
