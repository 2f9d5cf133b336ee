"""Data sources: the :class:`Source` interface every input format implements, and
:func:`open_data`, which asks the formats registered through the ``streamclust_register_sources``
hook (third parties' first, then the built-in ones of ``formats``) which one reads an input.

A :class:`Source` yields Arrow record batches in a stable order (files sorted, row groups in
order), so that the global row id of a row is the same in every pass.  :func:`open_data` turns
anything accepted into a :class:`Data` that also knows the feature columns.
"""
from __future__ import annotations

import os
from typing import Iterator

import pyarrow as pa

from ..errors import DataError
from .batch import Data
from .features import FeatureSpec, INVALID_POLICIES, select_features


class Source:
    """An input format's reader.  ``record_batches`` yields ``(origin, row_in_origin,
    RecordBatch)`` in the same order on every call (unless ``rereadable`` is False); ``schema``
    is the Arrow schema, ``n_rows`` the row count or None when unknown before a pass; a source
    made of files lists them in ``files`` (an update then reads only the files added since).
    ``name`` names the input in messages; ``default_features`` the feature columns taken when
    none are named (None: every numeric column); ``partition_columns`` the columns of the
    schema that are the files' ``key=value`` directories (never features unless named)."""

    rereadable = True
    partition_columns: tuple = ()
    name = "source"
    default_features = None
    schema: pa.Schema
    n_rows: int | None = None

    def record_batches(self, columns, batch_size: int) -> Iterator[tuple[str, int, pa.RecordBatch]]:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name

    def fingerprint(self) -> str | None:
        """A string that changes when the data change, or None if unknown (no caching)."""
        return None

    def read_notes(self, columns) -> list[str]:
        """Lines worth telling before a pass reads ``columns`` (e.g. an encoding that is slow to
        decode); none by default."""
        return []

    def tail(self, first: int) -> "Source | None":
        """The same source without its first ``first`` files (None: not made of files).  Its
        fingerprint then covers only the files it keeps."""
        files = getattr(self, "files", None)
        if files is None or not 0 < first < len(files):
            return None
        return self.part(first, len(files))

    def part(self, first: int, stop: int) -> "Source":
        """The same source reading only its files ``first .. stop`` (a source made of files)."""
        import copy
        rest = copy.copy(self)
        rest.files, rest.n_rows = list(self.files[first:stop]), None
        return rest


def describe(opener) -> str:
    """An opener as the error for an unclaimed input lists it: its format and extensions."""
    name = getattr(opener, "format_name", None) or getattr(opener, "__name__", repr(opener))
    ext = getattr(opener, "extensions", ())
    return f"{name} ({', '.join(ext)})" if ext else name


def open_source(data, host=None) -> tuple[Source, object]:
    """The source of ``data`` and the default feature selection it implies: a :class:`Source`
    or :class:`Data` as given, otherwise the first registered format whose opener returns one."""
    if isinstance(data, Source):
        return data, None
    if isinstance(data, Data):
        return data.source, data.spec
    if host is None:
        from ..plugins import default_host
        host = default_host()
    for opener in host.source_openers:
        source = opener(data)
        if source is not None:
            return source, source.default_features
    if isinstance(data, (str, os.PathLike)):  # the formats of files (those with extensions)
        formats = "; ".join(describe(o) for o in host.source_openers if getattr(o, "extensions", ()))
        raise DataError(f"{os.fspath(data)}: no installed format reads it; formats of files: "
                        f"{formats or 'none'} (`streamclust plugins` lists them)")
    formats = "; ".join(describe(o) for o in host.source_openers) or "none"
    raise DataError(f"cannot read data of type {type(data).__name__}: give a path, a NumPy array, "
                    f"a list of rows, a pandas / polars DataFrame, or a pyarrow Table / "
                    f"RecordBatchReader (formats installed: {formats})")


def _peek_n_features(source: Source, spec: FeatureSpec) -> int:
    t = source.schema.field(spec.columns[0]).type
    if not spec.vector:
        return len(spec.columns)
    if pa.types.is_fixed_size_list(t):
        return t.list_size
    if not source.rereadable:
        raise DataError(f"{source.name}: variable-length list features need a re-readable source "
                        f"(use fixed_size_list, or write the stream to a file)")
    for origin, row0, rb in source.record_batches(spec.columns, 1):
        if rb.num_rows:
            v = rb.column(0)[0]
            if not v.is_valid:
                raise DataError(f"{origin}: row {row0}: null in feature column '{spec.columns[0]}'")
            return len(v)
    raise DataError(f"{source.name}: the data set is empty")


def open_data(data, features=None, on_invalid: str = "error", exclude=(), reserved=(),
              host=None) -> Data:
    """Open anything accepted (path, glob, directory, NumPy array, pyarrow data) as :class:`Data`.
    ``features`` / ``exclude``: names or globs (see :func:`streamclust.data.features.select_features`);
    ``reserved``: columns the algorithm reads as labels, never taken as features by default;
    ``host``: the :class:`~streamclust.plugins.PluginHost` whose formats are asked (default: the
    process's, :func:`streamclust.plugins.default_host`)."""
    if on_invalid not in INVALID_POLICIES:
        raise DataError(f"on_invalid must be one of {INVALID_POLICIES}, got {on_invalid!r}")
    if isinstance(data, Data):
        return data
    source, default = open_source(data, host)
    if isinstance(default, FeatureSpec):
        spec, left_out = default, {}
    else:
        sel = select_features(source.schema, features if features is not None else default,
                              source.name, exclude=exclude, reserved=reserved,
                              partitions=getattr(source, "partition_columns", ()))
        spec, left_out = sel.spec, sel.left_out
    n_features = _peek_n_features(source, spec)
    if n_features < 1:
        raise DataError(f"{source.name}: feature column '{spec.columns[0]}' has no values")
    passthrough = tuple(n for n in source.schema.names if n not in spec.columns)
    return Data(source, spec, n_features, on_invalid, passthrough, left_out)


def check_schemas(schemas: list[tuple[str, pa.Schema]]) -> pa.Schema:
    """The schema of files whose ``(path, schema)`` are given: the first, when every other equals
    it; else a :class:`DataError` naming the file and column that differ."""
    first_path, first = schemas[0]
    for path, s in schemas[1:]:
        if s.equals(first):
            continue
        for f in first:
            if f.name not in s.names:
                raise DataError(f"{path}: column '{f.name}' missing (present in {first_path}); "
                                f"schemas differ between files")
            if not s.field(f.name).type.equals(f.type):
                raise DataError(f"{path}: column '{f.name}' is {s.field(f.name).type} but "
                                f"{f.type} in {first_path}; schemas differ between files")
        extra = [n for n in s.names if n not in first.names]
        raise DataError(f"{path}: extra columns {extra} not in {first_path}; schemas differ between files")
    return first
