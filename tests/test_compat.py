"""Model directories written by an earlier streamclust (``tests/compat/models``, made by
``tests/compat/make_models.py`` at the commit named in ``written_by.txt``) load with today's code
and predict the labels that version predicted, for every built-in algorithm."""
import os

import numpy as np
import pytest

import streamclust
from streamclust.plugins import BUILTIN_ALGORITHMS

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compat", "models")


@pytest.mark.parametrize("name", BUILTIN_ALGORITHMS)
def test_a_model_written_by_an_earlier_version_predicts_the_same_labels(name):
    rows = np.load(os.path.join(MODELS, "rows.npy"))
    then = np.load(os.path.join(MODELS, f"{name}_labels.npy"))
    assert len(np.unique(then)) >= 2  # a fixture that labels everything alike would prove nothing
    model = streamclust.load_model(os.path.join(MODELS, name))
    assert model.algorithm == name
    np.testing.assert_array_equal(model.predict(rows), then)
