"""Every committed data file matches data/SHA256SUMS, and every data file is listed."""
import hashlib
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
SUMS = DATA / "SHA256SUMS"


def _listed():
    out = {}
    for line in SUMS.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        out[name.strip()] = digest
    return out


@pytest.mark.skipif(not SUMS.exists(), reason="data/SHA256SUMS not present")
def test_checksums_match_and_cover_every_file():
    listed = _listed()
    on_disk = {str(p.relative_to(DATA)) for p in DATA.rglob("*")
               if p.is_file() and p.name != "SHA256SUMS"}
    assert on_disk == set(listed), {"unlisted": sorted(on_disk - set(listed)),
                                    "missing": sorted(set(listed) - on_disk)}
    bad = [n for n, d in listed.items()
           if hashlib.sha256((DATA / n).read_bytes()).hexdigest() != d]
    assert not bad, f"files changed since SHA256SUMS was written: {bad}"


@pytest.mark.skipif(not (DATA / "vllm-cpu").is_dir(), reason="no vLLM-CPU traces committed")
def test_metadata_sha256_matches_each_trace():
    import json

    metas = sorted((DATA / "vllm-cpu").rglob("*.meta.json"))
    assert metas
    for m in metas:
        meta = json.loads(m.read_text())
        csv = m.with_name(m.name.replace(".meta.json", ".csv"))
        assert hashlib.sha256(csv.read_bytes()).hexdigest() == meta["sha256"], csv.name
