"""The broker layer: what a Kafka broker does with the partitions of one data directory, between the
metadata (klog.meta) and the user's Python API (klog.client): replication across log dirs
(replication), producer state and the server's batch appends (batches), retention and compaction
scheduling (lifecycle), verification (verify), importing Kafka's own log directories (importer),
Kafka's checkpoint files (kafka_checkpoints), log dir moves (dirs), and which topics and partitions
a request names (resolve). Imports store and meta, never client or a face (cli, server, spark)."""
