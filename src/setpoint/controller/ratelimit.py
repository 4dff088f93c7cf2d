"""Rate limiters for the work queue.

A rate limiter answers one question: *how long should this key wait before it is retried?*
The work queue asks it from :meth:`~setpoint.controller.workqueue.WorkQueue.add_rate_limited`.
The semantics follow client-go's ``util/workqueue`` rate limiters, which controller-runtime uses:

- :class:`ItemExponentialFailureRateLimiter`: per-key exponential backoff, 5 ms doubling up to
  1000 s by default. :meth:`~RateLimiter.forget` resets a key after a success.
- :class:`BucketRateLimiter`: one token bucket for the whole queue (10 qps, burst 100 by default),
  so a storm of failures across many keys cannot turn into a storm of API calls.
- :class:`MaxOfRateLimiter`: the longest wait any of its limiters asks for.
- :func:`default_controller_rate_limiter`: the max-of of the two above, client-go's
  ``DefaultControllerRateLimiter``.

:class:`PerKeyWindowLimiter` is different in kind: it does not compute retry delays but caps how
often one key may *start processing* (at most N starts per sliding window). The queue consults it
for every key that becomes ready, so it also holds back keys that change very often.

Time comes from a :class:`~setpoint.api.clock.Clock` (the default reads the running asyncio
loop's clock; tests pass a :class:`~setpoint.api.clock.ManualClock`).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from setpoint.api.clock import Clock, LoopClock

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "PerKeyLimit",
    "PerKeyWindowLimiter",
    "RateLimiter",
    "RateLimiterOptions",
    "default_controller_rate_limiter",
]

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)

# Beyond this many doublings every sane base delay is past any sane cap, and 2.0**exp would
# eventually overflow a float; stop computing and return the cap.
_MAX_EXPONENT = 1000


# --------------------------------------------------------------------------------------------
# Retry rate limiters


class RateLimiter(Protocol[K_contra]):
    """Decides how long a key waits before it is retried (client-go's ``TypedRateLimiter``)."""

    def when(self, key: K_contra) -> float:
        """Record one more retry of ``key`` and return how many seconds it should wait."""
        ...

    def forget(self, key: K_contra) -> None:
        """Stop tracking ``key`` (call it when processing succeeded) so its backoff resets."""
        ...

    def num_requeues(self, key: K_contra) -> int:
        """How many times ``key`` has been retried since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter(Generic[K]):
    """Per-key exponential backoff: ``base_delay * 2**failures``, capped at ``max_delay``.

    The first retry of a key waits ``base_delay``, the second twice that, and so on. Each key
    has its own failure count, so one broken object does not slow down the others.
    """

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay < 0 or not math.isfinite(base_delay):
            raise ValueError(
                f"base_delay={base_delay!r}: the first retry delay must be a finite number "
                "of seconds >= 0"
            )
        if max_delay < base_delay or not math.isfinite(max_delay):
            raise ValueError(
                f"max_delay={max_delay!r}: the backoff cap must be finite and at least "
                f"base_delay={base_delay!r}"
            )
        self._base = base_delay
        self._max = max_delay
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        """Count a failure of ``key`` and return its backoff."""
        exponent = self._failures.get(key, 0)
        self._failures[key] = exponent + 1
        if exponent >= _MAX_EXPONENT:
            return self._max
        return min(self._base * 2.0**exponent, self._max)

    def forget(self, key: K) -> None:
        """Reset ``key``'s failure count."""
        self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        """``key``'s failure count."""
        return self._failures.get(key, 0)


class BucketRateLimiter(Generic[K]):
    """One token bucket shared by all keys: ``qps`` tokens per second, at most ``burst`` saved.

    Every :meth:`when` takes a token. When the bucket is empty the call still succeeds but
    reserves a future token and returns the wait until that token exists (the semantics of
    ``golang.org/x/time/rate``'s ``Reserve().Delay()`` that client-go relies on). Keys are not
    tracked, so :meth:`forget` does nothing and :meth:`num_requeues` is always 0.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, *, clock: Clock | None = None) -> None:
        if not (qps > 0 and math.isfinite(qps)):
            raise ValueError(f"qps={qps!r}: the bucket refill rate must be a finite number > 0")
        if burst < 1:
            raise ValueError(f"burst={burst!r}: the bucket must hold at least one token")
        self._qps = qps
        self._burst = float(burst)
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._tokens = float(burst)
        self._last: float | None = None

    def when(self, key: K) -> float:
        """Take a token and return how long to wait until it is actually available."""
        now = self._clock.now()
        if self._last is not None:
            # Refill since the last reservation; tokens may be negative (reserved ahead).
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def forget(self, key: K) -> None:
        """Nothing to forget: the bucket is shared by all keys."""

    def num_requeues(self, key: K) -> int:
        """Return 0: the bucket does not count per key."""
        return 0


class MaxOfRateLimiter(Generic[K]):
    """Combines limiters: waits as long as the strictest one says, forgets in all of them."""

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter to combine")
        self._limiters = limiters

    def when(self, key: K) -> float:
        """Return the longest wait of all limiters (each one records the retry)."""
        return max(limiter.when(key) for limiter in self._limiters)

    def forget(self, key: K) -> None:
        """Forget ``key`` in every limiter."""
        for limiter in self._limiters:
            limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """Return the highest retry count any limiter reports."""
        return max(limiter.num_requeues(key) for limiter in self._limiters)


@dataclass(frozen=True, kw_only=True)
class RateLimiterOptions:
    """Settings of the default retry limiter (client-go's ``DefaultControllerRateLimiter``)."""

    base_delay: float = 0.005
    """Seconds the first retry of a key waits; each further failure doubles it. Default 5 ms."""

    max_delay: float = 1000.0
    """Cap on one key's backoff, in seconds. Default 1000 s (about 16.7 minutes)."""

    overall_qps: float | None = 10.0
    """Retries per second across *all* keys once the burst is spent. Default 10.
    ``None`` turns the shared bucket off, leaving only per-key backoff."""

    overall_burst: int = 100
    """Retries the shared bucket lets through at once before ``overall_qps`` applies.
    Default 100. Ignored when ``overall_qps`` is ``None``."""

    def __post_init__(self) -> None:
        if self.base_delay < 0 or not math.isfinite(self.base_delay):
            raise ValueError(
                f"RateLimiterOptions.base_delay={self.base_delay!r}: must be a finite number "
                "of seconds >= 0"
            )
        if self.max_delay < self.base_delay or not math.isfinite(self.max_delay):
            raise ValueError(
                f"RateLimiterOptions.max_delay={self.max_delay!r}: must be finite and at least "
                f"base_delay={self.base_delay!r}, since it caps the backoff that starts there"
            )
        if self.overall_qps is not None and not (
            self.overall_qps > 0 and math.isfinite(self.overall_qps)
        ):
            raise ValueError(
                f"RateLimiterOptions.overall_qps={self.overall_qps!r}: must be a finite number "
                "> 0, or None to turn the shared bucket off"
            )
        if self.overall_burst < 1:
            raise ValueError(
                f"RateLimiterOptions.overall_burst={self.overall_burst!r}: the shared bucket "
                "must let at least one retry through"
            )


def default_controller_rate_limiter(
    options: RateLimiterOptions | None = None, *, clock: Clock | None = None
) -> RateLimiter[K]:
    """Per-key exponential backoff combined (max-of) with a shared token bucket.

    With default options this is client-go's ``DefaultControllerRateLimiter``: 5 ms doubling to
    1000 s per key, and at most 10 retries per second (burst 100) across the queue.
    """
    options = options if options is not None else RateLimiterOptions()
    per_key: ItemExponentialFailureRateLimiter[K] = ItemExponentialFailureRateLimiter(
        options.base_delay, options.max_delay
    )
    if options.overall_qps is None:
        return per_key
    bucket: BucketRateLimiter[K] = BucketRateLimiter(
        options.overall_qps, options.overall_burst, clock=clock
    )
    return MaxOfRateLimiter(per_key, bucket)


# --------------------------------------------------------------------------------------------
# Per-key processing cap


@dataclass(frozen=True, kw_only=True)
class PerKeyLimit:
    """At most ``max_processings`` starts of one key within any ``window`` seconds.

    Use it for objects that change far more often than they need reconciling (a status that
    ticks every second, say). Adds beyond the cap are not dropped: the key waits until the
    window allows another start, and the changes that arrived meanwhile are handled by that
    one later processing (reconciles are level-based).
    """

    max_processings: int
    """How many times one key may start processing within a window. No default: choose it."""

    window: float
    """Length of the sliding window in seconds. No default: choose it."""

    def __post_init__(self) -> None:
        if self.max_processings < 1:
            raise ValueError(
                f"PerKeyLimit.max_processings={self.max_processings!r}: a key must be allowed "
                "at least one processing per window"
            )
        if not (self.window > 0 and math.isfinite(self.window)):
            raise ValueError(
                f"PerKeyLimit.window={self.window!r}: the window must be a finite number of "
                "seconds > 0"
            )


class PerKeyWindowLimiter(Generic[K]):
    """Tracks processing starts per key and says when the next start is allowed.

    Memory is bounded by the keys that started within the last window: entries are kept in
    order of their latest start and dropped from the old end as :meth:`record` goes by.
    """

    def __init__(self, limit: PerKeyLimit) -> None:
        self._max = limit.max_processings
        self._window = limit.window
        # key -> start times of its last ``max`` processings, oldest first. The dict is ordered
        # by each key's latest start, so expired keys collect at the front.
        self._starts: OrderedDict[K, deque[float]] = OrderedDict()

    def earliest(self, key: K, now: float) -> float:
        """Return the earliest time >= ``now`` at which ``key`` may start processing again."""
        starts = self._starts.get(key)
        if starts is None or len(starts) < self._max:
            return now
        # The oldest of the last ``max`` starts must leave the window first.
        return max(now, starts[0] + self._window)

    def record(self, key: K, now: float) -> None:
        """Note that ``key`` started processing at ``now``."""
        starts = self._starts.pop(key, None)
        if starts is None:
            starts = deque(maxlen=self._max)
        starts.append(now)
        self._starts[key] = starts
        horizon = now - self._window
        while self._starts:
            oldest_key, oldest = next(iter(self._starts.items()))
            if oldest[-1] > horizon:
                break
            del self._starts[oldest_key]

    def __len__(self) -> int:
        """Return the number of keys currently tracked."""
        return len(self._starts)
