"""Producer ids for idempotent and transactional producers, local and served alike.

They come from the clock (ms << 10 | a counter), so one handed out after a restart never meets an id
whose sequences are still in the log (the sequence state itself lives in the log:
klog.broker.batches.ProducerStates)."""

from __future__ import annotations

import itertools
import threading
import time

_counter = itertools.count()
_lock = threading.Lock()
_last_ms = 0


def new_producer_id() -> int:
    global _last_ms
    with _lock:
        now = max(int(time.time() * 1000), _last_ms)
        n = next(_counter) % 1024
        if n == 1023:
            now += 1  # 1024 ids used in this ms: borrow the next one
        _last_ms = now
        return (now << 10) | n
