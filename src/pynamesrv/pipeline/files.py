"""The few file operations the job does itself, through ``pyarrow.fs``: no JVM needed.

Spark reads and writes the data; the job only lists journals, reads and writes manifests and
the report, and removes old versions. Doing that from Python (not through the driver's JVM)
is what lets the job run under Spark Connect, where the client has no JVM. The price: the
machine running the job must reach the same paths as Spark: a plain path or ``file:`` is this
machine's disk (shared with a local master or a Connect server on it), ``s3a://`` is read as
S3, ``hdfs://`` through libhdfs.

Paths come back as URIs in the form Spark and Hadoop print them (``file:/abs/path``,
``s3a://bucket/key``, ``hdfs://host:port/path``), not URL-encoded: Spark reads them as given,
and the store matches files by instance directory and hour, never by the raw URI.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from pynamesrv.pipeline.paths import is_local, local_path

# Hadoop's object-store schemes and the pyarrow filesystem that reads them.
_ALIASES: Final = {"s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}
_WILD: Final = re.compile(r"[*?\[{]")


class FilesError(OSError):
    """A path whose filesystem cannot be reached from here (unknown scheme, no library)."""


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One file: its URI, size in bytes and modification time (epoch ms)."""

    path: str
    size: int
    mtime: int


@dataclass(frozen=True, slots=True)
class _Root:
    fs: pafs.FileSystem
    prefix: str  # what turns a pyarrow path back into the URI (file:, s3a://, hdfs://host)


class Files:
    """Files on the local disk and on the filesystems pyarrow reaches, addressed by URI."""

    def __init__(self) -> None:
        self._roots: dict[tuple[str, str], _Root] = {}

    def _resolve(self, path: str) -> tuple[_Root, str]:
        if is_local(path):
            key = ("file", "")
            if key not in self._roots:
                self._roots[key] = _Root(pafs.LocalFileSystem(), "file:")
            # absolute and normalised (``a/../b`` is ``b``): the URI readers are given
            return self._roots[key], os.path.abspath(local_path(path)).rstrip("/") or "/"
        parts = urlsplit(path)
        scheme = parts.scheme.lower()
        object_store = scheme in _ALIASES
        key = (scheme, parts.netloc)
        if key not in self._roots:
            target = _ALIASES.get(scheme, scheme)
            uri = f"{target}://{parts.netloc}/" if object_store else f"{target}://{parts.netloc}"
            try:
                fs, _ = pafs.FileSystem.from_uri(uri)
            except (ValueError, OSError) as exc:
                raise FilesError(f'no filesystem for scheme "{scheme}" ({path}): {exc}') from exc
            prefix = f"{scheme}://" if object_store else f"{scheme}://{parts.netloc}"
            self._roots[key] = _Root(fs, prefix)
        inner = (parts.netloc + parts.path) if object_store else (parts.path or "/")
        return self._roots[key], inner.rstrip("/") or "/"

    def uri(self, path: str) -> str:
        """``path`` as a URI (a plain path made absolute, on the local disk)."""
        root, inner = self._resolve(path)
        return root.prefix + inner

    def exists(self, path: str) -> bool:
        root, inner = self._resolve(path)
        return bool(root.fs.get_file_info(inner).type != pafs.FileType.NotFound)

    def glob(self, pattern: str) -> list[tuple[str, bool]] | None:
        """(URI, is a directory) of every match of ``*``, ``?``, ``[…]`` and ``{a,b}``; None
        when a path without wildcards is missing."""
        root, inner = self._resolve(pattern)
        if not _WILD.search(inner):
            info = root.fs.get_file_info(inner)
            if info.type == pafs.FileType.NotFound:
                return None
            return [(root.prefix + inner, info.type == pafs.FileType.Directory)]
        parts = inner.split("/")
        fixed = next(i for i, part in enumerate(parts) if _WILD.search(part))
        level = ["/".join(parts[:fixed]) or "/"]
        for i in range(fixed, len(parts)):  # one listing per directory matched so far
            wanted = [_translate(p) for p in _braces(parts[i])]
            listed = [
                info
                for directory in level
                for info in root.fs.get_file_info(_listing(directory))
                if any(w.fullmatch(info.base_name) for w in wanted)
            ]
            if i == len(parts) - 1:
                return sorted(
                    (root.prefix + info.path, info.type == pafs.FileType.Directory)
                    for info in listed
                )
            level = [info.path for info in listed if info.type == pafs.FileType.Directory]
        return []

    def files(self, path: str) -> list[FileInfo]:
        """Every file under ``path`` (recursively), or ``path`` itself when it is a file."""
        root, inner = self._resolve(path)
        info = root.fs.get_file_info(inner)
        if info.type == pafs.FileType.File:
            infos = [info]
        elif info.type == pafs.FileType.Directory:
            infos = root.fs.get_file_info(pafs.FileSelector(inner, recursive=True))
        else:
            return []
        return [
            FileInfo(root.prefix + i.path, int(i.size or 0), int(i.mtime_ns or 0) // 1_000_000)
            for i in infos
            if i.type == pafs.FileType.File
        ]

    def children(self, path: str) -> list[str]:
        """Names of the entries directly under ``path`` (empty when it does not exist)."""
        root, inner = self._resolve(path)
        selector = pafs.FileSelector(inner, allow_not_found=True)
        return sorted(i.base_name for i in root.fs.get_file_info(selector))

    def directories(self, path: str, depth: int) -> list[str]:
        """The directories ``depth`` levels below ``path``, relative to it (one listing)."""
        root, inner = self._resolve(path)
        selector = pafs.FileSelector(inner, recursive=depth > 1, allow_not_found=True)
        cut = len(inner.rstrip("/")) + 1
        return sorted(
            i.path[cut:]
            for i in root.fs.get_file_info(selector)
            if i.type == pafs.FileType.Directory and i.path[cut:].count("/") == depth - 1
        )

    def delete(self, path: str) -> None:
        """Remove a file or a directory tree; a missing path is fine."""
        root, inner = self._resolve(path)
        kind = root.fs.get_file_info(inner).type
        if kind == pafs.FileType.Directory:
            root.fs.delete_dir(inner)
        elif kind == pafs.FileType.File:
            root.fs.delete_file(inner)

    def read_text(self, path: str) -> str | None:
        """A small text file's content, or None when it does not exist."""
        root, inner = self._resolve(path)
        try:
            with root.fs.open_input_stream(inner) as stream:
                return bytes(stream.read()).decode("utf-8")
        except FileNotFoundError:
            return None

    def write_text(self, path: str, text: str) -> None:
        """Write a small text file in one piece (each file is written once: nothing replaced)."""
        root, inner = self._resolve(path)
        parent = inner.rpartition("/")[0]
        if parent:
            root.fs.create_dir(parent, recursive=True)
        with root.fs.open_output_stream(inner) as stream:
            stream.write(text.encode("utf-8"))


def _listing(directory: str) -> pafs.FileSelector:
    return pafs.FileSelector(directory, allow_not_found=True)


def _braces(pattern: str) -> list[str]:
    """``{a,b}`` alternatives expanded (Hadoop's glob has them, fnmatch does not)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [x for option in match.group(1).split(",") for x in _braces(head + option + tail)]


def _translate(pattern: str) -> re.Pattern[str]:
    """A glob as a regular expression whose wildcards stay within one path component."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        end = pattern.find("]", i + 2) if c == "[" else -1
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif end > 0:
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))
