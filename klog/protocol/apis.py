"""Kafka's API keys: the number at the start of every request header, one name each.

The server registers its handlers under these (server/dispatch.py) and the cluster client sends
them (client/remote); neither defines its own. Plain ints, so importing this loads no kio."""

from __future__ import annotations

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
OFFSET_DELETE = 47
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_CLUSTER = 60


def api_name(api_key: int) -> str:
    """Kafka's name of an API key ("Produce", "ListOffsets"), or "api key N" for one we do not know."""
    for name, value in globals().items():
        if value == api_key and name.isupper() and isinstance(value, int):
            return "".join(part.capitalize() for part in name.split("_"))
    from kio.index import api_key_map  # a key klog has no constant for (only a log line asks)

    name = api_key_map.get(api_key)
    return f"api key {api_key}" if name is None else "".join(part.capitalize() for part in name.split("_"))
