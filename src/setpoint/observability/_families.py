"""setpoint's own counters, gauges and histograms, exposed through prometheus_client at scrape.

``prometheus_client`` takes ~94 M instructions (~30 ms) to import, because its package imports
its HTTP exposition (``wsgiref``, ``http.server``, ``email``, ``urllib.request``); an operator
paid that at every start, to count its first reconcile. The metrics of
:class:`~setpoint.observability.metrics.Metrics` are therefore kept here, in plain Python, with
prometheus_client's API for recording (``labels``, ``inc``, ``dec``, ``set``,
``set_function``, ``observe``, ``remove``) and ``get`` to read one series, and
:class:`FamilyCollector` turns them into prometheus_client ``Metric`` families only when a
registry collects them: at a scrape.

Guarantees:
    - What a registry collects is what prometheus_client's own ``Counter``, ``Gauge`` and
      ``Histogram`` would give for the same calls: the same family names and types, sample
      names, label order, ``le`` strings and sample order (tests/unit/observability/
      test_families.py compares the exposition of both, byte for byte), except the
      ``*_created`` samples, which setpoint leaves out anyway (client_golang has none).
    - Recording is thread-safe: each series has a lock, as prometheus_client's values have.
    - Label values are checked and converted with ``str`` as prometheus_client does; a wrong
      count or wrong names raise ``ValueError``.

Caveats:
    - The objects are not prometheus_client metrics: ``isinstance(metrics.reconcile_total,
      prometheus_client.Counter)`` is False. They register on a registry through
      :class:`FamilyCollector`, never one by one.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["Counter", "FamilyCollector", "Gauge", "Histogram"]

C = TypeVar("C", bound="_Series")


class _Series:
    """One series (one set of label values) of a family."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def samples(
        self, name: str, labels: dict[str, str]
    ) -> Iterator[tuple[str, dict[str, str], float]]:
        """``(sample name, labels, value)`` of this series, as prometheus_client orders them."""
        raise NotImplementedError


class _CounterSeries(_Series):
    __slots__ = ("_value",)

    def __init__(self) -> None:
        super().__init__()
        self._value = 0.0

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (not negative)."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        with self._lock:
            self._value += amount

    def get(self) -> float:
        """The current count."""
        return self._value

    def samples(
        self, name: str, labels: dict[str, str]
    ) -> Iterator[tuple[str, dict[str, str], float]]:
        yield name + "_total", labels, self._value


class _GaugeSeries(_Series):
    __slots__ = ("_function", "_value")

    def __init__(self) -> None:
        super().__init__()
        self._value = 0.0
        self._function: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        """Set the value."""
        with self._lock:
            self._value = float(value)

    def inc(self, amount: float = 1) -> None:
        """Add ``amount``."""
        with self._lock:
            self._value += amount

    def dec(self, amount: float = 1) -> None:
        """Subtract ``amount``."""
        with self._lock:
            self._value -= amount

    def set_function(self, function: Callable[[], float]) -> None:
        """Read the value from ``function`` whenever the series is collected."""
        self._function = function

    def get(self) -> float:
        """The current value (``set_function``'s answer, if one was given)."""
        function = self._function
        return float(function()) if function is not None else self._value

    def samples(
        self, name: str, labels: dict[str, str]
    ) -> Iterator[tuple[str, dict[str, str], float]]:
        yield name, labels, self.get()


class _HistogramSeries(_Series):
    __slots__ = ("_bounds", "_counts", "_sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        super().__init__()
        self._bounds = bounds
        self._counts = [0.0] * len(bounds)
        self._sum = 0.0

    def observe(self, amount: float) -> None:
        """Count ``amount`` in the first bucket whose upper bound is at least ``amount``.

        NaN is ignored: it belongs in no bucket (bisect would put it in the first), and
        prometheus_client's way, adding it to the sum, leaves the sum NaN for good.
        """
        if math.isnan(amount):
            return
        # bisect, not prometheus_client's scan of every bucket (40 for the reconcile time).
        index = bisect.bisect_left(self._bounds, amount)
        with self._lock:
            self._counts[min(index, len(self._counts) - 1)] += 1
            self._sum += amount

    def samples(
        self, name: str, labels: dict[str, str]
    ) -> Iterator[tuple[str, dict[str, str], float]]:
        from prometheus_client import utils

        # The library leaves this function unannotated; state the signature it has.
        go_string = cast("Callable[[float], str]", utils.floatToGoString)
        with self._lock:
            counts = list(self._counts)
            total = self._sum
        cumulative = 0.0
        for bound, count in zip(self._bounds, counts, strict=True):
            cumulative += count
            yield name + "_bucket", {**labels, "le": go_string(bound)}, cumulative
        yield name + "_count", labels, cumulative
        if self._bounds[0] >= 0:
            yield name + "_sum", labels, total


class _Family(Generic[C]):
    """A metric family: a name, a help text, label names and one series per label values."""

    kind: ClassVar[str]

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        """The family name (a counter's without ``_total``, as prometheus_client keeps it)."""
        self.documentation = documentation
        """The help text."""
        self.labelnames = tuple(labelnames)
        """The label names, in order."""
        self._lock = threading.Lock()
        self._series: dict[tuple[str, ...], C] = {}
        self._single: C | None = None if self.labelnames else self._new()

    def _new(self) -> C:
        raise NotImplementedError

    def labels(self, *values: object, **named: object) -> C:
        """The series of these label values (positional, or all by name), made on first use."""
        if not self.labelnames:
            raise ValueError(f"No label names were set when constructing {self.name}")
        if values and named:
            raise ValueError("Can't pass both *args and **kwargs")
        if named:
            if sorted(named) != sorted(self.labelnames):
                raise ValueError("Incorrect label names")
            key = tuple(str(named[label]) for label in self.labelnames)
        else:
            if len(values) != len(self.labelnames):
                raise ValueError("Incorrect label count")
            key = tuple(str(value) for value in values)
        series = self._series.get(key)
        if series is None:
            with self._lock:
                series = self._series.setdefault(key, self._new())
        return series

    def remove(self, *values: object) -> None:
        """Forget the series of these label values (nothing happens if there is none)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"Incorrect label count (expected {len(self.labelnames)})")
        with self._lock:
            self._series.pop(tuple(str(value) for value in values), None)

    def remove_matching(self, label: str, value: str) -> int:
        """Forget every series whose ``label`` is ``value``; how many (0 without that label).

        What a stopped controller's series need: a gauge would otherwise keep reading the
        last value of something that no longer runs.
        """
        if label not in self.labelnames:
            return 0
        position = self.labelnames.index(label)
        with self._lock:
            gone = [key for key in self._series if key[position] == value]
            for key in gone:
                del self._series[key]
        return len(gone)

    def _only(self) -> C:
        if self._single is None:
            raise ValueError(f"{self.name} has labels: call .labels(...) first")
        return self._single

    def metric(self, with_samples: bool = True) -> Metric:
        """The family as a prometheus_client ``Metric`` (what a registry collects)."""
        from prometheus_client.metrics_core import Metric

        metric = Metric(self.name, self.documentation, self.kind)
        if not with_samples:
            return metric
        if self._single is not None:
            for name, labels, value in self._single.samples(self.name, {}):
                metric.add_sample(name, labels, value)
            return metric
        with self._lock:
            series = list(self._series.items())
        for values, one in series:
            for name, labels, value in one.samples(
                self.name, dict(zip(self.labelnames, values, strict=True))
            ):
                metric.add_sample(name, labels, value)
        return metric

    def collect(self) -> list[Metric]:
        """The family with its samples, as a prometheus_client metric collects itself."""
        return [self.metric()]


class Counter(_Family[_CounterSeries]):
    """A counter family; ``name`` may end in ``_total`` (the samples always do)."""

    kind = "counter"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name.removesuffix("_total"), documentation, labelnames)

    def _new(self) -> _CounterSeries:
        return _CounterSeries()

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` to a counter without labels."""
        self._only().inc(amount)


class Gauge(_Family[_GaugeSeries]):
    """A gauge family."""

    kind = "gauge"

    def _new(self) -> _GaugeSeries:
        return _GaugeSeries()

    def set(self, value: float) -> None:
        """Set a gauge without labels."""
        self._only().set(value)

    def inc(self, amount: float = 1) -> None:
        """Add to a gauge without labels."""
        self._only().inc(amount)

    def dec(self, amount: float = 1) -> None:
        """Subtract from a gauge without labels."""
        self._only().dec(amount)

    def set_function(self, function: Callable[[], float]) -> None:
        """Read a gauge without labels from ``function`` when collected."""
        self._only().set_function(function)


class Histogram(_Family[_HistogramSeries]):
    """A histogram family with fixed ``buckets`` (``+Inf`` is added, as prometheus_client does)."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds) or not bounds:
            raise ValueError("Buckets not in sorted order")
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        super().__init__(name, documentation, labelnames)

    def _new(self) -> _HistogramSeries:
        return _HistogramSeries(self._bounds)

    def observe(self, amount: float) -> None:
        """Observe ``amount`` in a histogram without labels."""
        self._only().observe(amount)


class FamilyCollector:
    """A prometheus_client collector over families, in the order given."""

    def __init__(self, families: Sequence[_Family[Any]]) -> None:
        self._families = tuple(families)

    def collect(self) -> Iterator[Metric]:
        """Every family with its samples (called by the registry at each scrape)."""
        for family in self._families:
            yield family.metric()

    def describe(self) -> Iterator[Metric]:
        """Every family without samples: the names a registry checks for duplicates."""
        for family in self._families:
            yield family.metric(with_samples=False)
