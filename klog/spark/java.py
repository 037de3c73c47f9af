"""Finding Java before Spark does: a missing JVM is one clear line, not a launcher stack trace."""

from __future__ import annotations

import os
import shutil

from klog.errors import SparkUnavailableError


def find_java() -> str:
    """The `java` Spark will start: $JAVA_HOME/bin/java if JAVA_HOME is set (as spark-submit does), else PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        path = os.path.join(home, "bin", "java")
        if os.access(path, os.X_OK):
            return path
        raise SparkUnavailableError(f"JAVA_HOME is {home} but it has no bin/java: klog spark needs Java 17 or "
                                    "later (fix or unset JAVA_HOME)")
    found = shutil.which("java")
    if found is None:
        raise SparkUnavailableError("Java not found: klog spark needs Java 17 or later on PATH (e.g. "
                                    "`apt install openjdk-17-jre-headless`) or JAVA_HOME")
    return found


def require_pyspark() -> None:
    """pyspark and pyarrow (the `spark` extra) are importable, else one line saying how to get them."""
    import importlib.util

    missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        raise SparkUnavailableError(f"{' and '.join(missing)} not installed: klog spark needs the spark extra "
                                    "(pip install 'klog[spark]')")
