"""`klog registry`: Confluent's Schema Registry REST API, its schemas kept in the compacted topic `_schemas`
of a store or cluster through klog's client API (schemas.py), compatibility levels (compat.py) over Avro's
resolution rules (klog.protocol.avro_compat, which Connect's AvroConverter shares) and JSON Schema's diff
rules (klog.protocol.json_compat, which Connect's JsonSchemaConverter shares), the HTTP face (server.py)."""
