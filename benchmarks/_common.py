"""Helpers shared by the benchmark scripts."""
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))


def table(rows, headers):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(v).rjust(w) for v, w in zip(r, widths)))


def median(xs):
    return statistics.median(xs)


def vector_table(name, X, **columns):
    """A pyarrow Table with ``X`` as one ``fixed_size_list<float32>`` column ``name`` and
    ``columns`` (arrays) beside it."""
    import numpy as np
    import pyarrow as pa
    X = np.ascontiguousarray(X, dtype=np.float32)
    cols = {name: pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1])}
    cols.update({k: pa.array(v) for k, v in columns.items()})
    return pa.table(cols)
