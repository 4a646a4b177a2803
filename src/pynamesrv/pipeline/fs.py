"""Files through Hadoop's FileSystem API: one way to list, move and write on every filesystem.

The job's inputs and outputs may be local, ``hdfs://`` or ``s3a://``; Python's ``os`` would
only see the driver's disk. Every call goes through the JVM the Spark session already runs,
so listing journals, staging outputs and swapping them in work the same everywhere. Renames
are atomic on local disks and HDFS; object stores copy (README, "Object stores").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One file: its qualified URI, size in bytes and modification time (epoch ms)."""

    path: str
    size: int
    mtime: int


class HadoopFS:
    """The few file operations the pipeline needs, on any Hadoop filesystem."""

    def __init__(self, spark: SparkSession) -> None:
        context = spark.sparkContext
        self._jvm: Any = context._jvm
        self._gateway: Any = context._gateway
        self._conf: Any = context._jsc.hadoopConfiguration()

    def _path(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def _fs(self, jpath: Any) -> Any:
        return jpath.getFileSystem(self._conf)

    def qualify(self, path: str) -> str:
        """``path`` with its scheme (a plain path is on the default filesystem)."""
        jpath = self._path(path)
        return str(self._fs(jpath).makeQualified(jpath).toString())

    def scheme(self, path: str) -> str:
        """``file``, ``hdfs``, ``s3a``…: where ``path`` really lives."""
        jpath = self._path(path)
        return str(self._fs(jpath).makeQualified(jpath).toUri().getScheme() or "file")

    def exists(self, path: str) -> bool:
        jpath = self._path(path)
        return bool(self._fs(jpath).exists(jpath))

    def glob(self, pattern: str) -> list[tuple[str, bool]] | None:
        """(URI, is a directory) of every match; None when a path without wildcards is missing."""
        jpath = self._path(pattern)
        statuses = self._fs(jpath).globStatus(jpath)
        if statuses is None:
            return None
        return [(str(s.getPath().toString()), bool(s.isDirectory())) for s in statuses]

    def files(self, path: str) -> list[FileInfo]:
        """Every file under ``path`` (recursively), or ``path`` itself when it is a file."""
        jpath = self._path(path)
        found = self._fs(jpath).listFiles(jpath, True)
        out = []
        while found.hasNext():
            status = found.next()
            out.append(
                FileInfo(
                    str(status.getPath().toString()),
                    int(status.getLen()),
                    int(status.getModificationTime()),
                )
            )
        return out

    def children(self, path: str) -> list[str]:
        """Names of the entries directly under ``path`` (empty when it does not exist)."""
        jpath = self._path(path)
        fs = self._fs(jpath)
        if not fs.exists(jpath):
            return []
        return sorted(str(s.getPath().getName()) for s in fs.listStatus(jpath))

    def delete(self, path: str) -> None:
        """Remove a file or a directory tree; a missing path is fine."""
        jpath = self._path(path)
        self._fs(jpath).delete(jpath, True)

    def mkdirs(self, path: str) -> None:
        jpath = self._path(path)
        self._fs(jpath).mkdirs(jpath)

    def move(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target``, replacing whatever ``target`` was (a file is replaced
        atomically; a directory is removed first, then renamed in)."""
        src, dst = self._path(source), self._path(target)
        fs = self._fs(dst)
        parent = dst.getParent()
        if parent is not None:
            fs.mkdirs(parent)
        if fs.exists(dst) and fs.getFileStatus(dst).isDirectory():
            fs.delete(dst, True)
        options = self._gateway.new_array(self._jvm.org.apache.hadoop.fs.Options.Rename, 1)
        options[0] = self._jvm.org.apache.hadoop.fs.Options.Rename.OVERWRITE
        context = self._jvm.org.apache.hadoop.fs.FileContext.getFileContext(fs.getUri(), self._conf)
        context.rename(src, dst, options)

    def read_text(self, path: str) -> str | None:
        """A small text file's content, or None when it does not exist."""
        jpath = self._path(path)
        fs = self._fs(jpath)
        if not fs.exists(jpath):
            return None
        stream = fs.open(jpath)
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode("utf-8")

    def write_text(self, path: str, text: str) -> None:
        """Write a small text file atomically: to a sibling, then renamed over ``path``."""
        scratch = f"{path}.writing"
        jpath = self._path(scratch)
        stream = self._fs(jpath).create(jpath, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        self.move(scratch, path)
