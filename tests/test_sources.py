import numpy as np
import pyarrow as pa
import pytest
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from streamclust.data.cache import FeatureCache
from streamclust.data.formats import ParquetSource
from streamclust.data.sources import open_data

from conftest import write_parquet_dir


def _collect(data, batch_size):
    return np.concatenate([b.X for b in data.iter_batches(batch_size)])


def test_parquet_directory_rows_in_stable_order(tmp_path, blobs):
    X, y = blobs
    path = write_parquet_dir(str(tmp_path / "d"), X, y, files=4, row_group=33)
    d = open_data(path)
    assert d.spec.columns == ("embedding",) and d.n_features == 5
    assert d.n_rows == len(X)  # from metadata
    for bs in (1000, 17, 1):
        got = _collect(d, bs)
        np.testing.assert_array_equal(got, X.astype(np.float32))
    starts = [b.start for b in d.iter_batches(20)]
    assert starts == sorted(starts) and starts[0] == 0


def test_glob_single_file_and_numeric_columns(tmp_path, blobs):
    X, y = blobs
    path = write_parquet_dir(str(tmp_path / "d"), X, y, files=2, vector=False)
    d = open_data(str(tmp_path / "d" / "*.parquet"), features=["x0", "x1", "x2", "x3", "x4"])
    np.testing.assert_array_equal(_collect(d, 64), X.astype(np.float32))
    one = open_data(str(tmp_path / "d" / "part-000.parquet"), features=["x0", "x3"])
    np.testing.assert_array_equal(_collect(one, 64), X[:300][:, [0, 3]].astype(np.float32))
    # automatic choice: every numeric column except the excluded ones
    auto = open_data(path, exclude=("id", "label"))
    assert auto.spec.columns == ("x0", "x1", "x2", "x3", "x4")


def test_variable_length_list_column(tmp_path):
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    pq.write_table(pa.table({"v": pa.array([list(r) for r in X], pa.list_(pa.float64()))}),
                   str(tmp_path / "a.parquet"))
    d = open_data(str(tmp_path / "a.parquet"))
    assert d.n_features == 3
    np.testing.assert_array_equal(_collect(d, 3), X)


def test_arrow_ipc_table_reader_and_numpy(tmp_path, blobs):
    X, _ = blobs
    t = pa.table({"f": pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).ravel()), 5)})
    with ipc.new_file(str(tmp_path / "x.arrow"), t.schema) as w:
        for b in t.to_batches(max_chunksize=70):
            w.write_batch(b)
    for data in (str(tmp_path / "x.arrow"), t, X):
        np.testing.assert_array_equal(_collect(open_data(data), 64), X.astype(np.float32))
    reader = pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=100))
    np.testing.assert_array_equal(_collect(open_data(reader), 64), X.astype(np.float32))


def test_feature_cache_take_and_reuse(tmp_path, blob_dir, blobs):
    X, _ = blobs
    d = open_data(blob_dir)
    wd = str(tmp_path / "work")
    import os
    os.makedirs(wd)
    cache = FeatureCache.build(d, wd, 100)
    assert isinstance(cache.X, np.memmap) and not cache.X.flags.writeable
    ids = np.array([599, 0, 17, 17, 300])
    np.testing.assert_array_equal(cache.take(ids), X[ids].astype(np.float32))
    mtime = os.stat(os.path.join(wd, "features.f32")).st_mtime_ns
    again = FeatureCache.build(open_data(blob_dir), wd, 50)   # same fingerprint: reused
    assert os.stat(os.path.join(wd, "features.f32")).st_mtime_ns == mtime
    np.testing.assert_array_equal(np.asarray(again.X), np.asarray(cache.X))


def test_row_count_from_metadata_without_reading(tmp_path, blob_dir):
    src = ParquetSource(blob_dir)
    assert src.n_rows == 600 and len(src.files) == 3


@pytest.mark.parametrize("name,kind", [("d.arrow", "file"), ("d.feather", "file"), ("d.ipc", "file"),
                                       ("d.arrows", "stream"), ("s.arrow", "stream")])
def test_arrow_ipc_fits_predicts_and_evaluates_end_to_end(tmp_path, blobs, name, kind):
    """Arrow IPC written by pyarrow (the file format and the stream format, under every name the
    docs list), from Python and from the CLI: the labels equal those of the same rows fitted
    from Parquet (the fit knows no difference between the two)."""
    from click.testing import CliRunner

    import streamclust
    from streamclust.cli import main
    X, y = blobs
    t = pa.table({"id": pa.array(np.arange(len(X))), "label": pa.array(y.astype(np.int64)),
                  "x": pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).ravel()), 5)})
    path = str(tmp_path / name)
    with (ipc.new_file if kind == "file" else ipc.new_stream)(path, t.schema) as w:
        for b in t.to_batches(max_chunksize=130):
            w.write_batch(b)
    pq.write_table(t, str(tmp_path / "same.parquet"))
    ref = streamclust.fit(str(tmp_path / "same.parquet"), "dgmm", 4, features="x", progress=False)
    model = streamclust.fit(path, "dgmm", 4, features="x", progress=False)
    np.testing.assert_array_equal(model.predict(X.astype(np.float32)), ref.predict(X.astype(np.float32)))
    assert model.evaluate(path, "label")["nmi"] > 0.99
    out = str(tmp_path / "m")
    r = CliRunner()
    res = r.invoke(main, ["fit", path, "-a", "dgmm", "-k", "4", "-f", "x", "--out", out, "-q"])
    assert res.exit_code == 0, res.output
    res = r.invoke(main, ["predict", out, path, "--out", str(tmp_path / "p.parquet"), "--keep", "id"])
    assert res.exit_code == 0, res.output
    pred = pq.read_table(str(tmp_path / "p.parquet"))
    np.testing.assert_array_equal(pred.column("id").to_numpy(), np.arange(len(X)))
    np.testing.assert_array_equal(pred.column("cluster").to_numpy(), ref.predict(X.astype(np.float32)))
    res = r.invoke(main, ["evaluate", out, path, "--labels", "label", "--json"])
    assert res.exit_code == 0, res.output
    import json
    assert json.loads(res.output)["nmi"] > 0.99


def test_feature_cache_appends_the_rows_of_added_files_only(tmp_path, monkeypatch):
    """Files added after the cached ones: only they are read, the cache equals a fresh build;
    a bad value in them leaves the old cache as it was; a changed old file rebuilds it all."""
    import os
    from streamclust.errors import DataError
    rng = np.random.default_rng(3)
    X = rng.standard_normal((900, 4)).astype(np.float32)
    data = str(tmp_path / "d")
    write_parquet_dir(data, X, files=3)
    last = sorted(os.listdir(data))[-1]
    os.rename(os.path.join(data, last), str(tmp_path / "later.parquet"))
    wd = str(tmp_path / "w")
    os.makedirs(wd)
    FeatureCache.build(open_data(data), wd, 64)
    read = []
    original = ParquetSource.record_batches

    def spy(self, columns, batch_size):
        for f, row, rb in original(self, columns, batch_size):
            read.append(os.path.basename(f))
            yield f, row, rb
    monkeypatch.setattr(ParquetSource, "record_batches", spy)
    bad = X[600:].copy()
    bad[50, 2] = np.nan  # global row 650
    write_parquet_dir(str(tmp_path / "bad"), bad, files=1)
    os.rename(str(tmp_path / "bad" / sorted(os.listdir(tmp_path / "bad"))[0]), os.path.join(data, last))
    with pytest.raises(DataError, match="global row 650"):
        FeatureCache.build(open_data(data), wd, 64)
    assert set(read) == {last} and os.path.getsize(os.path.join(wd, "features.f32")) == 600 * 4 * 4
    os.remove(os.path.join(data, last))
    read.clear()
    assert FeatureCache.build(open_data(data), wd, 64).n_rows == 600 and not read  # reused
    os.rename(str(tmp_path / "later.parquet"), os.path.join(data, last))
    cache = FeatureCache.build(open_data(data), wd, 64)
    assert set(read) == {last}
    np.testing.assert_array_equal(np.asarray(cache.X), X)
    assert cache.n_rows == 900 and cache.meta["source_rows"] == 900
    first = sorted(os.listdir(data))[0]
    write_parquet_dir(str(tmp_path / "new0"), X[:300] * 2, files=1)
    os.replace(str(tmp_path / "new0" / sorted(os.listdir(tmp_path / "new0"))[0]), os.path.join(data, first))
    read.clear()
    cache = FeatureCache.build(open_data(data), wd, 64)
    assert len(set(read)) == 3
    np.testing.assert_array_equal(np.asarray(cache.X[:300]), X[:300] * 2)


def test_row_groups_read_ahead_come_in_order_with_their_file_rows(tmp_path):
    """Parquet row groups decoded by reader threads (``data.readahead``) give the rows, and each
    batch's file and first row, exactly as one sequential read of the files does."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(23_000, 3)).astype(np.float32)
    d = tmp_path / "d"
    d.mkdir()
    cuts = [0, 9_000, 9_500, 23_000]  # a file of one row group among files of several
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X[a:b].ravel()), 3),
                      "row": pa.array(np.arange(a, b))})
        pq.write_table(t, str(d / f"part-{i}.parquet"), row_group_size=300)
    src = ParquetSource(str(d))
    got = list(src.record_batches(["x", "row"], 4096))
    assert len(src._units(4096)) > len(src.files) + 2  # several units read ahead
    # row groups of 300 rows are read in units of >= 4096 rows: batches stay 4096 long, shorter
    # only at a unit's end (one a unit at most)
    sizes = [rb.num_rows for _, _, rb in got]
    assert max(sizes) == 4096 and sum(n < 4096 for n in sizes) <= len(src._units(4096))
    assert len(got) <= 2 * len(X) // 4096 + len(src.files)
    rows = np.concatenate([rb.column("row").to_numpy() for _, _, rb in got])
    np.testing.assert_array_equal(rows, np.arange(len(X)))
    for f, row0, rb in got:  # each batch's first row, counted in its own file
        i = int(f.rsplit("-", 1)[1].split(".")[0])
        assert rb.column("row")[0].as_py() == cuts[i] + row0
    data = open_data(str(d), features=["x"])
    np.testing.assert_array_equal(_collect(data, 4096), X)


def test_read_ahead_raises_where_the_sequential_read_would_and_stops_its_readers():
    import threading
    from streamclust.data.readahead import ordered

    def read(u):
        if u == 5:
            raise ValueError("unit 5 is broken")
        return iter([(u, 0), (u, 1)])
    seen = []
    with pytest.raises(ValueError, match="unit 5"):
        for item in ordered(range(8), read, readers=3):
            seen.append(item)
    assert seen == [(u, j) for u in range(5) for j in (0, 1)]
    before = threading.active_count()
    gen = ordered(range(100), lambda u: iter(range(1000)), readers=2)
    assert next(gen) == 0
    gen.close()  # the readers, blocked on their full queues, stop
    assert threading.active_count() == before


def test_read_ahead_gives_a_free_reader_the_next_unit_within_its_bound():
    """A reader free while another decodes a slow unit takes the next units (they were dealt
    round robin: reader 1 of 2 got units 1, 3, ... whatever unit 0 cost); the end of a unit
    does not wait for the consumer; never more than ``readers`` units past the consumer's are
    read, nor more than ``depth`` items of a reader waiting."""
    import threading
    import time
    from streamclust.data.readahead import ordered
    who, started, consumer, three = {}, [], [0], threading.Event()

    def read(u):
        who[u] = threading.get_ident()
        started.append((u, consumer[0]))
        if u == 3:
            three.set()
        if u == 0:  # until unit 3 is taken (round robin: never, its reader is this one)
            three.wait(5.0)
        return iter([(u, j) for j in range(1 if u < 4 else 3)])
    got = []
    for item in ordered(range(12), read, readers=3, depth=2):
        consumer[0] = item[0]
        got.append(item)
    assert got == [(u, j) for u in range(12) for j in range(1 if u < 4 else 3)]
    # unit 0's reader sleeps; the two others take 1, 2 and then 3 (dealt round robin, unit 3
    # waited for unit 0's reader), and no more until the consumer is past unit 0
    assert who[0] not in (who[1], who[2], who[3])
    # the consumer's last item of unit c: its end may be taken, then units c + 1 .. c + 4
    assert all(u - c <= 4 for u, c in started)
    # a slow consumer of units of many batches: a reader holds at most depth batches waiting
    # plus the one it has decoded (counted when its unit yields it)
    lock, ahead, most = threading.Lock(), [0], [0]

    def many(u):
        for j in range(5):
            with lock:
                ahead[0] += 1
                most[0] = max(most[0], ahead[0])
            yield u, j
    got = []
    for item in ordered(range(10), many, readers=3, depth=2):
        with lock:  # taken: no longer the readers'
            ahead[0] -= 1
        time.sleep(0.002)
        got.append(item)
    assert got == [(u, j) for u in range(10) for j in range(5)]
    assert 3 < most[0] <= 3 * (2 + 1)


def test_conversion_ahead_keeps_the_order_and_the_sequential_errors():
    """``readahead.converted``: results in the items' order whatever thread computed them; an
    error of the conversion where its item comes, one of the items after the results before it;
    closing it closes the items and leaves no thread behind; below 4 threads it converts inline."""
    import threading
    import time
    from streamclust.data.readahead import converted

    def slow(i):
        time.sleep(0.002 * (i % 3))  # later items may finish first
        if i == 7:
            raise ValueError("item 7 is broken")
        return i * i, threading.get_ident()
    got = []
    with pytest.raises(ValueError, match="item 7"):
        for v, _ in converted(slow, range(20), threads=6):
            got.append(v)
    assert got == [i * i for i in range(7)]

    def items():
        yield from range(5)
        raise OSError("file 5 unreadable")
    got = []
    with pytest.raises(OSError, match="file 5"):
        for v, _ in converted(slow, items(), threads=6):
            got.append(v)
    assert got == [i * i for i in range(5)]
    closed = []

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.append(True)
    before = threading.active_count()
    gen = converted(lambda i: i, endless(), threads=5)
    assert [next(gen) for _ in range(4)] == [0, 1, 2, 3]
    gen.close()
    assert closed == [True] and threading.active_count() == before
    main = threading.get_ident()
    for threads in (1, 2, 3):  # below CONVERT_FROM (4) threads: in the consumer's
        assert {t for _, t in converted(slow, range(5), threads=threads)} == {main}
    assert main not in {t for _, t in converted(slow, range(5), threads=4)}


def test_readers_follow_the_threads_within_the_raw_bytes():
    """Two readers at least (one thread: the consumer reads); as many as the threads less the
    consumer and the converters while two raw batches a reader hold at most ``RAW_BYTES`` (16)
    a value: float16 lists 4, float32 2, float64 and strings 2, uint8 8."""
    import pyarrow as pa
    from streamclust.base import threads as TH
    from streamclust.data.readahead import readers
    with TH.use_threads(16):
        assert readers([pa.list_(pa.float16(), 384)]) == 4
        assert readers([pa.float32(), pa.float32()]) == 2
        assert readers([pa.float64()]) == readers([pa.string()]) == 2
        assert readers([pa.uint8()]) == 8
        assert readers([pa.uint8(), pa.float16()]) == 4
        assert readers([]) == 2  # no feature column known: counted as 8-byte values
    # from 3 threads on, readers + converters + the consumer stay within the budget
    from streamclust.data.readahead import converters
    for threads, n in ((3, 2), (4, 2), (5, 2), (6, 3), (7, 4), (8, 5), (11, 8), (16, 8)):
        with TH.use_threads(threads):
            assert readers([pa.uint8()]) == n
            assert readers([pa.uint8()]) + converters(threads) + 1 <= threads
    with TH.use_threads(2):  # the one exception: two readers beside the consumer
        assert readers([pa.uint8()]) == 2
    with TH.use_threads(1):  # the consumer reads: one thread in all
        assert readers([pa.uint8()]) == readers([pa.float16()]) == 1


def test_readers_are_paid_from_the_room_a_run_leaves_to_read():
    """In a ``reading_room`` of R bytes, units of U rows of P values, the widest w bytes, at T
    threads (C converters): as many readers as R less the converters' float32 batches
    ((2C + 1) · 4 U P bytes) holds at (2w + 4) U P bytes a reader, at least two, at most the
    threads less the consumer and converters; a list column of unknown length, or no room: the
    raw-bytes rule."""
    import pyarrow as pa
    from streamclust.base import threads as TH
    from streamclust.base.memory import reading_room, room_to_read
    from streamclust.data.readahead import readers
    half = pa.list_(pa.float16(), 384)
    U, P = 65536, 384
    per, ahead = 8 * U * P, 5 * 4 * U * P  # 192 MiB a float16 reader; 16 threads: 2 converters
    assert room_to_read() is None
    with TH.use_threads(16):
        with reading_room(ahead + 7 * per + per - 1):
            assert readers([half], U) == 7
            # two columns: every value counted at the wider one's 8 bytes (20 a value)
            assert readers([half, pa.int64()], U) == (ahead + 8 * per - 1 - 5 * 4 * U * 385) // (
                20 * U * 385)
            assert readers([pa.list_(pa.float16())], U) == 4  # length unknown
            assert readers([half]) == 4  # unit unknown
        with reading_room(10 << 30):
            assert readers([half], U) == 13  # 16 less the consumer and two converters
        with reading_room(3 << 30):  # float32 rows 784 wide: 588 MiB a reader, 980 MiB ahead
            assert readers([pa.list_(pa.float32(), 784)], U) == 3
        with reading_room(-5):  # nothing left beside the batch: the two
            assert room_to_read() == 0 and readers([half], U) == 2
        assert room_to_read() is None and readers([half], U) == 4
    with TH.use_threads(8), reading_room(10 << 30):  # 8 less the consumer and two converters
        assert readers([half], U) == 5
    with TH.use_threads(2), reading_room(10 << 30):
        assert readers([half], U) == 2


def test_the_cache_pass_reads_batches_of_at_most_32_mib_that_split_row_groups_evenly(tmp_path,
                                                                                      monkeypatch):
    """``read_rows``: the run's batch, at most 32 MiB of float32 rounded down to a power of two,
    at least 1 024; the pass over 784-wide rows in row groups of 4 096 reads batches of 2 048
    (at most 32 MiB of float32 each would be 10 700 rows: 8 192 rounded down; at
    ``READ_BYTES`` of 8 MiB: 2 048), each a half row group, two waiting a reader (``depth``: a
    unit's batches), and the cache holds the rows as written."""
    import streamclust.data.cache as C
    from streamclust.data import readahead
    from streamclust.data.cache import read_rows
    assert [read_rows(65536, d) for d in (16, 50, 256, 384, 784, 3000, 10**5)] == \
        [65536, 65536, 32768, 16384, 8192, 2048, 1024]
    assert read_rows(500, 784) == 500 and read_rows(5000, 384) == 5000
    half, wide = pa.list_(pa.float16(), 384), pa.list_(pa.float32(), 784)
    assert readahead.depth([half], 16384, 65536) == 4 and readahead.depth([half], 65536, 65536) == 1
    assert readahead.depth([wide], 8192, 32768) == 4  # (16 384 rows: 49 MiB, two in 128 MiB)
    assert readahead.depth([wide], 16384, 65536) == 2
    assert readahead.depth([wide], 65536, 4 * 65536) == 1  # one batch of 196 MiB > 128 MiB
    assert readahead.depth([wide], 8192, 1 << 20) == 1  # a unit of 128 batches: one waits
    assert readahead.depth([pa.list_(pa.float32())], 100, 1000) == 1  # length unknown
    X = np.random.default_rng(3).normal(size=(12288, 784)).astype(np.float32)
    pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 784)}),
                   tmp_path / "w.parquet", row_group_size=4096)
    monkeypatch.setattr(C, "READ_BYTES", 8 << 20)
    sizes, depths, real = [], [], readahead.ordered
    monkeypatch.setattr(C, "_tally", lambda b, counts, progress, t=C._tally: (
        sizes.append(len(b.X)), t(b, counts, progress))[1])
    monkeypatch.setattr(readahead, "ordered", lambda u, r, n=2, depth=1: (
        depths.append(depth), real(u, r, n, depth))[1])
    (tmp_path / "c").mkdir()
    cache = FeatureCache.build(open_data(str(tmp_path / "w.parquet")), str(tmp_path / "c"), 65536)
    assert sizes == [2048] * 6 and depths == [2]
    np.testing.assert_array_equal(cache.rows(0, len(X)).X, X)


def test_a_fit_and_a_graph_read_in_the_room_their_budget_leaves(tmp_path, monkeypatch):
    """The cache pass of a fit and of ``knn_graph`` runs in a reading room of the memory limit
    less the process and one batch (``batch_bytes``)."""
    import streamclust
    from streamclust.base.memory import BASELINE, batch_bytes, room_to_read
    from streamclust.data import readahead
    X = np.random.default_rng(1).normal(size=(6000, 8)).astype(np.float32)
    for i in range(3):
        pq.write_table(pa.table({f"f{j}": X[i * 2000:(i + 1) * 2000, j] for j in range(8)}),
                       tmp_path / f"p{i}.parquet", row_group_size=1000)
    seen, real = [], readahead.readers
    monkeypatch.setattr(readahead, "readers", lambda types, rows=0: seen.append(
        (room_to_read(), rows)) or real(types, rows))
    streamclust.fit(str(tmp_path), algorithm="dgmm", n_clusters=3, batch_size=2000,
                    memory_limit="1GB", work_dir=str(tmp_path / "w1"), max_epochs=2, progress=False)
    streamclust.knn_graph(str(tmp_path), 5, batch_size=2000, memory_limit="2GB",
                          work_dir=str(tmp_path / "w2"), progress=False)
    assert seen == [(10**9 - BASELINE - batch_bytes(2000, 8), 2000),
                    (2 * 10**9 - BASELINE - batch_bytes(2000, 8), 2000)]


def test_one_thread_decodes_every_row_group_in_the_consumer(tmp_path, monkeypatch):
    """``threads=1``: the cache pass reads every row group on the thread that converts and
    writes (no reader threads beside it); with two threads, reader threads decode; the cache is
    the same bytes both ways."""
    import threading
    from streamclust.base import threads as TH
    X = np.random.default_rng(5).normal(size=(8000, 6)).astype(np.float32)
    for i in range(2):  # two files of four row groups: eight units to read ahead
        pq.write_table(pa.table({f"f{j}": X[i * 4000:(i + 1) * 4000, j] for j in range(6)}),
                       str(tmp_path / f"p{i}.parquet"), row_group_size=1000)
    seen = []
    read = ParquetSource._read

    def spy(self, *a, **kw):
        seen.append(threading.current_thread())
        return read(self, *a, **kw)
    monkeypatch.setattr(ParquetSource, "_read", spy)
    caches = {}
    for threads in (1, 2):
        seen.clear()
        d = open_data(str(tmp_path / "p*.parquet"))
        (tmp_path / f"w{threads}").mkdir()
        with TH.use_threads(threads):
            c = FeatureCache.build(d, str(tmp_path / f"w{threads}"), 1024)
        caches[threads] = np.array(c.X)
        names = {t.name for t in seen}
        assert (names == {threading.main_thread().name}) == (threads == 1), names
    np.testing.assert_array_equal(caches[1], X)
    np.testing.assert_array_equal(caches[2], X)


def test_few_large_row_groups_are_said_and_counted_by_info(tmp_path, monkeypatch):
    """Fewer row groups than threads, one of them large: the read notes say that only so many
    threads decode (a row group is decoded on one thread) and how to write the files; row
    groups enough for the threads, or a small read, say nothing; ``info`` counts the row
    groups."""
    import json
    from click.testing import CliRunner
    from streamclust.base.threads import use_threads
    from streamclust.cli import main
    from streamclust.data import parquet
    X = np.arange(3000 * 4, dtype=np.float32).reshape(3000, 4)
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 4)})
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    pq.write_table(t, tmp_path / "one" / "a.parquet")
    pq.write_table(t, tmp_path / "many" / "a.parquet", row_group_size=500)
    monkeypatch.setattr(parquet, "BIG_GROUP_ROWS", 1000)
    monkeypatch.setattr(parquet, "BIG_READ_VALUES", 3000 * 4)
    one, many = ParquetSource(str(tmp_path / "one")), ParquetSource(str(tmp_path / "many"))
    with use_threads(4):
        notes = one.read_notes(["x"])
        assert len(notes) == 1 and "1 row group(s) of up to 3000 rows" in notes[0] \
            and "at most 1 of the 4 threads" in notes[0] and "row_group_size" in notes[0]
        assert many.read_notes(["x"]) == []  # 6 row groups for 4 threads
        monkeypatch.setattr(parquet, "BIG_READ_VALUES", 3000 * 4 + 1)
        assert one.read_notes(["x"]) == []  # too small a read to be worth a line
        monkeypatch.setattr(parquet, "BIG_READ_VALUES", 1)
        cols = pa.table({f"c{j}": X[:, j] for j in range(4)})
        pq.write_table(cols, tmp_path / "cols.parquet")  # columns: decoded in parallel
        assert ParquetSource(str(tmp_path / "cols.parquet")).read_notes(["c0", "c1"]) == []
    out = CliRunner().invoke(main, ["info", str(tmp_path / "many"), "--json"])
    got = json.loads(out.output)
    assert (got["row_groups"], got["largest_row_group"]) == (6, 500)
