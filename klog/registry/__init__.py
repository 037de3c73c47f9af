"""`klog registry`: Confluent's Schema Registry REST API, its schemas kept in the compacted topic `_schemas`
of a store or cluster through klog's client API (schemas.py), Avro compatibility by Avro's resolution
rules (compat.py), JSON Schema compatibility by Confluent's diff rules (klog.protocol.json_compat, which Connect's
JsonSchemaConverter shares), the HTTP face (server.py)."""
