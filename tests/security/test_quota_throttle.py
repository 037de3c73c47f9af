"""A client reading or sending flat out is held to its byte-rate quota at every stretch of a few
seconds, not only on average: the throttle leaves no credit to spend in a burst after it.

Goal: the defect behind test_serve_quotas' throttled consumer measuring ~1.45x its quota in some
runs. With Kafka's sampled Rate (klog's first model) a large sample holds the rate up until it
expires, so the throttle is long and the window then looks empty: the client reads several answers
at once, ~1.6 s of quota within milliseconds, every ~2.6 s. Method: the QuotaManager with a
simulated clock and the server test's numbers (200 kB/s, 11 windows of 200 ms, 64 kB answers, a
client back 1 ms after each throttle); every stretch of at least 2 s past the first 3 s (the
initial burst credit spent) is measured, counting the answers that arrive after its start.
"""

from __future__ import annotations

from klog.security.quota import CONSUMER_BYTE_RATE, QuotaManager, entity

QUOTA = 200_000  # bytes/s
ANSWER = 65_605  # bytes: a 64 KiB fetch answer


def flat_out(answers: int, window_ms: int = 200, samples: int = 11, start_ms: float = 1000.0) -> list[float]:
    """The times (ms) a consumer that fetches again 1 ms after each answer's throttle gets its answers."""
    clock = [start_ms]
    manager = QuotaManager(lambda: {entity(client_id="reader"): {CONSUMER_BYTE_RATE: QUOTA}},
                           window_ms, samples, clock_ms=lambda: clock[0])
    arrivals = []
    for _ in range(answers):
        arrivals.append(clock[0])
        clock[0] += 1 + manager.record(CONSUMER_BYTE_RATE, "", "reader", ANSWER)
    return arrivals


def stretch_rates(arrivals: list[float], after_ms: float, at_least_ms: float) -> list[float]:
    """Bytes/s over each stretch between two arrivals at least `at_least_ms` apart, both past
    `after_ms`: the answers after its start over its length."""
    steady = [t for t in arrivals if t >= arrivals[0] + after_ms]
    return [(j - i) * ANSWER / ((steady[j] - steady[i]) / 1000)
            for i in range(len(steady)) for j in range(i + 1, len(steady))
            if steady[j] - steady[i] >= at_least_ms]


def test_flat_out_consumer_held_to_its_quota_over_every_stretch():
    for start_ms in (1000.0, 1037.0, 1111.0, 1150.0):  # phases of the clock against the windows
        rates = stretch_rates(flat_out(60, start_ms=start_ms), after_ms=3000, at_least_ms=2000)
        assert rates
        assert max(rates) <= QUOTA * 1.2, f"{max(rates) / QUOTA:.2f}x the quota over some stretch"
        assert min(rates) >= QUOTA * 0.8, f"{min(rates) / QUOTA:.2f}x the quota over some stretch"


def test_initial_burst_is_the_quota_windows_worth():
    """A fresh client may take samples * window of its quota at once (2.2 s of it here), then waits."""
    burst = QUOTA * 11 * 200 // 1000  # 440 kB
    arrivals = flat_out(12)
    at_once = [t for t in arrivals if t - arrivals[0] < 50]
    assert len(at_once) == -(-burst // ANSWER)  # the 7th answer overdraws the credit
    overdraft_ms = (len(at_once) * ANSWER - burst) / QUOTA * 1000
    # paid back before the next answer (less the few ms of refill while the burst went out)
    assert arrivals[len(at_once)] - arrivals[len(at_once) - 1] >= overdraft_ms - 10
    paced = [b - a for a, b in zip(arrivals[len(at_once):-1], arrivals[len(at_once) + 1:], strict=True)]
    assert all(abs(gap - ANSWER / QUOTA * 1000) <= 2 for gap in paced)  # then one answer per its time


def test_throttle_is_the_time_to_pay_back_the_overdraft():
    clock = [0.0]
    manager = QuotaManager(lambda: {entity(client_id="c"): {CONSUMER_BYTE_RATE: 1000}}, 1000, 11,
                           clock_ms=lambda: clock[0])
    assert manager.record(CONSUMER_BYTE_RATE, "", "c", 11_000) == 0  # the whole burst: credit 0
    assert manager.record(CONSUMER_BYTE_RATE, "", "c", 500) == 500  # 500 bytes at 1 kB/s
    clock[0] += 500
    assert manager.record(CONSUMER_BYTE_RATE, "", "c", 0) == 0  # paid back
    clock[0] += 60_000  # idle: the credit refills to the burst, no further
    assert manager.record(CONSUMER_BYTE_RATE, "", "c", 11_000) == 0
    assert manager.record(CONSUMER_BYTE_RATE, "", "c", 1) == 1
