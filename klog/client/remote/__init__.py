"""The remote backend: the client interfaces (store, producer, consumer) over a Kafka cluster.

confluent-kafka (librdkafka in its wheel) does the protocol work; it is imported only here, so the
local path and `klog --help` never load it.
"""
