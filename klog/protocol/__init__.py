"""Kafka's wire protocol as both ends of klog speak it: `klog serve` (klog.server) and the cluster
client (klog.client.remote). API keys (apis), error codes by name (errors), loading kio without its
test-only imports (loading), kio helpers one handler uses for every version (kafka), the
request/response framing (framing), the Avro schema rewriting `klog registry` and Connect's
AvroConverter share (avro_schema) and Avro's resolution rules both check compatibility with
(avro_compat), and the reading of JSON Schema documents `klog registry` and Connect's
JsonSchemaConverter share (json_schema) and their compatibility by Confluent's diff rules
(json_compat; patternProperties matched in a child process with a deadline, json_patterns).
Imports nothing of klog above klog.errors."""
