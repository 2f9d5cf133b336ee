"""Each built-in algorithm's update against an independent reference: SLK's extension rule is
its predict rule, INFEX gives a new class an exemplar, ISM's grown sample is uniform."""
import os

import numpy as np
import pyarrow as pa
import pytest
import pyarrow.parquet as pq

import streamclust
from streamclust.testing import make_blobs
from streamclust_ism.update import grown_sample


def _write(path, X, y):
    pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(X, np.float32).reshape(-1)), X.shape[1]), "label": y}), path)


def test_slk_with_a_reference_sample_extends_the_new_rows_by_the_predict_rule(tmp_path):
    """Above reference_rows, new rows of the fitted classes: no move is kept, old rows keep
    their labels exactly and the modes stay, new rows get what the fitted model's predict gives
    them (the same rule; the sample grew by some new rows, and neighbours found by different
    searches may differ)."""
    X, y = make_blobs(n=9000, k=5, d=6, seed=21, spread=1.0)
    data = tmp_path / "data"
    data.mkdir()
    _write(str(data / "a.parquet"), X[:6000], y[:6000])
    params = dict(features="x", reference_rows=2000, n_init=2, progress=False)
    m1 = streamclust.fit(str(data), "slk", 5, work_dir=str(tmp_path / "w"), **params)
    _write(str(data / "b.parquet"), X[6000:], y[6000:])
    m2 = streamclust.update(str(data), str(tmp_path / "w"), progress=False)
    assert [h.get("phase") for h in m2.history[len(m1.history):]] == ["update"]
    assert np.array_equal(m2.labels_[:6000], m1.labels_)
    assert np.array_equal(m2.modes_, m1.modes_)
    agree = (m2.public_labels(m2.labels_[6000:]) == m1.predict(X[6000:])).mean()
    assert agree > 0.99, agree
    assert not any(m["kept"] for m in m2.history[-1]["moves"])


def test_slk_gives_a_class_only_the_new_rows_hold_a_cluster_and_a_new_id(tmp_path):
    """Above reference_rows, 12 000 rows of 5 blobs fitted with k = 6 (one blob split in two),
    then 6 000 rows that also hold a sixth blob: the sample takes some of them, a move merges
    the split blob and gives the sixth a mode, with an id never used; the other blobs keep
    their ids on their old rows.  (Before moves, the new blob's rows were extended from a
    sample without it and joined an old cluster.)"""
    from sklearn.metrics import adjusted_rand_score
    C = np.random.default_rng(3).normal(0, 8, (6, 8))
    data = tmp_path / "data"
    data.mkdir()
    parts = []
    for f in range(3):
        rng = np.random.default_rng([3, f])
        y = rng.choice(np.arange(6 if f == 2 else 5), 6000)
        X = C[y] + rng.normal(0, 1, (6000, 8))
        parts.append((X, y))
    for f in range(2):
        _write(str(data / f"p{f}.parquet"), *parts[f])
    m1 = streamclust.fit(str(data), "slk", 6, features="x", reference_rows=3000, n_init=2,
                         work_dir=str(tmp_path / "w"), progress=False)
    _write(str(data / "p2.parquet"), *parts[2])
    m2 = streamclust.update(str(data), str(tmp_path / "w"), progress=False)
    moves = m2.history[-1]["moves"]
    assert moves[0]["kept"] and moves[0]["new_share"] > 0.9
    X, y = parts[2]
    blob = m2.predict(X[y == 5])
    top = np.bincount(blob).argmax()
    assert (blob == top).mean() > 0.95 and top == 6 and m2.info["update"]["ids"]["appeared"] == [6]
    old_X, old_y = np.concatenate([parts[0][0], parts[1][0]]), np.concatenate([parts[0][1], parts[1][1]])
    before, after = m1.public_labels(m1.labels_), m2.public_labels(m2.labels_[:12000])
    assert adjusted_rand_score(before, after) > 0.8
    for c in range(5):  # a blob that was one cluster keeps its id
        ids = np.unique(before[old_y == c])
        if len(ids) == 1:
            assert (after[old_y == c] == ids[0]).mean() > 0.99
    assert (m2.predict(X[y != 5]) != 6).mean() > 0.99


def test_infex_gives_a_new_class_an_exemplar_and_a_new_id(tmp_path):
    rng = np.random.default_rng(3)
    C = rng.normal(0, 10, (5, 4))
    y_old = rng.integers(0, 4, 1500)
    y_new = rng.integers(0, 5, 700)  # class 4 only in the added file
    X_old = C[y_old] + rng.normal(0, 0.5, (1500, 4))
    X_new = C[y_new] + rng.normal(0, 0.5, (700, 4))
    data = tmp_path / "data"
    data.mkdir()
    _write(str(data / "a.parquet"), X_old, y_old)
    m1 = streamclust.fit(str(data), "infex", features="x", bandwidth=1.5, work_dir=str(tmp_path / "w"),
                         progress=False)
    _write(str(data / "b.parquet"), X_new, y_new)
    m2 = streamclust.update(str(data), str(tmp_path / "w"), progress=False)
    new_class = m2.predict(X_new[y_new == 4])
    assert (new_class == new_class[0]).all() and new_class[0] >= m1.n_clusters
    assert new_class[0] in m2.info["update"]["ids"]["appeared"]
    assert not np.isin(new_class[0], m1.predict(X_old))
    assert (m2.predict(X_old) == m1.predict(X_old)).mean() > 0.99
    assert m2.certified_
    assert m2.history[-1]["gain"] > 0.01 and not m2.history[-1]["kept_fitted"]
    # the new class's modes were columns before the update's first master: no row outside
    # every column's reach (without them: a reduced cost of 5.7e50 after the first master,
    # six rounds, one master at mix-SQP's 500-iteration cap)
    rounds = m2.history[len(m1.history):]
    assert rounds[0]["max_reduced_cost"] < 1.0, rounds[0]
    assert max(r["master_iterations"] for r in rounds) < 100 and len(rounds) <= 4


def _mixture_files(tmp_path, seed, k, d, n, n_old, scale, spread, dtype=np.float64):
    """``n`` rows of ``k`` Gaussian classes (centres drawn at ``scale``, rows at ``spread``);
    the first ``n_old`` written to data/a.parquet.  Returns (data dir, X, y)."""
    rng = np.random.default_rng(seed)
    C = rng.normal(0, scale, (k, d))
    y = rng.integers(0, k, n)
    X = (C[y] + rng.normal(0, spread, (n, d))).astype(dtype)
    data = tmp_path / "data"
    data.mkdir()
    _write(str(data / "a.parquet"), X[:n_old], y[:n_old])
    return data, X, y


@pytest.mark.parametrize("settings", [{"coreset_size": 400}, {"max_master_rows": 1600}])
def test_infex_update_climbs_from_the_new_master_rows(tmp_path, settings):
    """The master rows an update marks new (pricing starts there) are exactly the added rows:
    after a fit on a coreset, and when the rows outgrow max_master_rows (every row at the fit,
    a coreset of max_master_rows rows at the update)."""
    data, X, y = _mixture_files(tmp_path, 4, 3, 4, 2000, 1500, 10, 0.5)
    streamclust.fit(str(data), "infex", features="x", bandwidth=1.5, work_dir=str(tmp_path / "w"),
                    progress=False, **settings)
    _write(str(data / "b.parquet"), X[1500:], y[1500:])
    a = streamclust.update(str(data), str(tmp_path / "w"), progress=False).algorithm_
    ids, first = a._ids, a._first_new
    assert ids is not None and 0 < first < len(ids)
    assert (ids[:first] < 1500).all() and (ids[first:] >= 1500).all()


def test_infex_update_keeps_the_fit_unless_it_gains_update_gain(tmp_path):
    """Rows like the fitted ones: the update's mixture is no better than the fitted one on all
    rows (the gain, a mean log-likelihood difference, equals brute force over every row with
    both models' exemplars), so the fit is kept whole and labels every row as before; taken
    (update_gain 0), the update's own mixture is the same update's."""
    from streamclust_infex import kernels as kn
    data, X, y = _mixture_files(tmp_path, 8, 4, 4, 2400, 2000, 10, 0.5)
    m1, _ = (streamclust.fit(str(data), "infex", features="x", bandwidth=1.5, update_gain=gain,
                             work_dir=str(tmp_path / w), progress=False)
             for w, gain in (("kept", 0.01), ("taken", 0.0)))
    _write(str(data / "b.parquet"), X[2000:], y[2000:])
    kept, taken = (streamclust.update(str(data), str(tmp_path / w), progress=False)
                   for w in ("kept", "taken"))
    lg = {w: kn.log_mixture_rows(X, m.exemplars_, np.log(m.weights_), m.kernel_)[0].mean()
          for w, m in (("fit", m1), ("kept", kept), ("taken", taken))}
    rec = kept.history[-1]
    assert rec["kept_fitted"] and rec["gain"] <= 0.01 and rec["gain_se"] == 0.0
    assert np.array_equal(kept.exemplars_, m1.exemplars_)
    assert np.array_equal(kept.predict(X), m1.predict(X))
    assert abs(kept.full_objective_ - lg["fit"]) < 1e-9
    assert "kept the fitted model" in kept.stopped_
    assert list(kept.cluster_ids) == list(m1.cluster_ids) and kept.kept_fitted_
    assert not taken.history[-1]["kept_fitted"]
    assert abs(taken.history[-1]["gain"] - rec["gain"]) < 1e-12  # the same update
    assert abs(rec["gain"] - (lg["taken"] - lg["fit"])) < 1e-9  # brute force over every row


def test_infex_update_stops_at_update_epsilon_within_its_bound(tmp_path):
    """An update certifies at ``update_epsilon``: its largest reduced cost is at most that, and
    its master objective (the mean log-likelihood of the same master rows) is within that of the
    same update run to the fit's epsilon (1e-6): the dual bound the certificate states (the
    updates' own mixtures: update_gain 0)."""
    data, X, y = _mixture_files(tmp_path, 5, 6, 5, 3000, 2500, 6, 1.0)
    for w, eps in (("loose", 1e-2), ("tight", 1e-6)):
        streamclust.fit(str(data), "infex", features="x", work_dir=str(tmp_path / w),
                        update_epsilon=eps, update_gain=0.0, progress=False)
    _write(str(data / "b.parquet"), X[2500:], y[2500:])
    loose, tight = (streamclust.update(str(data), str(tmp_path / w), progress=False)
                    for w in ("loose", "tight"))
    assert loose.certified_ and loose.max_reduced_cost_ <= 1e-2
    assert tight.max_reduced_cost_ <= 1e-6
    assert -1e-6 <= tight.objective_ - loose.objective_ <= 1e-2
    rounds = [len(m.history) - m.info["update"]["epochs_before"] for m in (loose, tight)]
    assert rounds[0] < rounds[1], rounds
    assert "update_epsilon" in loose.stopped_


def test_infex_update_estimates_the_old_rows_objective_from_a_sample(tmp_path, monkeypatch):
    """An update's full objective: exact over the new rows, the old rows' part from a uniform
    sample of them, within four standard errors of the exact mean over every row (brute force
    with the model's exemplars); with every old row sampled, exact and a standard error of 0."""
    import streamclust_infex.update as iu
    from streamclust_infex import kernels as kn
    data, X, y = _mixture_files(tmp_path, 6, 4, 3, 3000, 2500, 6, 1.0, np.float32)
    import shutil
    streamclust.fit(str(data), "infex", features="x", bandwidth=1.0, coreset_size=400,
                    work_dir=str(tmp_path / "sampled"), progress=False)
    shutil.copytree(tmp_path / "sampled", tmp_path / "exact")
    _write(str(data / "b.parquet"), X[2500:], y[2500:])
    for w, rows in (("sampled", 300), ("exact", 2500)):
        monkeypatch.setattr(iu, "SCORE_OLD_ROWS", rows)
        m = streamclust.update(str(data), str(tmp_path / w), progress=False)
        lg, _ = kn.log_mixture_rows(X, m.exemplars_, np.log(m.weights_), m.kernel_)
        if w == "exact":
            assert m.full_objective_se_ == 0.0
            assert abs(m.full_objective_ - lg.mean()) < 1e-9
        else:
            assert m.full_objective_se_ > 0
            assert abs(m.full_objective_ - lg.mean()) <= 4 * m.full_objective_se_


def test_ism_grown_sample_is_uniform_and_keeps_the_fitted_rows():
    """Over many draws each row is sampled with probability m / n, new or old, and the kept
    old rows are rows of the fitted sample."""
    old = np.sort(np.random.default_rng(0).choice(1000, 200, replace=False))
    counts = np.zeros(1500)
    for s in range(2000):
        ids = grown_sample(old, 1000, 1500, 200, np.random.default_rng(s))
        assert len(ids) == 200 and len(np.unique(ids)) == 200
        assert np.isin(ids[ids < 1000], old).all()
        counts[ids] += 1
    new_rate = counts[1000:].mean() / 2000
    assert abs(new_rate - 200 / 1500) < 0.005  # each new row at the rate m / n
    assert abs(counts[old].sum() / 2000 / 1000 - 200 / 1500) < 0.005


def test_two_successive_updates_of_slk_and_d_gmm(tmp_path):
    """An update's checkpoint is the next update's base (SLK's kept run, D-GMM's statistics).
    The data make SLK keep its fourth start (a first update that kept the run's number broke
    the second)."""
    X, y = make_blobs(n=9000, k=5, d=6, seed=40, spread=4.0)
    data = tmp_path / "data"
    data.mkdir()
    _write(str(data / "a.parquet"), X[:5000], y[:5000])
    fits = {}
    for algo, params in (("slk", dict(reference_rows=2000, n_init=5)), ("dgmm", {})):
        fits[algo] = streamclust.fit(str(data), algo, 5, features="x", work_dir=str(tmp_path / algo),
                                     progress=False, **params)
    assert fits["slk"].best_run_ > 0
    for part, (s, e) in enumerate(((5000, 7000), (7000, 9000))):
        _write(str(data / f"b{part}.parquet"), X[s:e], y[s:e])
        for algo in fits:
            m = streamclust.update(str(data), str(tmp_path / algo), progress=False)
            assert m.info["rows"] == e and m.info["update"]["rows_added"] == 2000
            assert (m.predict(X[:5000]) == fits[algo].predict(X[:5000])).mean() > 0.95, algo


def test_ism_update_resumes_on_its_grown_sample_and_stops_at_update_rounds(tmp_path, monkeypatch):
    """A killed ISM update resumes on the grown sample its checkpoint names (not the fit's
    ctx.sample()), and runs at most update_rounds rounds."""
    from streamclust.run import engine
    monkeypatch.setattr(engine, "CHECKPOINT_SPACING", 0)  # a checkpoint after every epoch
    X, y = make_blobs(n=3000, k=3, d=4, seed=23, spread=2.0)
    data = tmp_path / "data"
    data.mkdir()
    _write(str(data / "a.parquet"), X[:2000], y[:2000])
    for w in ("full", "cut"):
        streamclust.fit(str(data), "ism", 3, features="x", work_dir=str(tmp_path / w),
                        sample_size=500, tol=0.0, max_rounds=6, update_rounds=4,
                        update_gain=0.0, progress=False)  # the update's own model, not the fit's
    _write(str(data / "b.parquet"), X[2000:], y[2000:])
    full = streamclust.update(str(data), str(tmp_path / "full"), progress=False)
    assert full.info["epochs"] == 4  # tol 0: update_rounds, not max_rounds
    assert (full.sample_ids_ >= 2000).any()  # the grown sample holds new rows
    from streamclust import hookimpl
    from streamclust.plugins import PluginHost

    class Stop:  # an update dies in its third epoch (the second's checkpoint is written)
        @hookimpl
        def streamclust_epoch_finished(self, run, report):
            if report["epoch"] == first + 2:
                raise RuntimeError("killed")
    first = len(full.history) - 4
    with pytest.raises(RuntimeError, match="killed"):
        streamclust.update(str(data), str(tmp_path / "cut"), progress=False,
                           host=PluginHost(extra_plugins=[Stop()]))
    done = streamclust.update(str(data), str(tmp_path / "cut"), progress=False, resume=True)
    assert done.info["resumed_from_epoch"] == first + 2
    assert np.array_equal(done.sample_ids_, full.sample_ids_)
    np.testing.assert_allclose(done.W_, full.W_, rtol=1e-6, atol=1e-9)
    assert np.array_equal(done.predict(X), full.predict(X))


def test_ism_update_on_firm_clusters_keeps_the_old_rows_labels_and_a_refits_quality(tmp_path):
    """Where the clusters are firm (blobs), ISM's update — its sample changed as a reservoir,
    W and U refined — partitions the grown sample no better than the fit does, so the fitted
    model is kept whole (every old row keeps its label, the reservoir holds new rows); taken
    (update_gain 0), the update's own model labels the old rows as the fit did, and the new
    rows as a refit does (NMI against the truth; scikit-learn's score)."""
    from sklearn.metrics import normalized_mutual_info_score as nmi
    X, y = make_blobs(n=6000, k=4, d=6, seed=31, spread=1.0)
    data = tmp_path / "data"
    data.mkdir()
    _write(str(data / "a.parquet"), X[:5000], y[:5000])
    m1, _ = (streamclust.fit(str(data), "ism", 4, features="x", work_dir=str(tmp_path / w),
                             sample_size=600, update_gain=gain, progress=False)
             for w, gain in (("kept", 0.01), ("taken", 0.0)))
    _write(str(data / "b.parquet"), X[5000:], y[5000:])
    kept = streamclust.update(str(data), str(tmp_path / "kept"), progress=False)
    taken = streamclust.update(str(data), str(tmp_path / "taken"), progress=False)
    refit = streamclust.fit(str(data), "ism", 4, features="x", sample_size=600, progress=False)
    assert nmi(y, refit.predict(X)) >= 0.95  # firm: ISM finds the blobs
    assert kept.history[-1]["kept_fitted"] and kept.history[-1]["gain"] <= 0.01
    assert np.array_equal(m1.predict(X), kept.predict(X))  # the fit, exactly
    assert (kept.reservoir_ids_ >= 5000).any() and not (kept.sample_ids_ >= 5000).any()
    assert not taken.history[-1]["kept_fitted"]
    assert (taken.sample_ids_ >= 5000).any()
    assert (m1.predict(X[:5000]) == taken.predict(X[:5000])).mean() >= 0.99
    assert nmi(y, taken.predict(X)) >= nmi(y, refit.predict(X)) - 0.01


def test_ism_update_takes_a_partition_that_covers_a_new_class(tmp_path):
    """The fit saw three of four overlapping blobs (k = 4); the added file holds the fourth.
    The update's partition of the grown sample has the higher association (by more than
    update_gain), so it replaces the fitted model, and labels all rows closer to the truth."""
    from sklearn.metrics import adjusted_rand_score as ari
    X, y = make_blobs(n=6000, k=4, d=6, seed=31, spread=2.0)
    order = np.concatenate([np.flatnonzero(y < 3), np.flatnonzero(y == 3)])
    X, y = X[order], y[order]
    n1 = int((y < 3).sum())
    data = tmp_path / "data"
    data.mkdir()
    _write(str(data / "a.parquet"), X[:n1], y[:n1])
    m1 = streamclust.fit(str(data), "ism", 4, features="x", work_dir=str(tmp_path / "w"),
                         sample_size=600, progress=False)
    _write(str(data / "b.parquet"), X[n1:], y[n1:])
    m2 = streamclust.update(str(data), str(tmp_path / "w"), progress=False)
    assert m2.history[-1]["gain"] > 0.01
    assert not m2.history[-1]["kept_fitted"]
    assert ari(y, m2.predict(X)) > ari(y, m1.predict(X)) + 0.1
