"""Tests of perfmodel.data.trace_set: a folder of Parquet traces, read on loky and on Dask."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyarrow", reason="Parquet traces need pyarrow (perfmodel[parquet])")

from perfmodel.core.synthetic import simulate_trace
from perfmodel.data.trace_set import read_trace_set, trace_files
from perfmodel.data.typed_trace import write_parquet
from perfmodel.errors import InputError


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("set")
    for i, name in enumerate(["h100-a", "a100-b", "l4-c"]):
        write_parquet(simulate_trace(n=120 + 10 * i, noise="multiplicative", seed=i),
                      d / f"{name}.parquet")
    return d


def test_folder_and_glob_read_every_file_in_name_order(folder):
    df = read_trace_set(folder)
    assert df["source"].unique().tolist() == ["a100-b", "h100-a", "l4-c"]
    assert len(df) == 120 + 130 + 140
    assert isinstance(df["chunk_sizes"].dtype, pd.ArrowDtype)
    assert [p.name for p in trace_files(str(folder / "*-a.parquet"))] == ["h100-a.parquet"]


def test_errors_name_the_problem(folder, tmp_path):
    with pytest.raises(InputError, match="no Parquet trace files"):
        read_trace_set(tmp_path)
    (tmp_path / "x.csv").write_text("B,S,T\n1,1,1.0\n")
    with pytest.raises(InputError, match="not Parquet"):
        read_trace_set(str(tmp_path / "*"))


def test_dask_dataframe_read_equals_the_local_read(folder, local_cluster):
    b = read_trace_set(folder, backend="dask", scheduler=local_cluster.scheduler_address)
    a = read_trace_set(folder)
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        if isinstance(a[c].dtype, pd.ArrowDtype):
            assert a[c].tolist() == b[c].tolist()
        else:
            np.testing.assert_array_equal(a[c].to_numpy(), b[c].to_numpy())
