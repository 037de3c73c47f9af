"""A PySpark job for `klog spark run`: status counts per path from a topic of JSON access-log lines.

    klog spark run samples/spark_job.py quickstart-access            # print the top paths
    klog spark run samples/spark_job.py quickstart-access path-stats  # ...and produce them to a topic

klog starts the session (local[*] unless --master), registers the `klog` source and points it at
the store, so the job reads a topic like Spark's Kafka source: key/value are binary columns.

It also runs as a plain PySpark program (`python samples/spark_job.py`, spark-submit): PySpark 4
registers the `klog` source by itself when klog is installed (pip install 'klog[spark]'; an editable
install hides it from that lookup) in the Python Spark's workers run (set PYSPARK_PYTHON to it).
The store is then $KLOG_DATA_DIR as the driver saw it, else klog's default directory. On a cluster
the executors need klog too, and the data directory on a filesystem they all mount at the same path
(pass .option("dataDir", ...)).
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

spark = SparkSession.builder.getOrCreate()
topic = sys.argv[1] if len(sys.argv) > 1 else "quickstart-access"
target = sys.argv[2] if len(sys.argv) > 2 else None

records = spark.read.format("klog").option("subscribe", topic).load()
schema = "path STRING, status INT, bytes BIGINT"
hits = records.select(F.from_json(F.col("value").cast("string"), schema).alias("r")).select("r.*")
stats = (hits.groupBy("path")
         .agg(F.count("*").alias("hits"), F.sum(F.when(F.col("status") >= 400, 1).otherwise(0)).alias("errors"),
              F.sum("bytes").alias("bytes"))
         .orderBy(F.desc("hits"), "path"))

for row in stats.limit(10).collect():
    print(f"{row.path:<28} {row.hits:>6} hits {row.errors:>5} errors {row.bytes:>12} bytes")

if target:
    # one record per path, keyed by it: Kafka's partitioner keeps a path on one partition
    (stats.select(F.col("path").alias("key"), F.to_json(F.struct("path", "hits", "errors", "bytes")).alias("value"))
     .write.format("klog").option("topic", target).mode("append").save())
    print(f"produced {stats.count()} records to {target}", file=sys.stderr)
