"""Kafka 3.9's oldest request/response versions as kio generated them (see klog/protocol/schemas.py).
Generated code, copied unchanged from kio's repository (github.com/Aiven-Open/kio, Apache-2.0,
schema built on Kafka 3.9.0): do not edit by hand."""
