"""klog/store: Kafka-format segments, partition logs, replicas and recovery (no LMDB, no CLI)."""
