"""klog on Spark: the `klog` PySpark data source and the `klog spark` commands' library functions.

    from klog.spark import start_session, SessionSettings
    spark = start_session(SessionSettings(data_dir="/tmp/klog-demo"))
    spark.read.format("klog").option("subscribe", "orders").load().show()

In a session of your own, PySpark 4 finds the source by itself when klog is installed (the
top-level pyspark_klog module); `klog.spark.register(spark, data_dir)` also makes data_dir the
default store. writeStream.format("klog").outputMode("update") also needs klog's jar on the driver's
classpath (start_session adds it; in your own session: spark.jars = klog.spark.jar.JAR_PATH).
Importing this package does not import pyspark; its modules do when used.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "SessionSettings": "klog.spark.session",
    "start_session": "klog.spark.session",
    "spark_session": "klog.spark.session",
    "register": "klog.spark.session",
    "KlogDataSource": "klog.spark.source",
    "ForeachBatchSink": "klog.spark.sink",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'klog.spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
