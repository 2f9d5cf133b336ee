"""Compile the numba kernels that most tests share, once, before a parallel test run.

Every pytest-xdist worker that starts on an empty numba cache compiles the kernels its tests
call, and two workers starting together compile the same ones twice (D-GMM's E-step alone
takes about 30 s to compile).  ``conftest.pytest_sessionstart`` runs this script in one process
per group below, side by side, before the workers start: each process runs the contract's
checks of its algorithms, which call the kernels most tests call with the same types, and
leaves them in ``NUMBA_CACHE_DIR``.  On a warm cache it takes the few seconds of loading them.

    python tests/warm_numba.py GROUP      # GROUP: an index into GROUPS
"""
import sys

#: algorithms per process, about equal compile times each (cold cache, side by side, two runs
#: each, 2026-12-06: these 69–74 / 72–77 s; D-GMM with NCutEmb and the rest, 77–85 / 68–75 s)
GROUPS = (("dgmm", "ism"), ("ncutemb", "slk", "infex"))
#: the contract checks run (each where the algorithm has the capability it needs)
WARM_CHECKS = ("check_labels_valid", "check_readonly_and_edge_batches", "check_save_load",
               "check_soft_predict", "check_update")


def main(group: int) -> None:
    from streamclust.plugins import PluginHost
    from streamclust.testing import CHECKS, capabilities
    known = set(PluginHost().algorithms)
    for algorithm in GROUPS[group]:
        if algorithm not in known:
            continue
        for check in CHECKS:
            if check.name in WARM_CHECKS and (not check.needs
                                              or check.needs in capabilities(algorithm)):
                check.fn(algorithm)


if __name__ == "__main__":
    main(int(sys.argv[1]))
