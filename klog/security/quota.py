"""Client quotas as Kafka computes them (ClientQuotaManager, QuotaUtils, Rate/SampledStat).

Entities: a user, a client id, or both; either may be the default (None here, `<default>` to Kafka).
Quota keys: producer_byte_rate and consumer_byte_rate (bytes/s), request_percentage (percent of one
request-handling thread's time per window). The quota that applies is the first that exists in
Kafka's precedence order:
  user+client, user+default client, user, default user+client, default user+default client,
  default user, client, default client.
Usage is recorded per window (`samples` windows of `window_ms`); the rate is the sum over the kept
windows divided by their elapsed time (at least samples-1 full windows, as Kafka's Rate does).
When a recording makes the rate exceed the quota, the client is throttled for
    (rate - quota) / quota * elapsed_ms
which is the time after which the rate over the longer elapsed time is back at the quota.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

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
SENSORS_MAX = 100_000  # distinct (quota, user, client) rate trackers kept; the oldest go first

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
class Rate:
    """Sum of values over the last `samples` windows of `window_ms`, per second of elapsed time."""

    window_ms: int = WINDOW_MS_DEFAULT
    samples: int = SAMPLES_DEFAULT
    windows: list[list[float]] = field(default_factory=list)  # [window start ms, sum]

    def record(self, value: float, now_ms: float) -> None:
        if not self.windows or now_ms >= self.windows[-1][0] + self.window_ms:
            start = now_ms - (now_ms % self.window_ms)
            self.windows.append([start, 0.0])
            del self.windows[:-self.samples]
        self.windows[-1][1] += value

    def _purge(self, now_ms: float) -> None:
        oldest_kept = now_ms - self.samples * self.window_ms
        while self.windows and self.windows[0][0] + self.window_ms <= oldest_kept:
            self.windows.pop(0)

    def elapsed_ms(self, now_ms: float) -> float:
        self._purge(now_ms)
        start = self.windows[0][0] if self.windows else now_ms
        elapsed = now_ms - start
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:  # Kafka's Rate.windowSize: assume samples-1 full windows at least
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def per_second(self, now_ms: float) -> float:
        elapsed = self.elapsed_ms(now_ms)
        return sum(w[1] for w in self.windows) / elapsed * 1000.0


def throttle_ms(rate: Rate, quota_per_s: float, now_ms: float) -> int:
    """Kafka's QuotaUtils.throttleTime: 0 while the rate is within the quota."""
    observed = rate.per_second(now_ms)
    if observed <= quota_per_s or quota_per_s <= 0:
        return 0 if quota_per_s > 0 else THROTTLE_MS_MAX
    delay = (observed - quota_per_s) / quota_per_s * rate.elapsed_ms(now_ms)
    return min(THROTTLE_MS_MAX, int(delay))


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
        self._rates: dict[tuple[str, str, str], Rate] = {}

    def quotas(self) -> dict[Entity, dict[str, float]]:
        now = self._clock_ms()
        if now - self._loaded_ms >= self.reload_ms:
            self._quotas = self._load()
            self._loaded_ms = now
        return self._quotas

    def invalidate(self) -> None:
        self._loaded_ms = float("-inf")

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Record `value` (bytes, or request-handling ms for request_percentage); the throttle in ms."""
        found = resolve(self.quotas(), user, client_id, key)
        if found is None:
            return 0
        quota, source = found
        names = dict(source)
        # one rate per quota entity as it applies: a user-level quota is shared by all that user's clients
        sensor = (key, user if USER in names else "", client_id if CLIENT_ID in names else "")
        rate = self._rates.get(sensor)
        if rate is None:
            if len(self._rates) >= SENSORS_MAX:
                self._rates.pop(next(iter(self._rates)))
            rate = self._rates[sensor] = Rate(self.window_ms, self.samples)
        now = self._clock_ms()
        rate.record(value, now)
        if key == REQUEST_PERCENTAGE:  # percent of one thread: ms of work per second, /10
            return throttle_ms(_ScaledRate(rate, 0.1), quota, now)
        return throttle_ms(rate, quota, now)


class _ScaledRate(Rate):
    """A view of a Rate multiplied by `scale` (request ms per s -> percent)."""

    def __init__(self, rate: Rate, scale: float) -> None:
        super().__init__(rate.window_ms, rate.samples, rate.windows)
        self.scale = scale

    def per_second(self, now_ms: float) -> float:
        return super().per_second(now_ms) * self.scale
