"""Data behind a URI: ``file://`` is a local path; any other scheme goes to the filesystem pyarrow
knows for it (``s3://``, ``gs://``, ``hdfs://`` when pyarrow was built with them), else to fsspec
(``memory://``, ``abfs://``, … with the matching driver installed), wrapped as a pyarrow
filesystem.  A scheme neither knows is an error that says what to install.  Also the local
side: the files of a path, directory or glob (:func:`expand_files`) and their fingerprint."""
from __future__ import annotations

import fnmatch
import glob
import os
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import DataError


def is_uri(path: str) -> bool:
    head, sep, _ = path.partition("://")
    return bool(sep) and head.isidentifier() and len(head) > 1


def resolve(uri: str):
    """``(filesystem or None, path)``: None with a local path for ``file://``."""
    scheme = uri.split("://", 1)[0].lower()
    if scheme == "file":
        return None, unquote(urlparse(uri).path)
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        reason = str(e).splitlines()[0]
    try:
        import fsspec
    except ImportError:
        raise DataError(f"{uri}: scheme '{scheme}' is not known to pyarrow ({reason}); install "
                        f"fsspec and its driver for '{scheme}' to read it") from None
    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except (ValueError, ImportError) as e:
        raise DataError(f"{uri}: unsupported scheme '{scheme}': neither pyarrow nor fsspec reads "
                        f"it ({str(e).splitlines()[0]})") from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


def list_files(fs, path: str, exts, uri: str) -> list[str]:
    """The data files of ``path`` on ``fs``: the file, a directory's files with one of ``exts``
    (hidden ones skipped), or a glob's matches; sorted."""
    if any(ch in path for ch in "*?["):
        cut = min(path.index(ch) for ch in "*?[" if ch in path)
        base = os.path.dirname(path[:cut]) or "."
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        files = [i.path for i in infos if i.type == pafs.FileType.File and fnmatch.fnmatchcase(i.path, path)]
    else:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            return [path]
        if info.type != pafs.FileType.Directory:
            raise DataError(f"{uri}: no such file or directory")
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
        files = [i.path for i in infos if i.type == pafs.FileType.File
                 and i.base_name.lower().endswith(tuple(exts)) and not i.base_name.startswith((".", "_"))]
    if not files:
        raise DataError(f"{uri}: no data files found (looked for {', '.join(exts)})")
    return sorted(files)


def fingerprint(fs, files) -> str | None:
    """Path, size and modification time of every file; None (no cache reuse) when the
    filesystem does not report times."""
    parts = []
    for info in fs.get_file_info(list(files)):
        if info.mtime_ns is None:
            return None
        parts.append(f"{fs.type_name}:{info.path}:{info.size}:{info.mtime_ns}")
    return "|".join(parts)


def expand_files(path: str, exts) -> list[str]:
    """The files of ``path``: the file itself (also when its name has glob characters, such as
    ``run[1].parquet``), a directory's data files, or a glob's matches, each real file once (a
    symlink loop under a recursive glob repeats files under ever longer paths)."""
    if os.path.isfile(path):
        return [path]
    if any(ch in path for ch in "*?["):
        seen = {}
        for p in sorted(glob.glob(path, recursive=True), key=lambda q: (len(q), q)):
            if os.path.isfile(p):  # each real file once, under its shortest name
                seen.setdefault(os.path.realpath(p), p)
        files = sorted(seen.values())
    elif os.path.isdir(path):
        files = sorted(os.path.join(root, f) for root, _, names in os.walk(path) for f in names
                       if f.lower().endswith(exts) and not f.startswith((".", "_")))
    elif os.path.exists(path):
        files = [path]
    else:
        raise DataError(f"{path}: no such file or directory")
    if not files:
        raise DataError(f"{path}: no data files found (looked for {', '.join(exts)})")
    return files


def local_fingerprint(files) -> str:
    """Path, size and modification time of every local file (changes when the data change)."""
    parts = []
    for f in files:
        st = os.stat(f)
        parts.append(f"{os.path.abspath(f)}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)
