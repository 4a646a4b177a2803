"""A class-data-sharing archive for the Spark JVM that ``pynamesrv pipeline`` launches: what a
cold run (a cron job's: a new JVM every hour) need not spend again.

Why: before a new JVM reads a line it loads, parses and verifies the ~15,000 classes of
Spark, Hadoop and Scala it uses, from jars; on two cores that is about half of the smallest
Spark job's time from process start to exit. A dynamic CDS archive (JDK 13 and later) holds
those classes as the JVM keeps them in memory, mapped from one file. bench/pipeline.py prints
the cold runs with and without it.

How: the first command that launches Spark writes the archive when its JVM exits
(``-XX:ArchiveClassesAtExit``, into a file of its own), waits for it, and moves it into place
(``keep``): once, a few seconds up to half a minute. Every later one maps it
(``-XX:SharedArchiveFile``). The JVM checks an archive against itself and its class path and
runs without one that does not match, so the file's name carries what it depends on (the
PySpark install and the java binary): an upgrade writes a new one. Its messages are switched
off (a mismatch is not the operator's problem). ``PYNAMESRV_CLASS_ARCHIVE=off`` runs without
it; the cache directory is ``PYNAMESRV_CACHE_DIR``, else ``$XDG_CACHE_HOME/pynamesrv``, else
``~/.cache/pynamesrv``. Classes Spark generates for each query are not in it (they are
compiled at run time), nor is the JIT's work.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

OFF_VARIABLE: Final = "PYNAMESRV_CLASS_ARCHIVE"
QUIET: Final = "-Xlog:cds*=off"  # the JVM's notes about the archive (written to stdout)
WRITE_TIMEOUT_S: Final = 300.0


@dataclass(frozen=True, slots=True)
class ClassArchive:
    """Where the archive is, and the file this run's JVM writes it to when there is none
    yet (None: it exists, and is mapped)."""

    path: Path
    writing: Path | None

    def java_options(self) -> str:
        """The driver JVM's options for it (``spark.driver.extraJavaOptions``)."""
        if self.writing is not None:
            return f"-XX:ArchiveClassesAtExit={self.writing} {QUIET}"
        return f"-XX:SharedArchiveFile={self.path} {QUIET}"

    def keep(self, jvm: subprocess.Popen[bytes] | None) -> bool:
        """After the session stopped: end the JVM (it exits when its standard input closes,
        as when Python exits), wait while it writes the archive, move it into place. True
        when it is there; a failure only leaves no archive (the next run writes one)."""
        if self.writing is None or jvm is None:
            return False
        try:
            if jvm.stdin is not None:
                jvm.stdin.close()
            jvm.wait(WRITE_TIMEOUT_S)
            if jvm.returncode == 0 and self.writing.is_file():
                os.replace(self.writing, self.path)
                return True
        except (OSError, subprocess.TimeoutExpired):
            pass
        with suppress(OSError):
            self.writing.unlink()
        return False


def cache_dir() -> Path:
    """Where pynamesrv keeps what it may rebuild (``PYNAMESRV_CACHE_DIR``, else the XDG
    cache directory)."""
    given = os.environ.get("PYNAMESRV_CACHE_DIR")
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "pynamesrv"


def _java() -> Path | None:
    """The java binary Spark's launcher runs (``JAVA_HOME``'s, else the PATH's)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found else None


def _identity() -> str | None:
    """What an archive is valid for: the PySpark install (its jars are the class path) and
    the java binary (path, size, time), as a short hash; None without java."""
    import pyspark

    java = _java()
    if java is None:
        return None
    try:
        stat = java.stat()
    except OSError:
        return None
    parts = (pyspark.__version__, pyspark.__file__, str(java), stat.st_size, stat.st_mtime_ns)
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def class_archive() -> ClassArchive | None:
    """The archive for a JVM this process launches, None when switched off or when the
    cache directory cannot hold one."""
    if os.environ.get(OFF_VARIABLE, "").lower() in ("off", "0", "false", "no"):
        return None
    identity = _identity()
    if identity is None:
        return None
    directory = cache_dir()
    path = directory / f"spark-classes-{identity}.jsa"
    if path.is_file():
        return ClassArchive(path, None)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(directory, os.W_OK):
        return None
    return ClassArchive(path, directory / f"{path.name}.{os.getpid()}.partial")


def launched_jvm(spark: Any) -> subprocess.Popen[bytes] | None:
    """The JVM process PySpark launched for ``spark`` (a classic session), to end it and so
    have it write the archive; None when it was not launched here (spark-submit's) or the
    session has no JVM of its own (Spark Connect)."""
    gateway = getattr(getattr(spark, "sparkContext", None), "_gateway", None)
    proc = getattr(gateway, "proc", None)
    return proc if isinstance(proc, subprocess.Popen) else None
