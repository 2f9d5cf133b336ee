"""The kNN graph against brute force (exact neighbours): cells, the boundary test, merging,
reuse, appending, symmetrisation."""
import os

import numpy as np
import pytest
from click.testing import CliRunner

import streamclust
from streamclust.cli import main
from streamclust.errors import DataError, ParameterError
from streamclust.testing import make_blobs

from conftest import exact_d2, write_parquet_dir


def _exact(X, k):
    D = exact_d2(X, X)
    np.fill_diagonal(D, np.inf)
    ids = np.argsort(D, axis=1, kind="stable")[:, :k]
    return ids, np.sqrt(np.maximum(np.take_along_axis(D, ids, 1), 0))


def _exact_of(X, rows, k):
    """The exact k nearest other rows of ``rows`` by float64 brute force over ``X`` (the whole
    matrix of a large ``X`` would not fit)."""
    d = exact_d2(X[rows], X)
    d[np.arange(len(rows)), rows] = np.inf
    return np.argsort(d, 1)[:, :k]


def _recall(ids, exact):
    return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(ids, exact)])


@pytest.mark.parametrize("opts", [{}, {"cell_rows": 250}, {"cell_rows": 250, "max_probes": 0}])
def test_graph_matches_brute_force(opts):
    X, _ = make_blobs(n=2000, k=8, d=12, seed=3, spread=1.5)
    X = X.astype(np.float32)
    g = streamclust.knn_graph(X, 5, batch_size=300, **opts)
    ids, dist = _exact(X, 5)
    assert g.ids.shape == (2000, 5) and g.ids.dtype == np.int64 and g.distances.dtype == np.float32
    assert (g.ids != np.arange(2000)[:, None]).all(), "a row is not its own neighbour"
    assert _recall(g.ids, ids) >= 0.99
    assert (np.diff(g.distances, axis=1) >= 0).all()
    own = np.linalg.norm(X[:, None, :] - X[g.ids], axis=2)
    np.testing.assert_allclose(g.distances, own, rtol=1e-4, atol=1e-4)


def test_symmetric_graph_is_the_average_of_a_and_its_transpose():
    X, _ = make_blobs(n=300, k=3, d=4, seed=1)
    g = streamclust.knn_graph(X, 4)
    A = np.zeros((300, 300))
    A[np.repeat(np.arange(300), 4), g.ids.ravel()] = 1
    np.testing.assert_array_equal(g.symmetric().toarray(), (A + A.T) / 2)
    starts = [s for s, _, _ in g.iter_batches(128)]
    assert starts == [0, 128, 256]


def test_graph_is_reused_from_the_work_directory(tmp_path, blobs):
    X, y = blobs
    data = write_parquet_dir(str(tmp_path / "d"), X, y)
    work = str(tmp_path / "w")
    g1 = streamclust.knn_graph(data, 5, work_dir=work, features="embedding")
    stamp = os.path.getmtime(os.path.join(work, "knn", "graph_ids.npy"))
    g2 = streamclust.knn_graph(data, 5, work_dir=work, features="embedding")
    assert os.path.getmtime(os.path.join(work, "knn", "graph_ids.npy")) == stamp
    np.testing.assert_array_equal(g1.ids, g2.ids)
    g3 = streamclust.knn_graph(data, 3, work_dir=work, features="embedding")  # other k: rebuilt
    assert g3.ids.shape == (len(X), 3)


def test_too_few_rows_is_a_clear_error():
    with pytest.raises(DataError, match="need at least k \\+ 1 rows"):
        streamclust.knn_graph(np.zeros((3, 2)), 3)


def test_cli_graph(tmp_path, blobs):
    X, y = blobs
    data = write_parquet_dir(str(tmp_path / "d"), X, y)
    out = str(tmp_path / "g")
    r = CliRunner().invoke(main, ["graph", data, "--neighbors", "4", "--out", out, "-f", "embedding"])
    assert r.exit_code == 0, r.output
    g = streamclust.KNNGraph.load(os.path.join(out, "knn"))
    assert _recall(g.ids, _exact(X, 4)[0]) >= 0.99
    r = CliRunner().invoke(main, ["graph", data, "-n", "4", "--out", str(tmp_path / "r"), "-f",
                                  "embedding", "--reference-rows", "100"])
    assert r.exit_code == 0, r.output
    ids = streamclust.KNNGraph.load(str(tmp_path / "r" / "knn")).ids
    assert np.isin(ids, _reference(str(tmp_path / "r"))).all() and len(np.unique(ids)) <= 100


# 3 files: 0.992 of the old rows' neighbours without tasks.WIDE_JOIN
@pytest.mark.parametrize("files,min_recall_old", [(10, 0.99), (3, 0.995)])
def test_appending_files_extends_the_graph(tmp_path, files, min_recall_old):
    """10 % more rows (and 50 %): new rows found as in a full build, old rows gain them."""
    X, _ = make_blobs(n=3000, k=6, d=8, seed=5, spread=1.0)
    X = X.astype(np.float32)
    data = write_parquet_dir(str(tmp_path / "d"), X, files=files)
    later = sorted(os.listdir(data))[-1]
    os.rename(os.path.join(data, later), str(tmp_path / "held-back.parquet"))
    work = str(tmp_path / "w")
    opts = dict(work_dir=work, features="embedding", cell_rows=500, threads=2, batch_size=256)
    g1 = streamclust.knn_graph(data, 5, **opts)
    n1 = len(g1.ids)
    old_ids, old_dist = np.array(g1.ids), np.array(g1.distances)
    assert g1.status == "built" and n1 == 3000 - 3000 // files
    cells = [f for f in os.listdir(os.path.join(work, "knn")) if f.endswith(".bin")]
    os.rename(str(tmp_path / "held-back.parquet"), os.path.join(data, later))  # sorts last
    g2 = streamclust.knn_graph(data, 5, **opts)
    assert g2.status == "appended" and len(g2.ids) == 3000
    assert sorted(f for f in os.listdir(os.path.join(work, "knn")) if f.endswith(".bin")) == sorted(cells)
    exact = _exact(X, 5)[0]
    assert _recall(g2.ids[n1:], exact[n1:]) >= 0.99
    assert _recall(g2.ids[:n1], exact[:n1]) >= min_recall_old
    own = np.linalg.norm(X[:, None, :] - X[g2.ids], axis=2)
    np.testing.assert_allclose(g2.distances, own, rtol=1e-4, atol=1e-4)
    assert (np.diff(g2.distances, axis=1) >= 0).all()
    # old rows whose neighbours are now new rows were updated; the others keep their lists
    # and distances as they were
    assert (np.asarray(g2.ids[:n1]) >= n1).any(1).mean() > 0.05
    same = (np.asarray(g2.ids[:n1]) == old_ids).all(1)
    assert same.mean() > 0.1
    np.testing.assert_array_equal(np.asarray(g2.distances[:n1])[same], old_dist[same])
    g3 = streamclust.knn_graph(data, 5, **opts)
    assert g3.status == "reused"
    np.testing.assert_array_equal(g3.ids, g2.ids)


def test_the_rows_hash_is_that_of_its_pieces_whatever_the_threads(tmp_path, monkeypatch):
    """The hash of rows [0, n) hashes pieces of HASH_ROWS rows in parallel: the same on 1 and 2
    threads, the pair (stop, more) equals two single calls, one flipped bit anywhere (values,
    the last bytes of a piece) or another row count changes it; the hashes of graphs written
    before (blake2b of each piece, ``b2p:``; one plain blake2b) are recomputed as they were
    written, so such a graph is still appended to, and one whose rows changed is built again."""
    import hashlib
    import json
    from streamclust.base.threads import use_threads
    from streamclust.graph import rowhash
    monkeypatch.setattr(rowhash, "HASH_ROWS", 7)
    X = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    with use_threads(1):
        one = rowhash.rows_hash(X, 40)
    with use_threads(2):
        assert rowhash.rows_hash(X, 40) == one
        assert rowhash.rows_hash(X, 17, more=40) == (rowhash.rows_hash(X, 17), one)
    assert one.startswith(rowhash.HASH_KIND) and rowhash.rows_hash(X, 39) != one
    for i in (0, 20, 39):
        for bit in (0, 13, 31):
            Y = X.copy()
            Y.view(np.uint32)[i, 1] ^= np.uint32(1 << bit)
            assert rowhash.rows_hash(Y, 40) != one
    raw = np.random.default_rng(1).integers(0, 256, 203, dtype=np.uint8)  # not whole words
    digests = {rowhash.piece_digest(raw[:n]) for n in range(150, 204)}
    for pos in range(0, 203, 5):
        flipped = raw.copy()
        flipped[pos] ^= 0x80
        digests.add(rowhash.piece_digest(flipped))
    assert len(digests) == 54 + 41
    pieces = b"".join(hashlib.blake2b(X[lo:lo + 7].tobytes(), digest_size=16).digest()
                      for lo in range(0, 40, 7))
    h = hashlib.blake2b(np.int64(40).tobytes() + pieces, digest_size=16, person=b"streamclust-rows")
    assert rowhash.rows_hash_b2p(X, 40) == "b2p:" + h.hexdigest()  # as 12-07's graphs hold it
    plain = hashlib.blake2b(X.tobytes(), digest_size=16).hexdigest()
    assert rowhash.legacy_rows_hash(X, 40) == plain
    monkeypatch.undo()
    # graphs written with the older hashes: their rows are recognised and the new ones appended
    X, _ = make_blobs(n=1200, k=4, d=5, seed=3)
    data = write_parquet_dir(str(tmp_path / "d"), X.astype(np.float32), files=4)
    later = sorted(os.listdir(data))[-1]
    os.rename(os.path.join(data, later), str(tmp_path / "later.parquet"))
    old = X[:900].astype(np.float32)
    for kind, written in (("plain", rowhash.legacy_rows_hash(old, 900)),
                          ("b2p", rowhash.rows_hash_b2p(old, 900)),
                          ("changed", rowhash.rows_hash_b2p(old + 1, 900))):
        work = str(tmp_path / kind)
        opts = dict(work_dir=work, features="embedding", cell_rows=300, threads=2)
        g = streamclust.knn_graph(data, 5, **opts)
        meta_path = os.path.join(work, "knn", "knn.json")
        meta = json.load(open(meta_path))
        assert len(g.ids) == 900 and meta["rows_hash"].startswith(rowhash.HASH_KIND)
        meta["rows_hash"] = written
        json.dump(meta, open(meta_path, "w"))
        os.rename(str(tmp_path / "later.parquet"), os.path.join(data, later))
        g2 = streamclust.knn_graph(data, 5, **opts)
        assert g2.status == ("built" if kind == "changed" else "appended")
        assert len(g2.ids) == 1200
        os.rename(os.path.join(data, later), str(tmp_path / "later.parquet"))
    assert json.load(open(meta_path))["rows_hash"] == rowhash.rows_hash(X.astype(np.float32), 1200)


@pytest.mark.parametrize("degree,ef,expect", [(0, 0, 24), (30, 0, 60), (30, 80, 80)])
def test_rows_of_other_cells_walk_a_cell_as_broadly_as_twice_its_lists(tmp_path, monkeypatch,
                                                                        degree, ef, expect):
    """Searches across a boundary keep max(ef, LIST_EF × the cell's list length): a cell built
    with long lists (a cloud of many dimensions) is walked more broadly, one built with the
    default 12 as before (ef 24), and a larger ef is kept; the graph still matches brute force."""
    from streamclust.graph import searches
    seen = []
    real = searches.CellSearch

    def spy(Xc, cell, settings, c, centres=None):
        seen.append((cell[1].shape[1], settings["ef"]))
        return real(Xc, cell, settings, c, centres)
    monkeypatch.setattr(searches, "CellSearch", spy)
    X, _ = make_blobs(n=2400, k=6, d=8, seed=4, spread=2.0)
    X = X.astype(np.float32)
    data = write_parquet_dir(str(tmp_path / "d"), X, files=2)
    g = streamclust.knn_graph(data, 5, work_dir=str(tmp_path / "w"), features="embedding",
                              cell_rows=400, degree=degree, ef=ef, threads=2)
    assert seen and all(lists == (degree or 12) and e == expect for lists, e in seen)
    assert _recall(g.ids, _exact(X, 5)[0]) >= 0.99


def test_a_cell_outgrowing_twice_its_size_rebuilds(tmp_path):
    X, _ = make_blobs(n=3000, k=4, d=5, seed=2)
    X = X.astype(np.float32)
    work = str(tmp_path / "w")
    g1 = streamclust.knn_graph(X[:1000], 4, work_dir=work, cell_rows=500, threads=1)
    g2 = streamclust.knn_graph(X, 4, work_dir=work, cell_rows=500, threads=1)
    assert (g1.status, g2.status) == ("built", "built")
    assert _recall(g2.ids, _exact(X, 4)[0]) >= 0.99


def test_boundary_test_keeps_every_cell_holding_a_true_neighbour():
    """The halfway-hyperplane test against brute force: for every row and every cell other
    than its own that holds one of its exact k nearest, the row is searched in that cell."""
    from streamclust.graph.cells import assign, coarse_centres, probe_pairs
    X, _ = make_blobs(n=1500, k=5, d=6, seed=4, spread=2.0)
    X = X.astype(np.float32)
    centres = coarse_centres(X, len(X), 7, seed=0)
    own = np.empty(len(X), np.int32)
    assign(X, 0, len(X), centres, own, 256)
    ids, dist = _exact(X, 6)
    pairs = probe_pairs(X, own, lambda s, e: dist[s:e, -1] * (1 + 1e-6), 0, len(X), centres, 256, 0)
    searched = {(int(r), int(c)) for rows, cells, _ in pairs() for r, c in zip(rows, cells)}
    needed = {(i, int(own[j])) for i in range(len(X)) for j in ids[i] if own[j] != own[i]}
    assert needed and needed <= searched
    assert len(searched) < 0.5 * len(X) * (len(centres) - 1)  # the test prunes


@pytest.mark.parametrize("data, wide", [("uniform 2-D", False), ("blobs 3-D", False),
                                        ("gaussian 40-D", True), ("blobs 20-D", True)])
def test_probe_ratio_skips_boundaries_only_where_brute_force_finds_few_neighbours(data, wide):
    """``probe_ratio`` against brute force: with each row's exact k nearest within its own
    cell as its list, count the exact (global) k nearest that lie in cells whose boundary is
    beyond ratio · r, the ones the graph would lose.  Few dimensions: every search the exact
    test asks for (ratio 1); many: fewer searches, losing under 0.02 neighbours a row."""
    from streamclust.graph.cells import assign, coarse_centres, probe_ratio, sqdist_to
    rng = np.random.default_rng(0)
    X = {"uniform 2-D": lambda: rng.random((3000, 2)),
         "blobs 3-D": lambda: make_blobs(n=3000, k=5, d=3, seed=4, spread=2.0)[0],
         "gaussian 40-D": lambda: rng.standard_normal((3000, 40)),
         "blobs 20-D": lambda: make_blobs(n=3000, k=5, d=20, seed=4, spread=2.0)[0]}[data]()
    X, k, rows = X.astype(np.float32), 10, np.arange(3000)
    centres = coarse_centres(X, len(X), 6, seed=0)
    own = np.empty(len(X), np.int32)
    assign(X, 0, len(X), centres, own, 256)
    X64 = X.astype(np.float64)
    D = (X64 ** 2).sum(1)[:, None] + (X64 ** 2).sum(1)[None] - 2 * X64 @ X64.T
    np.fill_diagonal(D, np.inf)
    inside = np.where(own[:, None] == own[None, :], D, np.inf)
    lists = np.argsort(inside, 1)[:, :k]
    ratio = probe_ratio(X, (lists, np.take_along_axis(inside, lists, 1)), rows, own, centres)
    c_sq = (centres ** 2).sum(1)
    gap = 2 * np.sqrt(sqdist_to(centres, centres, c_sq))
    np.fill_diagonal(gap, np.inf)
    Dx = sqdist_to(X, centres, c_sq)
    h = (Dx - Dx[rows, own][:, None]) / gap[own]  # each row's distance to each boundary
    r = np.sqrt(np.take_along_axis(inside, lists[:, -1:], 1)[:, 0])
    exact = np.argsort(D, 1)[:, :k]
    across = own[exact] != own[:, None]
    skipped = ~(np.take_along_axis(h, own[exact].astype(np.int64), 1) < ratio * r[:, None])
    assert across.sum() > 0.05 * len(X)  # the cells' boundaries matter here
    if wide:
        assert ratio < 0.8 and (across & skipped).sum() / len(X) < 0.02
    else:
        assert ratio == 1.0 and not (across & skipped).any()


def test_merging_candidate_lists_matches_a_sort():
    from streamclust.graph.lists import insert_rows
    rng = np.random.default_rng(0)
    n, k = 50, 6
    ids = np.full((n, k), -1, np.int64)
    d2 = np.full((n, k), np.inf, np.float32)
    seen = {i: {} for i in range(n)}
    for _ in range(4):
        rows = np.sort(rng.choice(n, 30, replace=False))
        c_ids = rng.integers(0, 40, (30, 5))
        c_d2 = (c_ids * 0.5 + 1.0).astype(np.float32)  # a fixed distance per id
        insert_rows((ids, d2), rows, (c_ids, c_d2))
        for r, ci, cd in zip(rows, c_ids, c_d2):
            seen[int(r)].update(zip(ci.tolist(), cd.tolist()))
    for r in range(n):
        best = sorted(seen[r].items(), key=lambda t: t[1])[:k]
        got = [(int(i), float(d)) for i, d in zip(ids[r], d2[r]) if i >= 0]
        assert got == [(i, float(np.float32(d))) for i, d in best]


def test_the_graph_does_not_depend_on_threads_when_cell_rows_sets_the_cells():
    X, _ = make_blobs(n=2400, k=5, d=6, seed=8)
    X = X.astype(np.float32)
    a = streamclust.knn_graph(X, 5, cell_rows=400, threads=1, seed=3)
    b = streamclust.knn_graph(X, 5, cell_rows=400, threads=2, seed=3)
    np.testing.assert_array_equal(a.ids, b.ids)


def test_renamed_shard_options_still_work_with_a_warning():
    X, _ = make_blobs(n=600, k=3, d=4, seed=1)
    with pytest.warns(FutureWarning, match="now 'cell_rows'"):
        g = streamclust.knn_graph(X, 4, shard_rows=300)
    assert _recall(g.ids, _exact(X, 4)[0]) >= 0.99
    with pytest.raises(ParameterError, match="unknown kNN option"):
        streamclust.knn_graph(X, 4, cells=3)


@pytest.mark.parametrize("option,word", [({"cell_rows": "many"}, "cell_rows must be an integer"),
                                         ({"degree": -3}, "degree must be an integer >= 0"),
                                         ({"cells": 3}, "unknown kNN option")])
def test_a_bad_graph_option_is_refused_before_the_pass_over_the_rows(tmp_path, option, word):
    """A graph option that is not an integer in range, or unknown, is a one-line error naming
    it, from ``fit(knn_options=…)`` and ``knn_graph`` alike, raised before the feature cache is
    written (before, the fit's came after the pass, and ``"many"`` as int()'s ValueError)."""
    X, _ = make_blobs(n=600, k=3, d=4, seed=1)
    data = write_parquet_dir(str(tmp_path / "d"), X.astype(np.float32), files=1)
    for run in (lambda w: streamclust.fit(data, "slk", 3, features="embedding", work_dir=w,
                                          knn_options=option, progress=False),
                lambda w: streamclust.knn_graph(data, 4, features="embedding", work_dir=w,
                                                **option)):
        work = tmp_path / "w"
        work.mkdir()
        with pytest.raises(ParameterError, match=word):
            run(str(work))
        assert os.listdir(work) == []
        work.rmdir()


def test_changed_old_rows_force_a_full_rebuild(tmp_path):
    X, _ = make_blobs(n=1200, k=4, d=5, seed=6)
    work = str(tmp_path / "w")
    g1 = streamclust.knn_graph(X[:800].astype(np.float32), 4, work_dir=work)
    Y = X.astype(np.float32).copy()
    Y[10] += 1.0  # an old row changed: its hash no longer matches
    g2 = streamclust.knn_graph(Y, 4, work_dir=work)
    assert g1.status == "built" and g2.status == "built"
    assert _recall(g2.ids, _exact(Y, 4)[0]) >= 0.99


def test_parallel_cells_are_deterministic():
    X, _ = make_blobs(n=2400, k=5, d=6, seed=8)
    X = X.astype(np.float32)
    a = streamclust.knn_graph(X, 5, min_cell_rows=600, threads=2, seed=3)
    b = streamclust.knn_graph(X, 5, min_cell_rows=600, threads=2, seed=3)
    np.testing.assert_array_equal(a.ids, b.ids)
    assert _recall(a.ids, _exact(X, 5)[0]) >= 0.99


def test_an_extended_cell_index_takes_the_joined_rows_and_answers_as_brute_force(tmp_path):
    """Rows appended after the index was built: each grown cell keeps its hnswlib index of the
    old rows (``.part.bin``) and the next load adds only the rows that joined it; the index then
    holds every row of its cell and answers new queries as brute force does."""
    from streamclust.graph.knn import load_index
    X, _ = make_blobs(n=3300, k=6, d=8, seed=5, spread=1.0)
    X = X.astype(np.float32)
    data = write_parquet_dir(str(tmp_path / "d"), X[:3000], files=10)
    work = str(tmp_path / "w")
    opts = dict(work_dir=work, features="embedding", cell_rows=500, threads=2, batch_size=256)
    streamclust.knn_graph(data, 5, **opts)
    knn = os.path.join(work, "knn")
    load_index(knn)
    built = {f: os.path.getmtime(os.path.join(knn, f)) for f in os.listdir(knn)
             if f.startswith("cell_") and f.endswith(".bin")}
    write_parquet_dir(str(tmp_path / "more"), X[3000:], files=1)
    os.rename(os.path.join(str(tmp_path / "more"), os.listdir(str(tmp_path / "more"))[0]),
              os.path.join(data, "zz-late.parquet"))
    g = streamclust.knn_graph(data, 5, **opts)
    assert g.status == "appended"
    parts = [f for f in os.listdir(knn) if f.endswith(".part.bin")]
    assert parts and all(f.replace(".part", "") not in os.listdir(knn) for f in parts)
    index = load_index(knn)
    assert not [f for f in os.listdir(knn) if f.endswith(".part.bin")]
    assert index.n_rows == 3300 and sorted(built) == sorted(
        f for f in os.listdir(knn) if f.startswith("cell_") and f.endswith(".bin"))
    Q = X[3000:] + np.float32(0.05)
    ids, _ = index.query(Q, 5)
    D = ((Q[:, None, :].astype(np.float64) - X[None].astype(np.float64)) ** 2).sum(2)
    assert _recall(ids, np.argsort(D, axis=1)[:, :5]) >= 0.99


def test_knn_index_query_of_new_rows_in_memory_and_on_demand(tmp_path):
    """New rows against brute force; a saved index of more than 8 cells reads its cells on
    demand (at most 8 held) and answers as the in-memory one."""
    from streamclust.graph.index import KNNIndex
    from streamclust.graph.knn import load_index
    X, _ = make_blobs(n=1500, k=5, d=6, seed=9)
    X = X.astype(np.float32)
    work = str(tmp_path / "w")
    streamclust.knn_graph(X[:1000], 5, work_dir=work, cell_rows=80, threads=2)
    index = load_index(os.path.join(work, "knn"))
    assert len(index.shards) >= 12 and index.n_rows == 1000
    ids, dist = index.query(X[1000:], 5)
    D = ((X[1000:, None, :] - X[None, :1000, :]) ** 2).sum(2)
    exact = np.argsort(D, 1)[:, :5]
    assert _recall(ids, exact) >= 0.98
    np.testing.assert_allclose(dist, np.sqrt(np.take_along_axis(D, ids, 1)), rtol=1e-4, atol=1e-5)
    names = index.save(str(tmp_path))
    lazy = KNNIndex.load([str(tmp_path / n) for n in names], 6, index.ef)
    assert all(isinstance(s, str) for s in lazy.shards) and lazy.n_rows == 1000
    np.testing.assert_array_equal(lazy.query(X[1000:], 5)[0], ids)
    assert len(lazy._loaded) <= 8


def _reference(work):
    return np.load(os.path.join(work, "knn", "reference.npy"))


def test_reference_rows_find_the_nearest_rows_of_a_uniform_sample(tmp_path):
    """``reference_rows=m``: each row's k nearest among m rows sampled uniformly, against brute
    force over that sample; the sample is fixed by the seed and every neighbour is in it."""
    X, _ = make_blobs(n=3000, k=6, d=8, seed=7, spread=1.0)
    X = X.astype(np.float32)
    work = str(tmp_path / "w")
    opts = dict(work_dir=work, cell_rows=250, threads=2, batch_size=256)
    g = streamclust.knn_graph(X, 5, reference_rows=600, **opts)
    ref = _reference(work)
    assert len(ref) == 600 and len(np.unique(ref)) == 600 and (np.diff(ref) > 0).all()
    ids = np.asarray(g.ids)
    assert np.isin(ids, ref).all() and (ids != np.arange(3000)[:, None]).all()
    D = ((X[:, None, :].astype(np.float64) - X[ref][None]) ** 2).sum(2)
    D[ref, np.arange(600)] = np.inf  # a sampled row is not its own neighbour
    exact = ref[np.argsort(D, axis=1, kind="stable")[:, :5]]
    assert _recall(ids, exact) >= 0.99
    own = np.linalg.norm(X[:, None, :] - X[ids], axis=2)
    np.testing.assert_allclose(g.distances, own, rtol=1e-4, atol=1e-4)
    # uniform: the sample's share of each half of the rows is about a half (binomial sd 12)
    assert abs(int((ref < 1500).sum()) - 300) < 50
    other = str(tmp_path / "other")
    g2 = streamclust.knn_graph(X, 5, reference_rows=600, **dict(opts, work_dir=other))
    np.testing.assert_array_equal(g2.ids, g.ids)
    np.testing.assert_array_equal(_reference(other), ref)
    g3 = streamclust.knn_graph(X, 5, reference_rows=600, **dict(opts, work_dir=str(tmp_path / "s"),
                                                                   seed=1))
    assert not np.array_equal(_reference(str(tmp_path / "s")), ref)
    assert g3.status == "built"


def test_rows_outside_the_reference_sample_are_searched_in_parts_with_the_same_answers(
        tmp_path, monkeypatch, caplog):
    """The rows outside the sample are searched in their cell's graph in parts, so that the
    threads share them whatever the cells' sizes: parts of a few hundred rows (several per
    cell) give the graph of one part per cell to the bit, and brute force's neighbours among
    the sample."""
    import logging
    from streamclust.graph import build
    X, _ = make_blobs(n=4000, k=6, d=8, seed=3, spread=1.0)
    X = X.astype(np.float32)
    opts = dict(cell_rows=300, threads=2, batch_size=128, reference_rows=700)
    monkeypatch.setattr(build, "SEARCH_BATCH", 10 ** 9)
    whole = streamclust.knn_graph(X, 5, work_dir=str(tmp_path / "whole"), **opts)
    monkeypatch.setattr(build, "SEARCH_BATCH", 100)
    with caplog.at_level(logging.DEBUG, logger="streamclust"):
        parts = streamclust.knn_graph(X, 5, work_dir=str(tmp_path / "parts"), **opts)
    cells = len(np.load(tmp_path / "parts" / "knn" / "centres.npy"))
    searched = caplog.text.count("of its rows outside the sample searched")
    assert searched > cells >= 2  # cells of several parts
    np.testing.assert_array_equal(parts.ids, whole.ids)
    np.testing.assert_array_equal(parts.distances, whole.distances)
    ref = _reference(str(tmp_path / "parts"))
    D = ((X[:, None, :].astype(np.float64) - X[ref][None]) ** 2).sum(2)
    D[ref, np.arange(len(ref))] = np.inf
    assert _recall(np.asarray(parts.ids), ref[np.argsort(D, axis=1, kind="stable")[:, :5]]) >= 0.99


def test_reference_rows_of_at_least_the_data_is_the_ordinary_graph(tmp_path):
    X, _ = make_blobs(n=800, k=4, d=6, seed=2)
    data = write_parquet_dir(str(tmp_path / "d"), X)
    work = str(tmp_path / "w")
    opts = dict(work_dir=work, features="embedding")
    g1 = streamclust.knn_graph(data, 4, **opts)
    g2 = streamclust.knn_graph(data, 4, reference_rows=800, **opts)
    assert g2.status == "reused"  # the same graph: reused, not built again
    np.testing.assert_array_equal(g1.ids, g2.ids)
    g3 = streamclust.knn_graph(data, 4, reference_rows=400, **opts)
    assert g3.status == "built" and len(np.unique(g3.ids)) <= 400
    with pytest.raises(ParameterError, match="reference_rows must exceed n_neighbors"):
        streamclust.knn_graph(X, 4, reference_rows=3)


def test_cells_smaller_than_a_row_and_its_neighbours_are_refused_before_any_pass(tmp_path):
    """cell_rows ≤ k is refused in one line, the cache not built; k + 1 (the smallest cells
    allowed) still finds the neighbours brute force finds."""
    X, _ = make_blobs(n=150, k=4, d=6, seed=3)
    work = str(tmp_path / "w")
    for bad in (1, 5):
        with pytest.raises(ParameterError, match=f"cell_rows must be 0 .* n_neighbors = 5.* got {bad}"):
            streamclust.knn_graph(X, 5, cell_rows=bad, work_dir=work)
        assert not os.path.exists(os.path.join(work, "features.f32"))
    g = streamclust.knn_graph(X, 5, cell_rows=6, min_cell_rows=1, work_dir=work)
    D = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    truth = np.argsort(D, 1)[:, :5]
    recall = np.mean([len(set(truth[i]) & set(g.ids[i])) / 5 for i in range(len(X))])
    assert recall >= 0.95


def test_appended_rows_grow_the_reference_sample_at_its_rate(tmp_path):
    """An extension draws the sample's share of the new rows into it (10 % here, as of the old
    rows); new rows find their nearest among the grown sample, old sampled rows take new sampled
    rows that are nearer, other old rows keep their lists (they are not searched again)."""
    X, _ = make_blobs(n=3300, k=6, d=8, seed=5, spread=1.0)
    X = X.astype(np.float32)
    data = write_parquet_dir(str(tmp_path / "d"), X, files=11)
    later = sorted(os.listdir(data))[-1]
    os.rename(os.path.join(data, later), str(tmp_path / "held-back.parquet"))
    work = str(tmp_path / "w")
    opts = dict(work_dir=work, features="embedding", cell_rows=250, threads=2, batch_size=256,
                reference_rows=500)
    g1 = streamclust.knn_graph(data, 5, **opts)
    old, n1, ref = np.array(g1.ids), len(g1.ids), _reference(work)
    os.rename(str(tmp_path / "held-back.parquet"), os.path.join(data, later))
    g2 = streamclust.knn_graph(data, 5, **opts)
    assert g2.status == "appended" and len(g2.ids) == 3300
    grown = _reference(work)
    added = grown[len(ref):]
    np.testing.assert_array_equal(grown[:len(ref)], ref)
    assert len(added) == round(500 * 300 / 3000) and (added >= n1).all() and (np.diff(grown) > 0).all()
    ids = np.asarray(g2.ids)
    outside = ~np.isin(np.arange(n1), ref)
    np.testing.assert_array_equal(ids[:n1][outside], old[outside])  # not searched again
    assert np.isin(ids, grown).all()
    D = ((X[:, None, :].astype(np.float64) - X[grown][None]) ** 2).sum(2)
    D[grown, np.arange(len(grown))] = np.inf
    exact = grown[np.argsort(D, axis=1, kind="stable")[:, :5]]
    assert _recall(ids[n1:], exact[n1:]) >= 0.99
    assert _recall(ids[ref], exact[ref]) >= 0.97  # old sampled rows meet the new sampled rows
    assert _recall(old[ref], exact[ref]) < 0.95  # (which they had not)


def test_a_cell_far_over_cell_rows_is_split(tmp_path):
    """One tight cluster of most rows beside wide small ones: k-means leaves it one cell (its
    squared error is small), the build splits it, and the graph is still brute force's."""
    rng = np.random.default_rng(0)
    tight = rng.normal(scale=0.05, size=(2400, 6))
    wide = rng.normal(scale=3.0, size=(1600, 6)) + 40 * rng.integers(1, 5, size=(1600, 1))
    X = np.concatenate([tight, wide]).astype(np.float32)
    g = streamclust.knn_graph(X, 5, work_dir=str(tmp_path / "g"), cell_rows=400, min_cell_rows=100)
    import json
    cells = json.load(open(tmp_path / "g" / "knn" / "knn.json"))["cells"]
    assert max(cells) <= 2 * 400 and sum(cells) == 4000
    ids, _ = _exact(X, 5)
    assert _recall(g.ids, ids) >= 0.99
    from streamclust.graph import build
    saved = build.SPLIT_ROUNDS
    try:  # without the split the tight cluster is one cell of about 2 400 rows
        build.SPLIT_ROUNDS = 0
        streamclust.knn_graph(X, 5, work_dir=str(tmp_path / "h"), cell_rows=400, min_cell_rows=100)
    finally:
        build.SPLIT_ROUNDS = saved
    assert max(json.load(open(tmp_path / "h" / "knn" / "knn.json"))["cells"]) > 2 * 400


def test_cells_of_many_dimensions_widen_their_lists_to_the_recall_target(tmp_path):
    """Gaussian rows of 40 dimensions: lists of 12 hold about 0.7 of a row's 10 nearest, so the
    cell is built again with the width the miss asks for, and the graph reaches brute force's
    neighbours; with the widening off it does not."""
    from streamclust.graph import cellbuild
    X = np.random.default_rng(4).normal(size=(6000, 40)).astype(np.float32)
    ids, _ = _exact(X, 10)
    g = streamclust.knn_graph(X, 10, work_dir=str(tmp_path / "g"), cell_rows=10_000)
    width = np.load(tmp_path / "g" / "knn" / "cell_00000.ids.npy").shape[1]
    assert 12 < width <= 40 and _recall(g.ids, ids) >= 0.975
    saved = cellbuild.CELL_RECALL
    try:
        cellbuild.CELL_RECALL = 0.0
        narrow = streamclust.knn_graph(X, 10, cell_rows=10_000)
    finally:
        cellbuild.CELL_RECALL = saved
    assert _recall(narrow.ids, ids) < 0.9


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_cell_read_on_every_thread_holds_the_rows_numpy_indexes(tmp_path, dtype):
    """A cell built or searched alone gathers its rows on numba's threads: from the cache's
    memory map (float16 widened, or float32) and from rows in memory, in any order and with
    repeats, the rows numpy's fancy index gives, as contiguous float32."""
    from streamclust.data.cache import open_cache_file
    from streamclust.graph.files import read_rows
    rng = np.random.default_rng(4)
    A = rng.normal(size=(5000, 37)).astype(dtype)
    path = str(tmp_path / ("rows.f16" if dtype == np.float16 else "rows.f32"))
    A.tofile(path)
    X = open_cache_file(path, 5000, 37)
    ids = np.concatenate([rng.permutation(5000)[:3000], [7, 7, 4999, 0]])
    for source in (X, np.asarray(A, np.float32)):
        want = np.asarray(source[ids], dtype=np.float32)
        for threads in (1, 2):
            got = read_rows(source, ids, threads)
            assert got.dtype == np.float32 and got.flags.c_contiguous
            np.testing.assert_array_equal(got, want)


def test_the_recall_check_takes_the_exact_kth_distance_from_float32_candidates():
    """``exact.kth`` (the cells' recall check) keeps float32 candidates within their rounding
    bound and decides in float64: equal to float64 brute force over every row, across chunks,
    with rows far from the origin, near copies and exact ties; so does it when it measures only
    the rows whose distance in an orthonormal projection can be within a bound of the k-th (a
    list's, as float32 holds it, or none)."""
    from streamclust.graph.exact import kth as _kth_exact
    rng = np.random.default_rng(9)
    X = (rng.normal(size=(3000, 150)) + 20.0 * rng.normal(size=(1, 150))).astype(np.float32)
    X[:2997:9] = X[3::9] + np.float32(2e-3)  # neighbours far nearer than the norms
    X[1:2997:9] = X[4::9]  # exact ties
    # groups of 40 rows within 1e-2 of each other: float32 distances cannot order them
    for g in range(0, 400, 40):
        X[g + 2000:g + 2040] = X[g + 2000] + (rng.normal(size=(40, 150)) * np.linspace(
            1e-3, 1e-2, 40)[:, None]).astype(np.float32)
    rows = np.sort(np.concatenate([rng.choice(2000, 100, replace=False), np.arange(2000, 2400, 20)]))
    V = np.linalg.qr(rng.normal(size=(150, 64)))[0].astype(np.float32)  # orthonormal columns
    flat = np.ascontiguousarray((X @ V) @ V.T)  # the rows in V's span: it holds every distance
    for X in (X, flat):
        Y = X.astype(np.float64)
        d = ((Y[rows, None, :] - Y[None, :, :]) ** 2).sum(2)
        d[np.arange(len(rows)), rows] = np.inf
        P = np.ascontiguousarray(X @ V)
        for k in (1, 10):
            exact = np.sort(d, 1)[:, k - 1]
            np.testing.assert_allclose(_kth_exact(X, rows, k, chunk=700), exact, rtol=1e-9,
                                       atol=1e-9)
            ub = exact.astype(np.float32)  # a list's k-th as float32 holds it, or none (inf)
            ub[::7] = np.inf
            np.testing.assert_allclose(_kth_exact(X, rows, k, chunk=700, near=(P, ub)), exact,
                                       rtol=1e-9, atol=1e-9)


def test_the_recall_check_holds_a_chunk_of_pairs_not_every_pair_at_once():
    """Where a projection bounds little (4 directions of 96, no list's k-th known), every row
    passes for every sample row: 600 000 pairs.  The check measures them a chunk at a time,
    as brute force says, holding a small share of the pairs' rows (float64, 460 MB for all)."""
    import tracemalloc
    from streamclust.graph.exact import kth
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6000, 96)).astype(np.float32)
    rows = np.sort(rng.choice(6000, 100, replace=False))
    V = np.linalg.qr(rng.normal(size=(96, 4)))[0].astype(np.float32)
    P = np.ascontiguousarray(X @ V)
    ub = np.full(100, np.inf, np.float32)
    Y = X.astype(np.float64)
    d = ((Y[rows, None, :] - Y[None, :, :]) ** 2).sum(2)
    d[np.arange(100), rows] = np.inf
    kth(X[:50], rows[:2] % 50, 3, chunk=20, near=(P[:50], ub[:2]))  # (compiled before measured)
    tracemalloc.start()
    got = kth(X, rows, 10, chunk=1000, near=(P, ub))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_allclose(got, np.sort(d, 1)[:, 9], rtol=1e-9)
    assert peak < 100 * 6000 * 96 * 8 / 20, peak


def test_a_probe_starts_a_wide_cell_of_many_dimensions_with_long_lists(tmp_path, caplog):
    """20 000 rows, 160 wide, spread over 40 dimensions: the probe of 5 000 rows foresees lists
    of 12 short, so the cell is built with longer lists at once (no second build) and the graph
    holds brute force's neighbours; rows of 160 features in a 4-dimensional subspace are left at
    the default width."""
    import logging
    from streamclust.graph import cellbuild
    rng = np.random.default_rng(5)
    basis = np.linalg.qr(rng.normal(size=(160, 40)))[0].T
    X = (rng.normal(size=(20_000, 40)) @ basis).astype(np.float32)
    settings = {"degree": 12, "k": 10, "max_candidates": 24}
    assert cellbuild._start_width(X[:3000], settings, [0]) == 12  # too few rows to probe
    assert cellbuild._start_width(X[:, :128].copy(), settings, [0]) == 12  # not wide
    assert cellbuild._start_width((X[:, :4] @ basis[:4]).astype(np.float32), settings, [0]) == 12
    with caplog.at_level(logging.DEBUG, logger="streamclust"):
        g = streamclust.knn_graph(X, 10, work_dir=str(tmp_path / "g"), threads=1)
    assert "a probe of 5000" in caplog.text and "next" not in caplog.text
    assert np.load(tmp_path / "g" / "knn" / "cell_00000.ids.npy").shape[1] > 12
    sample = np.arange(0, 20_000, 67)
    assert _recall(g.ids[sample], _exact_of(X, sample, 10)) >= 0.975


def test_a_cell_whose_trees_split_its_projection_starts_short_unless_its_probe_misses(tmp_path,
                                                                                       caplog):
    """20 000 rows, 130 wide, spread over 14 directions (the trees split their projection): the
    probe itself misses under 1 - CELL_RECALL with lists of 12, though its growth would foresee
    more, so the cell starts with 12; the sample check then finds it short and builds it again
    wider, and the graph holds brute force's neighbours."""
    import logging
    from streamclust.graph import cellbuild
    rng = np.random.default_rng(5)
    basis = np.linalg.qr(rng.normal(size=(130, 14)))[0].T
    X = (rng.normal(size=(20_000, 14)) @ basis).astype(np.float32)
    settings = {"degree": 12, "k": 10, "max_candidates": 24}
    key = [0, 0, cellbuild.PROBE_KEY]
    assert cellbuild._start_width(X, settings, key) > 12  # foreseen from the probe
    assert cellbuild._start_width(X, settings, key, projected=True) == 12  # the probe's own miss
    with caplog.at_level(logging.DEBUG, logger="streamclust"):
        g = streamclust.knn_graph(X, 10, work_dir=str(tmp_path / "g"), threads=1)
    assert "lists of 12; " in caplog.text and "next" in caplog.text  # built again, wider
    assert np.load(tmp_path / "g" / "knn" / "cell_00000.ids.npy").shape[1] > 12
    sample = np.arange(0, 20_000, 67)
    assert _recall(g.ids[sample], _exact_of(X, sample, 10)) >= 0.975


def test_cells_that_cut_one_cloud_are_merged_and_built_alone(tmp_path):
    """A cloud of 1 500 rows in 40 dimensions beside three small blobs of 3: k-means puts several
    centres in the cloud, whose rows then find their nearest sampled rows across the cuts, so
    its cells are merged into one (at most the rows one cell built alone fits in memory),
    no cell mixes cloud and blob rows, and the graph holds brute force's neighbours; with the
    merge off the cloud stays cut."""
    from streamclust.graph import cells as cl
    rng = np.random.default_rng(11)
    cloud = rng.normal(size=(1500, 40))
    flat = np.zeros((1500, 40))
    flat[:, :3] = rng.normal(scale=0.5, size=(1500, 3))
    flat[:, 3] = 60.0 * (1 + np.arange(1500) % 3)
    X = np.concatenate([cloud, flat]).astype(np.float32)
    ids, _ = _exact(X, 10)

    def members(work):
        d = tmp_path / work / "knn"
        return [np.load(d / f) for f in sorted(os.listdir(d)) if f.endswith(".rows.npy")]
    kw = dict(cell_rows=400, min_cell_rows=100, threads=2)
    g = streamclust.knn_graph(X, 10, work_dir=str(tmp_path / "g"), **kw)
    cells = members("g")
    holding = [c for c in cells if (c < 1500).any()]
    assert len(holding) == 1 and len(holding[0]) >= 1500 and (holding[0] < 1500).all()
    assert _recall(g.ids, ids) >= 0.99
    saved = cl.CLOUD_SHARE, cl.PIECE_SHARE
    try:
        cl.CLOUD_SHARE = cl.PIECE_SHARE = 1.1
        streamclust.knn_graph(X, 10, work_dir=str(tmp_path / "h"), **kw)
    finally:
        cl.CLOUD_SHARE, cl.PIECE_SHARE = saved
    assert sum((c < 1500).any() for c in members("h")) >= 2


def test_a_cloud_cut_in_many_cells_is_gathered_into_groups_within_the_cap():
    """Eight cells of one cloud, 70 % of each one's sampled rows finding their nearest in the
    seven others (0.10 a pair: under CLOUD_SHARE, so no pair alone would be joined), and two
    cells of separate topics crossing 1 % to each other: the eight gather into two groups of
    four (the cap: four cells' rows), the two stay alone; at PIECE_SHARE 0.2 nothing is joined."""
    from streamclust.graph import cells as cl
    a, b = [], []
    for c in range(8):  # 700 rows, 70 of them finding theirs in each other piece, 300 at home
        a += [c] * 1000
        b += [c] * 300 + [o for o in range(8) if o != c for _ in range(100)]
    for c, o in ((8, 9), (9, 8)):
        a += [c] * 1000
        b += [c] * 990 + [o] * 10
    a, b = np.array(a), np.array(b)
    size = np.full(10, 1000)
    group = cl._gather(a, b, size, cap=4000)
    groups = sorted(sorted(np.flatnonzero(group == g).tolist()) for g in np.unique(group))
    assert sorted(len(g) for g in groups) == [1, 1, 4, 4] and [8] in groups and [9] in groups
    assert sorted(sum((g for g in groups if len(g) == 4), [])) == list(range(8))
    assert cl._gather(a, b, size, cap=1999) is None  # no two fit the cap
    saved = cl.PIECE_SHARE
    try:
        cl.PIECE_SHARE = 0.2
        assert cl._gather(a, b, size, cap=4000) is None
    finally:
        cl.PIECE_SHARE = saved


@pytest.mark.parametrize("width, rebuilt", [(36, True), (37, False), (39, False)])
def test_a_widening_the_list_cap_leaves_under_four_entries_is_not_built(monkeypatch, width,
                                                                       rebuilt):
    """A cell whose sample finds too few of its k nearest is built again with longer lists, at
    least 4 entries more and at most 4k: where 4k leaves fewer than 4 (37-39 of 40) the cell is
    kept as it is rather than built again for 1-3 entries."""
    from streamclust.graph import cellbuild, exact, trees
    builds = []
    monkeypatch.setattr(trees, "forest_init",
                        lambda X, lists, p, split=None: builds.append(lists[0].shape[1]))
    monkeypatch.setattr(exact, "hits", lambda d2, kth: 0)  # nothing found: widen
    X = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    lists = (np.zeros((300, width), np.int32), np.zeros((300, width), np.float32),
             np.zeros((300, width), np.uint8))
    ids, _ = cellbuild._widen(X, lists, {"k": 10}, np.random.default_rng(1),
                              run=lambda *a: 1)
    assert builds == ([40] if rebuilt else []) and ids.shape[1] == (40 if rebuilt else width)


def test_joined_cells_over_the_limit_are_searched_one_at_a_time_on_every_thread(tmp_path,
                                                                               monkeypatch):
    """Two clouds of 1 500 rows, 3 apart in 40 dimensions, each joined into one cell (the cap
    ``solo_rows`` 1 600: not both) of about twice the rows cells built side by side may hold:
    each is searched by the other's rows alone, its queries shared by both threads (never two
    such cells loaded at once: the memory plan), with the same graph as one thread searching
    each cell, and brute force's neighbours."""
    import threading
    from streamclust.graph import build, knn
    rng = np.random.default_rng(11)
    X = rng.normal(size=(3000, 40)).astype(np.float32)
    X[1500:, 0] += 3.0
    monkeypatch.setattr(knn, "solo_rows", lambda *a, **kw: 1600)
    real, calls, active, lock = build.search_cell, [], [0], threading.Lock()

    def watched(*item, threads=1, **kw):
        with lock:
            active[0] += 1
            calls.append((threads, active[0]))
        try:
            return real(*item, threads=threads if shared else 1, **kw)
        finally:
            with lock:
                active[0] -= 1
    monkeypatch.setattr(build, "search_cell", watched)
    kw = dict(cell_rows=400, min_cell_rows=100, threads=2)
    graphs = []
    for shared in (True, False):
        calls.clear()
        graphs.append(streamclust.knn_graph(X, 10, work_dir=str(tmp_path / str(shared)), **kw))
        assert sorted(calls) == [(2, 1), (2, 1)]  # two big cells, each alone on two threads
    d = tmp_path / "True" / "knn"
    assert sorted(len(np.load(d / f)) > 800 for f in os.listdir(d) if f.endswith(".rows.npy")) \
        == [True, True]
    np.testing.assert_array_equal(graphs[0].ids, graphs[1].ids)
    np.testing.assert_array_equal(graphs[0].distances, graphs[1].distances)
    assert _recall(graphs[0].ids, _exact(X, 10)[0]) >= 0.99
