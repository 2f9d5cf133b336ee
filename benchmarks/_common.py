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
