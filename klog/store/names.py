"""Topic-name rules (kafka-log-format.md §6) and the guard that keeps paths inside the store."""

from __future__ import annotations

import os
import re

from klog.errors import InvalidTopicError, UnsafePathError

TOPIC_NAME_LENGTH_MAX = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> str:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name '{name}' is not allowed")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the limit is {TOPIC_NAME_LENGTH_MAX}")
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        shown = ", ".join(repr(c) for c in bad[:5])
        raise InvalidTopicError(f"topic name '{name}' has illegal characters ({shown}); use [a-zA-Z0-9._-]")
    return name


def collision_key(name: str) -> str:
    """Kafka's metric-name collision: '.' and '_' are the same."""
    return name.replace(".", "_")


def inside(root: str, *parts: str) -> str:
    """Join parts under root, refusing anything that would resolve outside root."""
    root_real = os.path.realpath(root)
    path = os.path.realpath(os.path.join(root_real, *parts))
    if path != root_real and not path.startswith(root_real + os.sep):
        raise UnsafePathError(f"path '{os.path.join(*parts)}' escapes {root}")
    return path
