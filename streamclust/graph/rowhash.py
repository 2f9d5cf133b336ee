"""The hash of the cached rows a graph was built on (``rows_hash`` in ``knn.json``): an append
checks with it that the graph's rows are still the cache's first rows before it extends the
graph.  Pieces of ``HASH_ROWS`` rows are hashed on the run's threads by a numba kernel (four
lanes of 64-bit multiply-rotate rounds over the rows' bytes, two 64-bit digests a piece), and
blake2b hashes the pieces' digests in order, so the hash does not depend on the threads.  It
detects changed rows, not an adversary: the cache's own fingerprint (files, sizes, times) says
whether a graph is reused as it is.

Graphs written before keep their kinds: ``b2p:`` (blake2b of each piece, until 12-07: 1.8-2.6 s
of 2 threads over the 1M x 784 float32 rows at the end of every build, 0.2-0.3 s now) and a plain
blake2b of all rows (no prefix).
"""
from __future__ import annotations

import hashlib

import numpy as np
from numba import njit

#: rows hashed as one piece (fixed: the hash does not depend on threads)
HASH_ROWS = 65536
#: the prefix of :func:`rows_hash`'s hashes
HASH_KIND = "r64:"
#: the prefix of the blake2b-pieces hashes written before it (:func:`rows_hash_b2p`)
B2P_KIND = "b2p:"

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


@njit(cache=True, nogil=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, nogil=True, inline="always")
def _round(acc, w):
    return _rotl(acc + w * _P2, 31) * _P1


@njit(cache=True, nogil=True, inline="always")
def _avalanche(h):
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    return h ^ (h >> np.uint64(32))


@njit(cache=True, nogil=True)
def hash_bytes(b, out):
    """Two 64-bit digests of the bytes ``b`` (uint8, contiguous) into ``out[:2]`` (uint64):
    its 8-byte words in four lanes of multiply-rotate rounds, the last bytes as one word, the
    length in both; every bit of the input reaches every bit of each digest."""
    n = b.shape[0]
    nw = n // 8
    w = b[:nw * 8].view(np.uint64)
    v1 = _P1 + _P2
    v2 = _P2
    v3 = np.uint64(0)
    v4 = np.uint64(0) - _P1
    i = 0
    while i + 4 <= nw:
        v1 = _round(v1, w[i])
        v2 = _round(v2, w[i + 1])
        v3 = _round(v3, w[i + 2])
        v4 = _round(v4, w[i + 3])
        i += 4
    while i < nw:
        v1 = _round(v1, w[i])
        i += 1
    tail = np.uint64(0)
    for j in range(nw * 8, n):
        tail |= np.uint64(b[j]) << np.uint64(8 * (j - nw * 8))
    v2 = _round(v2, tail ^ _P5)
    length = np.uint64(n)
    out[0] = _avalanche(_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18) + length)
    out[1] = _avalanche((v1 * _P3) ^ _rotl(v2 * _P4, 23) ^ (v3 * _P5) ^ _rotl(v4, 41)
                        ^ (length * _P4))


def piece_digest(rows) -> bytes:
    """:func:`hash_bytes` of the bytes of ``rows`` (a contiguous copy where they are not)."""
    out = np.empty(2, np.uint64)
    hash_bytes(np.ascontiguousarray(rows).reshape(-1).view(np.uint8), out)
    return out.tobytes()


def _b2p_digest(rows) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(rows).data, digest_size=16).digest()


def _pieces_hash(X, stop, more, digest, kind):
    """The hash of ``[0, stop)`` (and with ``more`` > stop that of ``[0, more)``, from the same
    pieces): blake2b of the row count and the ``digest`` of each piece, the pieces on the run's
    threads (:func:`.cells.in_order`)."""
    from .cells import in_order
    pieces = set()
    for end in {stop, max(more, stop)}:
        pieces |= {(lo, min(lo + HASH_ROWS, end)) for lo in range(0, end, HASH_ROWS)}
    got = dict(in_order(lambda r: (r, digest(X[r[0]:r[1]])), sorted(pieces)))

    def whole(end):
        h = hashlib.blake2b(digest_size=16, person=b"streamclust-rows")
        h.update(np.int64(end).tobytes())
        for lo in range(0, end, HASH_ROWS):
            h.update(got[(lo, min(lo + HASH_ROWS, end))])
        return kind + h.hexdigest()
    return whole(stop) if more <= stop else (whole(stop), whole(more))


def rows_hash(X, stop: int, more: int = 0):
    """A hash of the rows ``[0, stop)`` (the module's text); with ``more`` > stop also that of
    ``[0, more)``, from the same pieces (a pair)."""
    return _pieces_hash(X, stop, more, piece_digest, HASH_KIND)


def rows_hash_b2p(X, stop: int) -> str:
    """The rows hash of a graph written with :data:`B2P_KIND`: blake2b of each piece's
    blake2b."""
    return _pieces_hash(X, stop, 0, _b2p_digest, B2P_KIND)


def legacy_rows_hash(X, stop: int, batch_size: int = 65536) -> str:
    """The rows hash of a graph written before :data:`B2P_KIND`: one blake2b of the rows."""
    h = hashlib.blake2b(digest_size=16)
    for s in range(0, stop, batch_size):
        h.update(np.ascontiguousarray(X[s:min(stop, s + batch_size)]).data)
    return h.hexdigest()


def same_rows(X, stop: int, written: str, head: str) -> bool:
    """Whether the hash ``written`` in a graph's ``knn.json`` is that of the rows ``[0, stop)``
    of ``X``, whose :func:`rows_hash` is ``head`` (an older kind is computed its own way)."""
    written = str(written)
    if written.startswith(HASH_KIND):
        return written == head
    if written.startswith(B2P_KIND):
        return written == rows_hash_b2p(X, stop)
    return written == legacy_rows_hash(X, stop)
