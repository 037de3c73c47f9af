"""Client quotas in Kafka's model (ClientQuotaManager's entities and precedence), held by Kafka's
TokenBucket.

Entities: a user, a client id, or both; either may be the default (None here, `<default>` to Kafka).
Quota keys: producer_byte_rate and consumer_byte_rate (bytes/s), request_percentage (percent of one
request-handling thread's time). The quota that applies is the first that exists in Kafka's
precedence order:
  user+client, user+default client, user, default user+client, default user+default client,
  default user, client, default client.
Usage is taken from a token bucket (Kafka's TokenBucket stat, KIP-599): it holds at most
`samples` * `window_ms` worth of the quota (a fresh or idle client may use that much at once) and
refills at the quota. A recording that leaves it below zero throttles the client for
    -credit / quota
the time the bucket takes to refill to zero. Kafka's sampled Rate, which its client quotas still
use, was klog's first model: a large sample holds the rate up until it expires, after which the
window looks empty and the client is let through in a burst (TokenBucket's javadoc); a consumer
reading flat out measured ~1.45x its quota over a few seconds in some runs.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)

WINDOW_MS_DEFAULT = 1000  # quota.window.size.seconds
SAMPLES_DEFAULT = 11  # quota.window.num
THROTTLE_MS_MAX = 3_600_000  # bounded, whatever the numbers (Kafka caps at the max of its configs)
SENSORS_MAX = 100_000  # distinct (quota, user, client) token buckets kept; the oldest go first

Entity = tuple[tuple[str, str | None], ...]  # sorted ((type, name or None for default), ...)


def entity(user: str | None | bool = False, client_id: str | None | bool = False) -> Entity:
    """An entity key: False leaves the part out, None is the default, a string names it."""
    parts = []
    if user is not False:
        parts.append((USER, user))
    if client_id is not False:
        parts.append((CLIENT_ID, client_id))
    if not parts:
        raise ValueError("a quota entity names a user, a client id, or both")
    return tuple(sorted(parts))  # type: ignore[arg-type]


def entity_to_json(e: Entity) -> str:
    return json.dumps([[t, n] for t, n in e], separators=(",", ":"))


def entity_from_json(text: str) -> Entity:
    return tuple((t, n) for t, n in json.loads(text))


def precedence(user: str, client_id: str) -> list[Entity]:
    """Kafka's lookup order for a connection's (user, client id)."""
    return [entity(user, client_id), entity(user, None), entity(user),
            entity(None, client_id), entity(None, None), entity(None),
            entity(client_id=client_id), entity(client_id=None)]


def resolve(quotas: dict[Entity, dict[str, float]], user: str, client_id: str,
            key: str) -> tuple[float, Entity] | None:
    """The quota value for `key` that applies to (user, client id), and the entity it came from."""
    for e in precedence(user, client_id):
        value = quotas.get(e, {}).get(key)
        if value is not None:
            return value, e
    return None


@dataclass
class TokenBucket:
    """Credit of one quota entity (Kafka's TokenBucket): at most `samples` windows' worth of the
    quota, refilled at the quota; full when created."""

    window_ms: int = WINDOW_MS_DEFAULT
    samples: int = SAMPLES_DEFAULT
    credit: float | None = None  # (None: not yet recorded, full)
    updated_ms: float = 0.0

    def burst(self, quota_per_s: float) -> float:
        return quota_per_s * self.samples * self.window_ms / 1000

    def record(self, value: float, quota_per_s: float, now_ms: float) -> None:
        burst = self.burst(quota_per_s)
        self.credit = min(burst, self.credit_at(quota_per_s, now_ms) - value)
        self.updated_ms = now_ms

    def credit_at(self, quota_per_s: float, now_ms: float) -> float:
        burst = self.burst(quota_per_s)
        if self.credit is None:
            return burst
        return min(burst, self.credit + quota_per_s * max(0.0, now_ms - self.updated_ms) / 1000)


def throttle_ms(bucket: TokenBucket, quota_per_s: float, now_ms: float) -> int:
    """The time the bucket takes to refill to zero (ControllerMutationQuotaManager.throttleTimeMs);
    0 while it holds credit. Rounded up: a client back after it finds credit again."""
    if quota_per_s <= 0:
        return THROTTLE_MS_MAX
    credit = bucket.credit_at(quota_per_s, now_ms)
    if credit >= 0:
        return 0
    return min(THROTTLE_MS_MAX, math.ceil(-credit / quota_per_s * 1000))


class QuotaManager:
    """Records usage per connection identity and answers how long to throttle.

    `load()` returns the configured quotas (reloaded at most every `reload_ms`, so `klog quotas`
    or AlterClientQuotas from another process applies within that time)."""

    def __init__(self, load: Callable[[], dict[Entity, dict[str, float]]], window_ms: int = WINDOW_MS_DEFAULT,
                 samples: int = SAMPLES_DEFAULT, reload_ms: int = 1000,
                 clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000) -> None:
        self._load = load
        self.window_ms = window_ms
        self.samples = samples
        self.reload_ms = reload_ms
        self._clock_ms = clock_ms
        self._quotas: dict[Entity, dict[str, float]] = {}
        self._loaded_ms = float("-inf")
        self._buckets: dict[tuple[str, str, str], TokenBucket] = {}

    def quotas(self) -> dict[Entity, dict[str, float]]:
        now = self._clock_ms()
        if now - self._loaded_ms >= self.reload_ms:
            self._quotas = self._load()
            self._loaded_ms = now
        return self._quotas

    def invalidate(self) -> None:
        self._loaded_ms = float("-inf")

    def burst(self, key: str, user: str, client_id: str) -> float | None:
        """What the bucket of `key` for (user, client id) holds when full; None: no quota applies."""
        found = resolve(self.quotas(), user, client_id, key)
        return None if found is None else TokenBucket(self.window_ms, self.samples).burst(found[0])

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Record `value` (bytes, or request-handling ms for request_percentage); the throttle in ms."""
        found = resolve(self.quotas(), user, client_id, key)
        if found is None:
            return 0
        quota, source = found
        names = dict(source)
        # one bucket per quota entity as it applies: a user-level quota is shared by all that user's clients
        sensor = (key, user if USER in names else "", client_id if CLIENT_ID in names else "")
        bucket = self._buckets.get(sensor)
        if bucket is None:
            if len(self._buckets) >= SENSORS_MAX:
                self._buckets.pop(next(iter(self._buckets)))
            bucket = self._buckets[sensor] = TokenBucket(self.window_ms, self.samples)
        if key == REQUEST_PERCENTAGE:  # percent of one thread: 1 % is 10 ms of work per second
            quota *= 10
        now = self._clock_ms()
        bucket.record(value, quota, now)
        return throttle_ms(bucket, quota, now)

