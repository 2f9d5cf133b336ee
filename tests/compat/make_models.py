"""Writes tests/compat/models/: one small model directory per built-in algorithm, fitted and saved
by the streamclust of the commit named in ``written_by.txt``, with the rows they label and the
labels that version predicted.  ``tests/test_compat.py`` loads each with today's code and
checks the same labels.  Run from the repository root: ``python tests/compat/make_models.py``
(only when the model format changes on purpose: the point is to keep what an older version wrote).
"""
import os
import shutil
import subprocess

import numpy as np

import streamclust
from streamclust.testing import make_blobs

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "models")
FITS = {  # algorithm: (k, params)
    "dgmm": (4, {"max_epochs": 20}),
    "slk": (4, {"max_epochs": 20}),
    "ism": (2, {"sample_size": 200}),
    "ncutemb": (4, {"epochs": 5}),
    "infex": (None, {"max_epochs": 20, "starts": 100}),
}


def main():
    X, _ = make_blobs(n=300, k=4, d=5, seed=0)
    X = X.astype(np.float32)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    np.save(os.path.join(OUT, "rows.npy"), X)
    for name, (k, params) in FITS.items():
        model = streamclust.fit(X, name, k, seed=0, progress=False, **params)
        model.save(os.path.join(OUT, name))
        np.save(os.path.join(OUT, f"{name}_labels.npy"), model.predict(X).astype(np.int64))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True,
                          text=True).stdout.strip()
    with open(os.path.join(OUT, "written_by.txt"), "w") as f:
        f.write(f"streamclust {streamclust.__version__} at commit {head}\n")


if __name__ == "__main__":
    main()
