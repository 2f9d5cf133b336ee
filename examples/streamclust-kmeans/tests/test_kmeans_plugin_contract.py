"""The plugin runs streamclust's own contract suite, as any third-party plugin would."""
from streamclust.testing import AlgorithmContract


class TestKMeansContract(AlgorithmContract):
    algorithm = "kmeans"


def test_tol_zero_runs_every_epoch_and_a_negative_tol_is_refused():
    import numpy as np
    import pytest

    import streamclust
    from streamclust.testing import make_blobs
    X, _ = make_blobs(n=300, k=3, d=2, seed=0)
    model = streamclust.fit(X, "kmeans", 3, tol=0, max_epochs=7, progress=False)
    assert len(model.history) == 7  # Lloyd reaches its fixed point long before: tol=0 went on
    assert np.isclose(model.history[-1]["objective"], model.history[-2]["objective"])
    with pytest.raises(streamclust.ParameterError, match="tol"):
        streamclust.fit(X, "kmeans", 3, tol=-1, progress=False)


def test_a_bad_saved_state_is_a_model_error_naming_the_directory(tmp_path):
    import json

    import pytest

    import streamclust
    from streamclust.testing import make_blobs
    X, _ = make_blobs(n=200, k=3, d=2, seed=0)
    path = str(tmp_path / "m")
    streamclust.fit(X, "kmeans", 3, progress=False).save(path)
    meta = json.load(open(f"{path}/model.json"))
    meta["params"]["n_clusters"] = 4  # the saved centres have 3 rows
    meta.pop("sha256")  # as an older writer left it: no checksum of the description
    json.dump(meta, open(f"{path}/model.json", "w"))
    with pytest.raises(streamclust.ModelError, match="invalid model state .*centers must have 4 rows"):
        streamclust.load_model(path)
