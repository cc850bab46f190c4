"""Dataset registry, fetch (mirror / cache / download) and the public-data loaders.

No test touches the network: downloads are exercised through a fake
``urllib.request.urlopen``.  Tests that read a public file use the mirror
(``tests/conftest.py``) and skip with the reason when it is unreachable.
"""
from __future__ import annotations

import hashlib
import io
import re
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.data import datasets as D
from perfmodel.errors import ChecksumError, DataUnavailableError, InputError

CANONICAL = ["batch_size", "total_tokens", "duration_ms"]


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------

def test_registry_holds_the_expected_files():
    names = set(D.REGISTRY)
    assert len([n for n in names if n.startswith("nist/") and n != "nist/Models"]) == 27
    for n in ["splitwise/perf_model", "sarathi/figure-2/decode", "sarathi/figure-2/prefill",
              "sarathi/figure-9/chunking-overhead", "sarathi/table-2/results",
              "llm-inference-bench/all_results", "llm-inference-bench/ttft",
              "llm-inference-bench/ttft_itl", "vidur/attention", "vidur/mlp",
              "vidur/cpu_overheads", "distserve/profiler-distserve", "distserve/profiler-vllm"]:
        assert n in names


@pytest.mark.parametrize("ds", D.list_datasets(), ids=lambda d: d.name)
def test_registry_entry_is_well_formed(ds):
    assert re.fullmatch(r"[0-9a-f]{64}", ds.sha256)
    assert ds.citation in D.CITATIONS and ds.license
    assert not ds.path.startswith("/") and ".." not in ds.path
    assert all(u.startswith("https://") for u in ds.urls)
    if ds.name.startswith("nist/") and ds.name != "nist/Models":
        prob = ds.name.split("/")[1]
        assert ds.url == f"https://www.itl.nist.gov/div898/strd/nls/data/LINKS/DATA/{prob}.dat"
    else:
        # raw GitHub URL at a pinned 40-hex commit, ending in the upstream file name
        m = re.fullmatch(r"https://raw\.githubusercontent\.com/[^/]+/[^/]+/([0-9a-f]{40})/(.+)",
                         ds.url)
        assert m, ds.url
        assert m.group(2).split("/")[-1] == ds.path.split("/")[-1]


def test_registry_pins_the_commits_of_source_txt():
    assert D.get_dataset("splitwise/perf_model").url == (
        "https://raw.githubusercontent.com/Mutinifni/splitwise-sim/"
        "8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0/data/perf_model.csv")
    assert "/microsoft/vidur/acb95f6cd118071401fa805a0b0bc11bd2018fc6/data/profiling/a100/" \
        in D.get_dataset("vidur/mlp").url
    assert "/02d2567eb169d947c7093f57b5b74ad602615947/" \
        in D.get_dataset("sarathi/table-2/results").url


def test_names_and_paths_are_unique():
    ds = D.list_datasets()
    assert len({d.path for d in ds}) == len(ds) == len(D.REGISTRY)


def test_list_datasets_filters_by_prefix():
    assert [d.name for d in D.list_datasets("vidur/")] == [
        "vidur/attention", "vidur/cpu_overheads", "vidur/mlp"]
    assert D.list_datasets("nope/") == []
    with pytest.raises(InputError, match="prefix"):
        D.list_datasets(3)


def test_get_dataset_unknown_name_lists_near_names():
    with pytest.raises(InputError, match="vidur/attention"):
        D.get_dataset("vidur/attn")


def test_mirror_files_match_the_pinned_sha256(fetch_or_skip):
    """Every registered file in the mirror hashes to its pinned digest (the pins are live)."""
    for ds in D.list_datasets():
        p = fetch_or_skip(ds.name)
        assert hashlib.sha256(Path(p).read_bytes()).hexdigest() == ds.sha256, ds.name


# ---------------------------------------------------------------------------
# fetch
# ---------------------------------------------------------------------------

@pytest.fixture
def source_bytes(fetch_or_skip):
    """The true bytes of two small datasets (from the mirror)."""
    return {n: Path(fetch_or_skip(n)).read_bytes()
            for n in ("sarathi/table-2/results", "nist/Misra1a")}


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No mirror, an empty cache, and a network that fails loudly unless replaced."""
    monkeypatch.delenv(D.ENV_MIRROR, raising=False)
    monkeypatch.delenv(D.ENV_OFFLINE, raising=False)
    home = tmp_path / "cache"
    monkeypatch.setenv(D.ENV_HOME, str(home))
    calls = []

    def no_network(req, timeout=None):
        calls.append(getattr(req, "full_url", req))
        raise urllib.error.URLError("network is unreachable (test)")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    return home, calls


def _serve(monkeypatch, table, calls=None):
    """Replace urlopen by a server of ``table`` (url -> bytes)."""
    def fake(req, timeout=None):
        url = getattr(req, "full_url", req)
        if calls is not None:
            calls.append(url)
        if url not in table:
            raise urllib.error.URLError(f"no route to {url}")
        return io.BytesIO(table[url])

    monkeypatch.setattr(urllib.request, "urlopen", fake)


def test_fetch_reads_the_mirror_without_writing_the_cache(fetch_or_skip, tmp_path, monkeypatch):
    monkeypatch.setenv(D.ENV_HOME, str(tmp_path / "cache"))
    p = fetch_or_skip("sarathi/table-2/results")
    assert p.parent.name == "table-2" and not (tmp_path / "cache").exists()


def test_fetch_mirror_checksum_mismatch_names_file_expected_and_actual(source_bytes, tmp_path,
                                                                       monkeypatch):
    ds = D.get_dataset("sarathi/table-2/results")
    bad = tmp_path / "mirror" / ds.path
    bad.parent.mkdir(parents=True)
    data = source_bytes[ds.name].replace(b"217.6", b"999.6", 1)
    bad.write_bytes(data)
    monkeypatch.setenv(D.ENV_MIRROR, str(tmp_path / "mirror"))
    with pytest.raises(ChecksumError) as e:
        D.fetch(ds.name)
    msg = str(e.value)
    assert str(bad) in msg and ds.sha256 in msg and hashlib.sha256(data).hexdigest() in msg


def test_fetch_without_mirror_cache_or_network_says_how_to_set_the_mirror(isolated):
    home, calls = isolated
    with pytest.raises(DataUnavailableError) as e:
        D.fetch("splitwise/perf_model")
    msg = str(e.value)
    assert "PERFMODEL_DATA_MIRROR" in msg and "export" in msg
    assert "splitwise-sim/data/perf_model.csv" in msg and "network is unreachable" in msg
    assert calls == [D.get_dataset("splitwise/perf_model").url]
    assert not list(home.rglob("*.part"))


def test_fetch_offline_does_not_try_the_network(isolated, monkeypatch):
    _, calls = isolated
    monkeypatch.setenv(D.ENV_OFFLINE, "1")
    with pytest.raises(DataUnavailableError, match="PERFMODEL_OFFLINE"):
        D.fetch("vidur/mlp")
    assert calls == []


def test_fetch_downloads_into_the_cache_then_reuses_it(source_bytes, isolated, monkeypatch):
    home, _ = isolated
    ds = D.get_dataset("sarathi/table-2/results")
    calls = []
    _serve(monkeypatch, {ds.url: source_bytes[ds.name]}, calls)
    p = D.fetch(ds.name)
    assert p == home / ds.path and p.read_bytes() == source_bytes[ds.name]
    assert calls == [ds.url]
    assert not list(home.rglob("*.part"))
    _serve(monkeypatch, {}, calls)          # network gone: the cache answers
    assert D.fetch(ds.name) == p and calls == [ds.url]


def test_fetch_download_checksum_mismatch_keeps_no_file(isolated, monkeypatch):
    home, _ = isolated
    ds = D.get_dataset("sarathi/table-2/results")
    _serve(monkeypatch, {ds.url: b"tampered\n"})
    with pytest.raises(ChecksumError) as e:
        D.fetch(ds.name)
    msg = str(e.value)
    assert ds.url in msg and ds.sha256 in msg and hashlib.sha256(b"tampered\n").hexdigest() in msg
    assert "not kept" in msg
    assert not (home / ds.path).exists()
    assert not [p for p in home.rglob("*") if p.is_file()]


def test_fetch_nist_falls_back_to_the_second_url(source_bytes, isolated, monkeypatch):
    """NIST's server might serve other line endings: the pinned lmfit copy is the fallback."""
    _home, _ = isolated
    ds = D.get_dataset("nist/Misra1a")
    good = source_bytes[ds.name]
    _serve(monkeypatch, {ds.urls[0]: good.replace(b"\n", b"\r\n"), ds.urls[1]: good})
    assert D.fetch(ds.name).read_bytes() == good


def test_fetch_replaces_a_corrupt_cached_copy(source_bytes, isolated, monkeypatch):
    home, _ = isolated
    ds = D.get_dataset("sarathi/table-2/results")
    cached = home / ds.path
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"truncated")
    _serve(monkeypatch, {ds.url: source_bytes[ds.name]})
    assert D.fetch(ds.name).read_bytes() == source_bytes[ds.name]


def test_data_home_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv(D.ENV_HOME, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert D.data_home() == tmp_path / "perfmodel"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert D.data_home() == Path.home() / ".cache" / "perfmodel"


def test_tests_never_use_the_user_cache():
    import os

    assert Path(os.environ[D.ENV_HOME]) != Path.home() / ".cache" / "perfmodel"


# ---------------------------------------------------------------------------
# step-schema helpers
# ---------------------------------------------------------------------------

def _ints(s):
    return np.array([int(t) for t in s.split(";")])


def _check_steps(df):
    """Canonical columns with the right types and invariants; per-request lists consistent."""
    for c in CANONICAL:
        assert c in df.columns
    assert pd.api.types.is_integer_dtype(df["batch_size"])
    assert pd.api.types.is_integer_dtype(df["total_tokens"])
    assert pd.api.types.is_float_dtype(df["duration_ms"])
    assert (df["batch_size"] >= 1).all() and (df["total_tokens"] >= df["batch_size"]).all()
    assert (df["duration_ms"] > 0).all() and np.isfinite(df["duration_ms"]).all()
    if "chunk_sizes" in df:
        for b, s, c, x in zip(df["batch_size"], df["total_tokens"], df["chunk_sizes"],
                              df["context_lens"], strict=True):
            c, x = _ints(c), _ints(x)
            assert c.size == x.size == b and c.sum() == s and (c >= 1).all() and (x >= 0).all()
    if "num_decode" in df:
        assert (df["num_decode"] + df["num_prefill"] == df["batch_size"]).all()
    try:
        from perfmodel.data.trace import validate_trace
    except ImportError:
        return
    v = validate_trace(df)
    assert len(v) == len(df)


# ---------------------------------------------------------------------------
# Splitwise
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def splitwise():
    try:
        return D.load_splitwise(), D.splitwise_steps()
    except DataUnavailableError as e:
        pytest.skip(f"splitwise/perf_model unreachable: {e}")


def test_splitwise_raw_counts_match_upstream(splitwise):
    raw, _ = splitwise
    assert raw.shape == (1260, 11)                                   # upstream: 1,260 rows
    assert (raw["hardware"] == "h100-80gb-pcap").sum() == 420         # upstream: 420 pcap rows


def test_splitwise_exclusion_reasons_hold_in_the_data(splitwise):
    raw, _ = splitwise
    h = raw[raw["hardware"] == "h100-80gb"].reset_index(drop=True)
    pc = raw[raw["hardware"] == "h100-80gb-pcap"].reset_index(drop=True)
    key = ["model", "prompt_size", "batch_size", "token_size", "tensor_parallel"]
    assert (h[key].to_numpy() == pc[key].to_numpy()).all()
    np.testing.assert_allclose(pc["prompt_time"] / h["prompt_time"], 1.30, rtol=1e-12)
    assert (pc["token_time"] == h["token_time"]).all()
    # TP2 P=512: per-prompt-token prefill time at B=64 is > 10x below B=32's
    sel = raw[(raw["model"] == "llama2-70b") & (raw["tensor_parallel"] == 2)
              & (raw["prompt_size"] == 512) & (raw["token_size"] == 128)
              & (raw["hardware"] != "h100-80gb-pcap")]
    per_tok = (sel["prompt_time"] / sel["batch_size"]).groupby(
        [sel["hardware"], sel["batch_size"]]).median()
    for hw in ("a100-80gb", "h100-80gb"):
        assert per_tok[(hw, 32)] / per_tok[(hw, 64)] > 10


def test_splitwise_steps_report_and_apply_exclusions(splitwise):
    _raw, st = splitwise
    ex = st.attrs["excluded"]
    assert ex == {D.SPLITWISE_EXCLUSIONS["pcap"]: 420, D.SPLITWISE_EXCLUSIONS["tp2_p512_b64"]: 10,
                  D.SPLITWISE_EXCLUSIONS["duplicate"]: 80}
    for n in (420, 10, 80):
        assert f"dropped {n} rows" in st.attrs["note"]
    assert len(st) == 2 * (1260 - 510)
    assert not (st["hardware"] == "h100-80gb-pcap").any()
    anom = ((st["model"] == "llama2-70b") & (st["tp"] == 2) & (st["prompt_size"] == 512)
            & (st["batch_size"] == 64))
    assert not anom.any()


def test_splitwise_steps_map_rows_to_prefill_and_mean_decode(splitwise):
    raw, st = splitwise
    _check_steps(st)
    row = raw.iloc[12]                       # a100, TP2, P=512, B=4, N=128
    pre = st[(st["row"] == 12) & (st["phase"] == "prefill")].iloc[0]
    dec = st[(st["row"] == 12) & (st["phase"] == "decode")].iloc[0]
    B, P, N = int(row["batch_size"]), int(row["prompt_size"]), int(row["token_size"])
    assert (pre["batch_size"], pre["total_tokens"]) == (B, B * P)
    assert pre["duration_ms"] == row["prompt_time"]
    assert pre["chunk_sizes"] == ";".join([str(P)] * B)
    assert pre["context_lens"] == ";".join(["0"] * B)
    assert (dec["batch_size"], dec["total_tokens"]) == (B, B)
    assert dec["duration_ms"] == row["token_time"]
    assert dec["context_lens"] == ";".join([str(P + N // 2)] * B)
    assert pre["config"].endswith("/prefill") and dec["config"].endswith("/decode")


def test_splitwise_replicates_share_a_config(splitwise):
    _, st = splitwise
    sizes = st.groupby("config").size()
    assert set(sizes.unique()) == {5}
    assert sizes.size == 2 * (8 * 19 - 2)      # 8 (model, hw, TP) x 19 configs, 2 anomalous


def test_splitwise_duplicates_are_exact_copies_of_kept_rows(splitwise):
    raw, st = splitwise
    flagged = D.splitwise_steps(drop_excluded=False)
    dup_rows = flagged.loc[flagged["excluded"] == D.SPLITWISE_EXCLUSIONS["duplicate"], "row"]
    dup_rows = sorted(set(dup_rows))
    assert len(dup_rows) == 80
    kept = raw.iloc[sorted(set(st["row"]))]
    keyed = kept.set_index(list(raw.columns)).index
    assert raw.iloc[dup_rows].set_index(list(raw.columns)).index.isin(keyed).all()
    assert (raw.iloc[dup_rows][["prompt_size", "batch_size", "token_size"]]
            == [512, 1, 128]).all().all()


def test_splitwise_steps_can_flag_instead_of_drop(splitwise):
    st = D.splitwise_steps(drop_excluded=False)
    assert len(st) == 2 * 1260
    assert (st["excluded"] != "").sum() == 2 * 510
    with pytest.raises(InputError, match="drop_excluded"):
        D.splitwise_steps(drop_excluded="yes")


# ---------------------------------------------------------------------------
# Sarathi-Serve
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sarathi():
    try:
        return D.sarathi_steps()
    except DataUnavailableError as e:
        pytest.skip(f"sarathi-serve files unreachable: {e}")


def test_sarathi_units_agree_with_the_per_token_columns(sarathi):
    for table in ("figure-2/decode", "figure-2/prefill"):
        raw = D.load_sarathi(table)
        st = sarathi[sarathi["source"] == f"sarathi/{table}"]
        # operation_time_per_token (ms) = 1000 * seconds / tokens
        np.testing.assert_allclose(st["duration_ms"].to_numpy() / st["total_tokens"].to_numpy(),
                                   raw["operation_time_per_token"].to_numpy(), rtol=1e-9)
    raw = D.load_sarathi("table-2/results")
    st = sarathi[sarathi["source"] == "sarathi/table-2/results"]
    np.testing.assert_allclose(st["duration_ms"].to_numpy() / st["total_tokens"].to_numpy(),
                               raw["per_token_time"].to_numpy(), rtol=1e-9)


def test_sarathi_steps_content(sarathi):
    _check_steps(sarathi)
    assert len(sarathi) == 19
    dec = sarathi[sarathi["source"] == "sarathi/figure-2/decode"]
    assert dec["batch_size"].tolist() == [1, 2, 4, 8, 16, 32, 64, 128]
    assert dec["duration_ms"].iloc[0] == pytest.approx(46.80, abs=0.01)
    t2 = sarathi[sarathi["source"] == "sarathi/table-2/results"].set_index("phase")
    assert t2.loc["mixed", "duration_ms"] == pytest.approx(217.65, abs=0.01)
    assert t2.loc["prefill", "duration_ms"] == pytest.approx(217.24, abs=0.01)
    assert (t2.loc["mixed", ["batch_size", "total_tokens", "num_decode", "num_prefill"]].tolist()
            == [4, 1024, 3, 1])
    assert "chunk_sizes" not in sarathi.columns     # decode contexts are not recorded
    assert any("S=256" in n for n in sarathi.attrs["notes"])


def test_sarathi_drop_warmup_drops_the_first_batch():
    try:
        st = D.sarathi_steps(drop_warmup=True)
    except DataUnavailableError as e:
        pytest.skip(str(e))
    assert len(st) == 18 and not ((st["phase"] == "prefill") & (st["total_tokens"] == 256)).any()
    assert sum(st.attrs["excluded"].values()) == 1


def test_load_sarathi_rejects_unknown_table():
    with pytest.raises(InputError, match="figure-2/decode"):
        D.load_sarathi("figure-3")


# ---------------------------------------------------------------------------
# LLM-Inference-Bench
# ---------------------------------------------------------------------------

def test_llm_inference_bench_raw_and_filters(fetch_or_skip):
    fetch_or_skip("llm-inference-bench/all_results")
    df = D.load_llm_inference_bench()
    assert len(df) == 4772
    assert {"hardware", "num_hardware", "framework", "model", "L", "B", "latency_s"} <= set(df)
    sub = D.load_llm_inference_bench(framework="vllm", hardware=["Nvidia A100 GPU"])
    assert len(sub) > 0 and set(sub["framework"]) == {"vLLM"}
    assert set(sub["hardware"]) == {"Nvidia A100 GPU"}
    with pytest.raises(InputError, match="available"):
        D.load_llm_inference_bench(framework="vllm-cpu")


def test_llm_inference_bench_flags_llama_cpp_batch_rows(fetch_or_skip):
    fetch_or_skip("llm-inference-bench/all_results")
    df = D.load_llm_inference_bench()
    bad = df[~df["consistent"]]
    assert len(bad) == 1161
    assert set(bad["framework"]) == {"llama.cpp"} and (bad["B"] > 1).all()
    np.testing.assert_allclose(bad["throughput_tok_s"], 2 * bad["L"] / bad["latency_s"], rtol=1e-4)
    assert len(D.load_llm_inference_bench(consistent_only=True)) == 4772 - 1161


def test_llm_inference_bench_ttft_files(fetch_or_skip):
    fetch_or_skip("llm-inference-bench/ttft_itl")
    t = D.load_llm_inference_bench_ttft("ttft_itl")
    assert {"ttft_s", "end_latency_s", "input_len", "B"} <= set(t.columns)
    assert (t["input_len"] == 1024).all() and (t["B"] == 16).all()
    t21 = D.load_llm_inference_bench_ttft("ttft")
    assert "latency_s" in t21 and len(t21) == len(t) == 30
    with pytest.raises(InputError, match="kind"):
        D.load_llm_inference_bench_ttft("itl")


# ---------------------------------------------------------------------------
# Vidur
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vidur():
    try:
        return D.load_vidur_profile(), D.vidur_steps(seed=0)
    except DataUnavailableError as e:
        pytest.skip(f"vidur profile unreachable: {e}")


def test_vidur_profile_shapes(vidur):
    prof, _ = vidur
    assert len(prof.attention) == 14658 and len(prof.mlp) == 261 and len(prof.cpu_overheads) == 13
    assert int((~prof.attention["is_prefill"]).sum()) == 10240


def test_vidur_steps_schema_and_parts(vidur):
    _, st = vidur
    _check_steps(st)
    assert len(st) == 118
    assert st["kind"].value_counts().to_dict() == {"mixed": 40, "decode": 33, "prefill": 30,
                                                   "mixed2": 15}
    np.testing.assert_allclose(st["duration_ms"], st["linear_ms"] + st["attention_ms"]
                               + st["other_ms"], rtol=1e-12)
    assert (st.loc[st["phase"] == "decode", "num_prefill"] == 0).all()
    assert (st.loc[st["phase"] == "mixed", ["num_prefill", "num_decode"]] > 0).all().all()
    assert st["phase"].tolist() == D.vidur_mixes(0)["phase"].tolist()


def _by_hand(prof, chunks, ctx):
    """Independent recomposition for one mix with one kind of request."""
    mlp = prof.mlp
    S = sum(chunks)
    tok = min(t for t in mlp["num_tokens"].unique() if t >= -(-S // 8) * 8)
    ops = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "input_layernorm",
           "post_attention_layernorm", "attn_rope", "mlp_act", "add"]
    per_layer = sum(mlp.loc[mlp["num_tokens"] == tok, f"time_stats.{op}.median"].mean()
                    for op in ops)
    a = prof.attention
    if all(c == 1 for c in chunks):
        kv = -(-int(np.mean(ctx)) // 64) * 64
        rows = a[(~a["is_prefill"]) & (a["batch_size"] == len(chunks))]
        kv_g = rows.loc[rows["kv_cache_size"] >= kv, "kv_cache_size"].min()
        per_layer += rows.loc[rows["kv_cache_size"] == kv_g, "time_stats.attn_decode.median"].mean()
    else:
        (c,), (x,) = chunks, ctx
        rows = a[a["is_prefill"]]
        c_g = rows.loc[rows["prefill_chunk_size"] >= c, "prefill_chunk_size"].min()
        rows = rows[rows["prefill_chunk_size"] == c_g]
        kv_g = rows.loc[rows["kv_cache_size"] >= -(-x // 64) * 64, "kv_cache_size"].min()
        sel = rows["kv_cache_size"] == kv_g
        per_layer += rows.loc[sel, "time_stats.attn_prefill.median"].mean()
    return 48 * per_layer


@pytest.mark.parametrize("chunks, ctx", [
    ([1], [2818]), ([1] * 37, list(range(100, 137 * 10, 35))), ([4096], [0]), ([700], [1000]),
])
def test_vidur_steps_match_an_independent_recomposition(vidur, chunks, ctx):
    prof, _ = vidur
    got = D.vidur_steps([(chunks, ctx)])
    assert got["duration_ms"].iloc[0] == pytest.approx(_by_hand(prof, chunks, ctx), rel=1e-12)


def test_vidur_steps_are_seeded(vidur):
    _, st0 = vidur
    again = D.vidur_steps(seed=0)
    pd.testing.assert_frame_equal(st0, again)
    other = D.vidur_steps(seed=1)
    assert not other["context_lens"].equals(st0["context_lens"])


def test_vidur_steps_grow_with_batch_and_chunk(vidur):
    small = D.vidur_steps([([1] * 8, [1024] * 8), ([512], [0])])
    big = D.vidur_steps([([1] * 128, [1024] * 128), ([4096], [0])])
    assert (big["duration_ms"].to_numpy() > small["duration_ms"].to_numpy()).all()


def test_vidur_steps_reject_bad_or_out_of_profile_mixes(vidur):
    with pytest.raises(InputError, match="outside the Vidur profile"):
        D.vidur_steps([([1] * 129, [100] * 129)])
    with pytest.raises(InputError, match="outside the Vidur profile"):
        D.vidur_steps([([2048], [3000])])
    with pytest.raises(InputError, match="equal-length"):
        D.vidur_steps([([1, 1], [5])])
    with pytest.raises(InputError, match="stat"):
        D.vidur_steps(stat="p99")
    with pytest.raises(InputError, match="seed"):
        D.vidur_mixes(seed=1.5)


# ---------------------------------------------------------------------------
# DistServe
# ---------------------------------------------------------------------------

def test_distserve_coefficients_tidy_and_wide(fetch_or_skip):
    fetch_or_skip("distserve/profiler-distserve")
    df = D.distserve_coefficients()
    assert len(df) == 2 * 7 * 3                  # 2 engines x (3 + 4) (model, TP) x 3 phases
    assert set(df["phase"]) == {"prefill", "decode_smallbs", "decode_largebs"}
    r = df[(df["engine"] == "distserve") & (df["model"] == "facebook/opt-13b") & (df["tp"] == 1)
           & (df["phase"] == "prefill")].iloc[0]
    assert (r["a"], r["b"], r["c"]) == (18.10254647486372, 0.1019122572698738,
                                        7.122264314252114e-06)
    small = df[df["phase"] == "decode_smallbs"]
    assert (small["batch_max"] == 94).all() and (df["bs_threshold"] == 95).all()
    w = D.distserve_coefficients("vllm", wide=True)
    assert len(w) == 7 and {"prefill_a", "decode_largebs_c"} <= set(w.columns)
    assert w.loc[(w["model"] == "facebook/opt-66b") & (w["tp"] == 2), "prefill_c"].iloc[0] \
        == -7.1141486747694485e-06
    with pytest.raises(InputError, match="engine"):
        D.distserve_coefficients("sglang")
