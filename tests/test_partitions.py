"""A data lake's Hive-style ``key=value`` directories as columns, and ``where`` on them: checked
against the table the lake was written from and against pyarrow's own dataset reading."""
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import streamclust
from streamclust.cli import main
from streamclust.data import parquet
from streamclust.data.partitions import parse_where
from streamclust.testing import make_blobs

DAYS = np.array(["2026-12-01", "2026-12-02", "2026-12-03"])


def _table(n=900, scalar=False):
    X, y = make_blobs(n=n, k=3, d=4, seed=5)
    cols = {"id": np.arange(n), "label": y}
    if scalar:
        cols.update({f"f{j}": X[:, j].astype(np.float32) for j in range(4)})
    else:
        cols["x"] = pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).ravel()), 4)
    hour = pa.array([None if i % 7 == 0 else i % 2 for i in range(n)], pa.int64())
    return pa.table(dict(cols, day=DAYS[np.arange(n) % 3], hour=hour)), X, y


def _lake(tmp_path, scalar=False):
    t, X, y = _table(scalar=scalar)
    path = str(tmp_path / "lake")
    pq.write_to_dataset(t, path, partition_cols=["day", "hour"])  # hour=__HIVE_DEFAULT_PARTITION__ too
    return path, t, X, y


def _by_id(table, names):
    order = np.argsort(table.column("id").to_numpy())
    return {c: table.column(c).take(pa.array(order)).to_pylist() for c in names}


def test_partition_columns_read_as_pyarrow_types_them(tmp_path):
    path, t, X, y = _lake(tmp_path)
    src = streamclust.lake(path)
    want = ds.dataset(path, format="parquet", partitioning="hive").schema
    assert src.partition_columns == ("day", "hour")
    assert src.schema.field("day").type == want.field("day").type == pa.string()
    assert src.schema.field("hour").type == want.field("hour").type == pa.int32()
    got = pa.Table.from_batches([rb for _, _, rb in src.record_batches(["id", "day", "hour"], 64)])
    assert _by_id(got, ["day", "hour"]) == _by_id(t, ["day", "hour"])  # nulls included


def test_keep_and_labels_get_the_partition_columns(tmp_path):
    path, t, X, y = _lake(tmp_path)
    m = streamclust.fit(path, "dgmm", 3, features="x", progress=False)
    out = str(tmp_path / "pred.parquet")
    m.predict_to_parquet(path, out, keep=["id", "day", "hour"])
    got = pq.read_table(out)
    assert _by_id(got, ["day", "hour"]) == _by_id(t, ["day", "hour"])
    streamed = pa.Table.from_batches(list(m.predict_batches(streamclust.lake(path), keep=["id", "day"])))
    assert _by_id(streamed, ["day"]) == _by_id(t, ["day"])
    assert _by_id(streamed, ["cluster"]) == _by_id(got, ["cluster"])
    # a partition column as the labels evaluate scores against: one class per day
    scores = m.evaluate(path, "day")
    assert scores["rows"] == len(X) and scores["n_classes"] == 3
    m.save(str(tmp_path / "m"))
    cli_out = str(tmp_path / "cli.parquet")
    r = CliRunner().invoke(main, ["predict", str(tmp_path / "m"), path, "--keep", "id,day", "-o", cli_out])
    assert r.exit_code == 0, r.output
    assert _by_id(pq.read_table(cli_out), ["day", "cluster"]) == _by_id(got, ["day", "cluster"])


def test_numeric_partition_columns_are_not_default_features(tmp_path):
    path, t, X, y = _lake(tmp_path, scalar=True)
    d = streamclust.open_data(path)
    assert d.spec.columns == ("f0", "f1", "f2", "f3")
    assert "hour" in d.left_out and "partition" in d.left_out["hour"]
    assert streamclust.open_data(path, features=["f0", "hour"]).spec.columns == ("f0", "hour")


@pytest.mark.parametrize("text, want", [
    ("day >= '2026-12-02'", lambda day, hour: day >= "2026-12-02"),
    ("day = '2026-12-01' and hour = 1", lambda day, hour: (day == "2026-12-01") & (hour == 1)),
    ("hour in (0, 5) or day <> '2026-12-03'", lambda day, hour: (hour == 0) | (day != "2026-12-03")),
    ("not (hour = 0) and hour is not null", lambda day, hour: hour == 1),
    ("hour is null", lambda day, hour: hour == -1),
    ('"day" not in (\'2026-12-01\', \'2026-12-02\')', lambda day, hour: day == "2026-12-03"),
])
def test_where_reads_only_the_matching_files(tmp_path, monkeypatch, text, want):
    path, t, X, y = _lake(tmp_path)
    opened = []
    real = parquet.ParquetSource._parquet
    monkeypatch.setattr(parquet.ParquetSource, "_parquet", lambda self, f: opened.append(f) or real(self, f))
    src = streamclust.lake(path, where=text)
    keys = [(os.path.basename(os.path.dirname(os.path.dirname(f))).split("=")[1],
             os.path.basename(os.path.dirname(f)).split("=")[1]) for f in src.files]
    day = np.array([k[0] for k in keys])
    hour = np.array([-1 if k[1] == "__HIVE_DEFAULT_PARTITION__" else int(k[1]) for k in keys])
    assert want(day, hour).all() and len(src.files) > 0
    every = sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)
    kdays = [f.split("day=")[1][:10] for f in every]
    khours = [f.split("hour=")[1].split("/")[0] for f in every]
    expect = want(np.array(kdays), np.array([-1 if h.startswith("__") else int(h) for h in khours]))
    assert sorted(src.files) == sorted(f for f, e in zip(every, expect) if e)
    assert set(opened) == set(src.files)  # the other files' footers are never read
    rows = pa.Table.from_batches([rb for _, _, rb in src.record_batches(["id"], 1000)])
    mask = want(t.column("day").to_numpy(zero_copy_only=False), t.column("hour").fill_null(-1).to_numpy())
    assert sorted(rows.column("id").to_pylist()) == sorted(np.flatnonzero(mask).tolist())


def test_where_as_a_pyarrow_expression_and_in_every_command(tmp_path):
    path, t, X, y = _lake(tmp_path)
    a = streamclust.lake(path, where=pc.field("day") == "2026-12-02")
    b = streamclust.lake(path, where="day = '2026-12-02'")
    assert a.files == b.files and a.n_rows == int((t.column("day").to_numpy(zero_copy_only=False) == "2026-12-02").sum())
    r = CliRunner().invoke(main, ["fit", path, "-k", "3", "-f", "x", "-q", "--where", "day = '2026-12-02'",
                                  "-o", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    assert streamclust.load_model(str(tmp_path / "m")).info["rows"] == a.n_rows
    r = CliRunner().invoke(main, ["info", path, "--where", "day = '2026-12-02'", "--json"])
    assert r.exit_code == 0 and f'"rows": {a.n_rows}' in r.output and '"partition_columns": ["day", "hour"]' in r.output
    import json
    shown = json.loads(r.output)["partition_values"]
    assert shown == {"day": ["2026-12-02"], "hour": [0, 1, None]}  # the files read; null last
    from streamclust.cli_explore import _values_shown
    many = _values_shown({"d": list(range(30))})["d"]
    assert many[:6] == [0, 1, 2, 3, 4, 5] and many[-6:] == list(range(24, 30)) and "18 more" in many[6]


@pytest.mark.parametrize("text, match", [
    ("x > 1", r"partition columns only \(day, hour\); 'x' is not one"),
    ("day >= 2", r"cannot be evaluated .*day: string"),
    ("day >", r"expected a number or a 'quoted' value"),
    ("hour = 1 hour", r"unexpected 'hour'"),
    ("day = '2027-01-01'", r"no file matches"),
    ("", r"empty"),
])
def test_where_errors_say_what_is_wrong(tmp_path, text, match):
    path, *_ = _lake(tmp_path)
    with pytest.raises(streamclust.DataError, match=match):
        streamclust.lake(path, where=text)


def test_where_needs_partitioned_parquet(tmp_path):
    t, X, y = _table(scalar=True)
    flat = str(tmp_path / "flat.parquet")
    pq.write_table(t.drop(["day", "hour"]), flat)
    with pytest.raises(streamclust.DataError, match="has none"):
        streamclust.lake(flat, where="day = '2026-12-01'")
    csv = str(tmp_path / "t.csv")
    import pyarrow.csv as pcsv
    pcsv.write_csv(t.drop(["day", "hour"]), csv)
    with pytest.raises(streamclust.DataError, match="not Parquet|is CSV"):
        streamclust.lake(csv, where="day = '2026-12-01'")


def test_a_key_that_is_a_column_of_the_files_is_the_files_column(tmp_path):
    t, X, y = _table(n=60, scalar=True)
    d = tmp_path / "lake" / "day=2026-12-09"
    d.mkdir(parents=True)
    pq.write_table(t, str(d / "p.parquet"))  # day inside the files too (not 2026-12-09)
    src = streamclust.lake(str(tmp_path / "lake"))
    assert src.partition_columns == ()
    got = pa.Table.from_batches([rb for _, _, rb in src.record_batches(["day"], 100)])
    assert got.column("day").to_pylist() == t.column("day").to_pylist()


def test_parse_where_builds_pyarrow_expressions():
    e, names = parse_where("a = 'it''s' or (b >= 2.5 and not c in (1, 2))")
    want = (pc.field("a") == "it's") | ((pc.field("b") >= 2.5) & ~pc.field("c").isin([1, 2]))
    assert e.equals(want) and names == ["a", "b", "c"]


def test_an_update_with_where_reads_the_new_matching_partition_only(tmp_path):
    """A fit of the days from 2026-12-02 on; a new day arrives: ``fit --update --where`` adds
    its rows only (the earlier day stays out)."""
    X, _ = make_blobs(n=3000, k=3, d=4, seed=1)

    def day(name, rows):
        d = tmp_path / "lake" / f"day={name}"
        d.mkdir(parents=True)
        pq.write_table(pa.table({"id": rows, "x": pa.FixedSizeListArray.from_arrays(
            pa.array(X[rows].astype(np.float32).ravel()), 4)}), str(d / "part-0.parquet"))
    day("2026-12-01", np.arange(0, 1000))
    day("2026-12-02", np.arange(1000, 2000))
    lake, work, where = str(tmp_path / "lake"), str(tmp_path / "w"), "day >= '2026-12-02'"
    r = CliRunner().invoke(main, ["fit", lake, "-k", "3", "--where", where, "--work-dir", work, "-q",
                                  "-o", str(tmp_path / "m1")])
    assert r.exit_code == 0, r.output
    day("2026-12-03", np.arange(2000, 3000))
    r = CliRunner().invoke(main, ["fit", lake, "--update", "--where", where, "--work-dir", work, "-q",
                                  "--json", "-o", str(tmp_path / "m2")])
    assert r.exit_code == 0, r.output
    import json
    got = json.loads(r.output.strip().splitlines()[-1])
    assert got["rows_added"] == 1000 and got["files_added"] == 1 and got["rows"] == 2000


def test_quoted_values_and_names_never_read_as_keywords():
    """'or' quoted is a value, "and" quoted a column; an unquoted word where a value belongs is
    an error, not the string."""
    e, names = parse_where("\"and\" = 'or' or b in ('in', 'x')")
    assert e.equals((pc.field("and") == "or") | pc.field("b").isin(["in", "x"])) and names == ["and", "b"]
    with pytest.raises(streamclust.DataError, match="expected a number or a 'quoted' value"):
        parse_where("day = str")
