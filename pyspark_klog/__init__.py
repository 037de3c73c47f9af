"""PySpark's automatic registration of the `klog` data source (PySpark 4: top-level pyspark_* modules).

PySpark looks, on the first data source call of a session, for installed top-level modules named
pyspark_* that expose DefaultSource, and registers each under its name(): with klog installed,
spark.read.format("klog") works in any PySpark program, no klog.spark.register() call needed. The
store is the dataDir option, else $KLOG_DATA_DIR, else klog's default data directory.
"""

from klog.spark.source import KlogDataSource as DefaultSource

__all__ = ["DefaultSource"]
