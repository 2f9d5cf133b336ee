"""Remote Parquet row groups read in few requests (data/spans.py): the spans' arithmetic by
hand, every read served from spans equal to the file's own bytes, and a remote source's rows
equal to pyarrow's plain read."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamclust.data import spans
from streamclust.data.sources import open_data


def test_merge_joins_across_small_holes_within_a_span():
    r = [(0, 10), (12, 20), (40, 50), (50, 55), (200, 260), (261, 300)]
    assert spans.merge(r, hole=5, span=100) == [(0, 20), (40, 55), (200, 300)]
    assert spans.merge(r, hole=25, span=100) == [(0, 55), (200, 300)]
    assert spans.merge(r, hole=25, span=50) == [(0, 50), (50, 55), (200, 260), (261, 300)]
    assert spans.merge([(0, 500)], hole=5, span=100) == [(0, 500)]  # a long chunk stays whole


def _table(n, rng):
    x = rng.standard_normal((n, 8)).astype(np.float32)
    return pa.table({"id": np.arange(n), "x": pa.FixedSizeListArray.from_arrays(x.ravel(), 8),
                     "label": rng.integers(0, 5, n), "note": [f"row {i}" for i in range(n)]})


def test_span_file_reads_equal_the_file_bytes_and_count_its_requests(tmp_path):
    rng = np.random.default_rng(0)
    path = str(tmp_path / "t.parquet")
    pq.write_table(_table(5000, rng), path, row_group_size=700)
    data = open(path, "rb").read()
    raw = pa.BufferReader(data)
    sp = [(100, 900), (1000, 4000), (9000, len(data) - 10)]
    f = spans.SpanFile(raw, len(data), sp)
    for _ in range(300):  # reads anywhere: inside a span, across two, outside all
        pos = int(rng.integers(0, len(data)))
        n = int(rng.integers(0, 3000))
        f.seek(pos)
        assert f.read(n) == data[pos:pos + n]
        assert f.tell() == min(pos + n, len(data))
    f.seek(-5, 2)
    assert f.read() == data[-5:]

    md = pq.ParquetFile(path).metadata
    groups = [1, 2, 3]
    ranges = spans.chunk_ranges(md, groups, ["x"])
    assert len(ranges) == 3 and all(b > a for a, b in ranges)
    merged = spans.merge(ranges)  # the id/label/note chunks between are far under HOLE
    assert len(merged) == 1
    f = spans.SpanFile(pa.BufferReader(data), len(data), merged)
    got = pq.ParquetFile(pa.PythonFile(f, mode="r"), metadata=md, pre_buffer=False) \
        .read_row_groups(groups, columns=["x"])
    assert got.equals(pq.ParquetFile(path).read_row_groups(groups, columns=["x"]))
    assert f.requests == 1  # one request for three row groups' chunks


def test_a_remote_source_reads_the_rows_of_the_plain_read(tmp_path, monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    opened = []

    class Counted(spans.SpanFile):
        def __init__(self, *a):
            super().__init__(*a)
            opened.append(self)
    monkeypatch.setattr(spans, "SpanFile", Counted)
    rng = np.random.default_rng(1)
    fs, root = fsspec.filesystem("memory"), f"/spans-{os.getpid()}-{id(tmp_path)}"
    tables = [_table(n, rng) for n in (9000, 4100)]
    for i, t in enumerate(tables):
        with fs.open(f"{root}/part-{i}.parquet", "wb") as f:
            pq.write_table(t, f, row_group_size=1500)
    data = open_data(f"memory:/{root}", features="x")
    got = np.concatenate([b.X for b in data.iter_batches(2048)])
    want = np.concatenate([t.column("x").combine_chunks().flatten().to_numpy().reshape(-1, 8)
                           for t in tables])
    np.testing.assert_array_equal(got, want)
    # a remote file's units hold SPAN bytes: here each file is one, fetched by one request
    assert len(opened) == 2 and all(f.requests == 1 for f in opened)
