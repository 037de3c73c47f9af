"""The broker layer: what a Kafka broker does with the partitions of one data directory, between the
metadata (klog.meta) and the user's Python API (klog.client): replication across log dirs
(replication), producer state and the server's batch appends (batches), retention and compaction
scheduling (lifecycle), verification (verify), importing Kafka's own log directories (importer),
Kafka's checkpoint files (kafka_checkpoints), log dir moves and replica sizes (dirs), the offsets
ListOffsets and read_committed need (offsets), the one partition writer (writer), the transaction
coordinator (txn_coordinator) and producer ids (producer_ids), committed records found lost at
recovery (data_loss), and which topics and partitions a request names (resolve).
Imports store, security and meta; never client or a face (cli, server, spark, connect)."""
