"""Quota throttling in responses: how many bytes a response carries (a consumer's byte rate), and the
response with Kafka's throttle_time set so the client backs off as Kafka's clients do."""

from __future__ import annotations

from typing import Any

from klog.security.quota import CONSUMER_BYTE_RATE


def response_bytes(response: Any) -> int:
    size = getattr(response, "size", None)
    if callable(size):  # framing.RawBody (zero-copy fetch)
        return int(size())
    return sum(len(r.records or b"") for t in getattr(response, "responses", ()) for r in t.partitions
               if hasattr(r, "records"))


def fetch_max_bytes(ctx: Any, max_bytes: int) -> int:
    """A Fetch's max_bytes, at most what its consumer_byte_rate's bucket holds: as Kafka caps a
    consumer's fetch (getMaxValueInQuotaWindow), so that one answer does not earn a throttle longer
    than the quota's windows (librdkafka asks for up to 50 MB). A single larger batch still goes out
    whole, as any Fetch's first batch does."""
    security = getattr(ctx.server, "security", None)
    if security is None or not security.quotas.quotas():  # (none set: the common case)
        return max_bytes
    burst = security.quotas.burst(CONSUMER_BYTE_RATE, ctx.principal.partition(":")[2], ctx.client_id or "")
    return max_bytes if burst is None else min(max_bytes, max(1, int(burst)))


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """`response` with throttle_time set (kio dataclass), or the raw fetch body's first field patched."""
    if throttle_ms <= 0:
        return response
    import dataclasses
    import datetime

    if dataclasses.is_dataclass(response) and not hasattr(response, "parts"):  # a kio answer, not a RawBody
        if not any(f.name == "throttle_time" for f in dataclasses.fields(response)):
            return response
        from kio.static.primitive import i32Timedelta

        return dataclasses.replace(response, throttle_time=i32Timedelta.parse(
            datetime.timedelta(milliseconds=min(throttle_ms, 2**31 - 1))))
    parts = getattr(response, "parts", None)
    rtype = getattr(response, "response_type", None)
    at = getattr(response, "throttle_at", None)
    if at is not None and parts and isinstance(parts[0], bytes):  # Produce: after the partitions
        parts[0] = parts[0][:at] + min(throttle_ms, 2**31 - 1).to_bytes(4, "big") + parts[0][at + 4:]
        return response
    if parts and isinstance(parts[0], bytes) and len(parts[0]) >= 4 and rtype is not None \
            and dataclasses.fields(rtype)[0].name == "throttle_time":  # Fetch v1+: the body's first int32
        parts[0] = min(throttle_ms, 2**31 - 1).to_bytes(4, "big") + parts[0][4:]
    return response
