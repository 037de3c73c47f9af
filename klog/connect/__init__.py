"""klog connect: Kafka's Connect API — connectors between topics and other systems.

A face beside the CLI and the server, over the client library (klog.client): the same runtime works
against the local store and against a Kafka cluster (a RemoteStore). Formats follow Kafka Connect
(internal topics, converters, transforms, error headers) and Debezium (change-event envelopes).
"""
