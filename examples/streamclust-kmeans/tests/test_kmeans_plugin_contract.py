"""The plugin runs streamclust's own contract suite, as any third-party plugin would."""
from streamclust.testing import AlgorithmContract


class TestKMeansContract(AlgorithmContract):
    algorithm = "kmeans"
