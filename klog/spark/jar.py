"""klog-spark.jar: the JVM class that lets `writeStream.format("klog")` take Update mode.

The source is klog/spark/jars/DefaultSource.java (its comment says how it works); the built jar
is committed beside it, because machines that run klog have Java but maybe no javac. start_session
puts the jar on the driver's classpath (spark.jars). After editing the source, rebuild with

    python -m klog.spark.jar

(javac 17 or later, against the installed pyspark's jars); tests/spark/test_spark_update_mode.py
checks that the committed jar holds what the source compiles to.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile

JARS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jars")
JAR_PATH = os.path.join(JARS_DIR, "klog-spark.jar")
SOURCE_PATH = os.path.join(JARS_DIR, "DefaultSource.java")
MAIN_CLASS = "klog.DefaultSource"  # Spark loads "<format>.DefaultSource" for format("klog")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the same source and javac give the same jar, byte for byte


_CLASSPATH = ("spark-sql_", "spark-catalyst_", "spark-sql-api_", "scala-library-")  # what the source needs


def pyspark_jars() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "jars")


def _classpath() -> str:
    """The pyspark jars the source compiles against (javac reads all ~250 with jars/* more slowly)."""
    folder = pyspark_jars()
    return os.pathsep.join(os.path.join(folder, n) for n in sorted(os.listdir(folder))
                           if n.endswith(".jar") and n.startswith(_CLASSPATH))


def javac_version(javac: str = "javac") -> str:
    out = subprocess.run([javac, "-version"], capture_output=True, text=True, check=True)
    return (out.stdout or out.stderr).strip()  # "javac 17.0.15"


def compile_classes(out_dir: str, javac: str = "javac") -> dict[str, bytes]:
    """The source's classes, compiled for Java 17 against pyspark's jars: {path in jar: bytes}."""
    subprocess.run([javac, "--release", "17", "-nowarn", "-cp", _classpath(), "-d", out_dir, SOURCE_PATH],
                   check=True, capture_output=True, text=True)
    classes = {}
    for root, _dirs, files in os.walk(out_dir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                classes[os.path.relpath(path, out_dir).replace(os.sep, "/")] = f.read()
    return classes


def jar_classes(path: str = JAR_PATH) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as jar:
        return {n: jar.read(n) for n in jar.namelist() if n.endswith(".class")}


def jar_javac(path: str = JAR_PATH) -> str | None:
    """The javac version the jar's manifest records (Created-By)."""
    with zipfile.ZipFile(path) as jar:
        for line in jar.read("META-INF/MANIFEST.MF").decode().splitlines():
            if line.startswith("Created-By: "):
                return line.removeprefix("Created-By: ")
    return None


def build(path: str = JAR_PATH, javac: str = "javac") -> dict[str, bytes]:
    """Compile the source and write the jar (sorted entries, fixed times); returns its classes."""
    with tempfile.TemporaryDirectory(prefix="klog-jar-") as out_dir:
        classes = compile_classes(out_dir, javac)
    manifest = f"Manifest-Version: 1.0\r\nCreated-By: {javac_version(javac)}\r\n\r\n"
    entries = [("META-INF/MANIFEST.MF", manifest.encode())] + sorted(classes.items())
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as jar:
        for name, data in entries:
            jar.writestr(zipfile.ZipInfo(name, _FIXED_TIME), data, zipfile.ZIP_DEFLATED)
    return classes


def with_jar(conf: dict[str, str]) -> dict[str, str]:
    """Spark conf with klog-spark.jar added to spark.jars (after any jars the user gave), on Spark 4:
    the jar extends Spark-internal classes (checked against pyspark 4.0 and 4.3)."""
    import pyspark

    if not pyspark.__version__.startswith("4."):
        return conf
    jars = [j for j in conf.get("spark.jars", "").split(",") if j.strip()]
    if JAR_PATH not in jars:
        jars.append(JAR_PATH)
    return {**conf, "spark.jars": ",".join(jars)}


def update_mode_available(spark) -> bool:  # noqa: ANN001 - SparkSession
    """Whether format("klog") resolves to the jar's class in this session's driver (Update mode works)."""
    jvm = spark.sparkContext._jvm
    try:
        jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader().loadClass(MAIN_CLASS)
    except Exception:  # noqa: BLE001 - py4j's error for ClassNotFoundException
        return False
    return True


if __name__ == "__main__":
    built = build()
    print(f"wrote {JAR_PATH}: {', '.join(sorted(built))} ({javac_version()})", file=sys.stderr)
