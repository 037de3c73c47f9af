"""A cached JVM class archive (AppCDS) that cuts 3–8 s from each `klog spark` command's start-up.

Spark's driver JVM loads ~20k classes on every start. The first command started by klog records
them (-XX:ArchiveClassesAtExit, ~180 MB, into ~/.cache/klog) and later JVMs map that archive.
A truncated archive crashes the JVM, so the protocol is: the JVM dumps to a temporary file as it
exits; klog waits for that exit and renames the file into place only after a clean exit; before
each use a `java -version` with the archive must succeed, else the archive is deleted.
KLOG_SPARK_CDS=0 turns it off.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # CDS's warnings about skipped classes are not for users
STALE_SECONDS = 3600  # a temporary dump older than this was left by a run that died
CHECK_TIMEOUT_SECONDS = 30


@dataclass
class ClassArchive:
    path: str
    dump_to: str | None = None  # set when this run's JVM writes the archive

    def jvm_options(self) -> str:
        if self.dump_to is not None:
            return f"-XX:ArchiveClassesAtExit={self.dump_to} {QUIET}"
        return f"-XX:SharedArchiveFile={self.path} {QUIET}"


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "klog")


def class_archive(java: str) -> ClassArchive | None:
    """The archive to use (or to write in this run), or None (disabled, or another run is writing it)."""
    if os.environ.get("KLOG_SPARK_CDS", "1") == "0":
        return None
    try:
        import pyspark

        real = os.path.realpath(java)
        key = hashlib.sha1(f"{real}|{os.stat(real).st_mtime_ns}|{pyspark.__file__}|{pyspark.__version__}"
                           .encode()).hexdigest()[:12]
        folder = _cache_dir()
        path = os.path.join(folder, f"spark-{pyspark.__version__}-{key}.jsa")
        if os.path.exists(path):
            if _usable(java, path):
                return ClassArchive(path)
            os.unlink(path)
            return None
        os.makedirs(folder, exist_ok=True)
        _remove_stale(folder)
        if any(n.startswith(os.path.basename(path)) and n.endswith(".tmp") for n in os.listdir(folder)):
            return None  # another command is writing it right now
        return ClassArchive(path, f"{path}.{os.getpid()}.tmp")
    except OSError:
        return None  # no cache directory, no archive: Spark starts the slow way


def _usable(java: str, path: str) -> bool:
    import tempfile

    # a damaged archive crashes this JVM: its crash report goes to a scratch folder, not the user's cwd
    with tempfile.TemporaryDirectory(prefix="klog-cds-check-") as scratch:
        try:
            done = subprocess.run([java, f"-XX:SharedArchiveFile={path}", *QUIET.split(), "-XX:-CreateCoredumpOnCrash",
                                   "-version"], capture_output=True, timeout=CHECK_TIMEOUT_SECONDS, cwd=scratch)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0


def _remove_stale(folder: str) -> None:
    now = time.time()
    for name in os.listdir(folder):
        if name.endswith(".tmp"):
            path = os.path.join(folder, name)
            try:
                if now - os.path.getmtime(path) > STALE_SECONDS:
                    os.unlink(path)
            except OSError:
                pass


def finish(archive: ClassArchive, gateway) -> None:  # noqa: ANN001 - py4j gateway with .proc
    """After spark.stop(): end the JVM, wait for its dump, and publish the archive only after a clean exit."""
    proc = getattr(gateway, "proc", None)
    if archive.dump_to is None or proc is None:
        return
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # Spark's gateway JVM exits when its stdin closes
        code = proc.wait(timeout=120)
        if code == 0 and os.path.getsize(archive.dump_to) > 0:
            os.replace(archive.dump_to, archive.path)
            return
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        os.unlink(archive.dump_to)
    except OSError:
        pass
