"""setpoint's own metric families against prometheus_client's: the same exposition, byte for byte.

The same random calls go to prometheus_client's ``Counter``, ``Gauge`` and ``Histogram`` on
one registry and to setpoint's families (``setpoint.observability._families``) on another;
both registries are rendered as setpoint serves them (classic text and OpenMetrics, without
``*_created``), and must be equal.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import prometheus_client
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from setpoint.observability import _families as fam
from setpoint.observability.metrics import render

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "100"))
BUCKETS = (0.005, 0.1, 1.0, 2.5, 10.0)
LABELS = st.sampled_from(["a", "b", "c-1", 'q"uote', "ü"])
AMOUNTS = st.floats(min_value=0, max_value=1e6, allow_nan=False)
VALUES = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)

operations = st.lists(
    st.one_of(
        st.tuples(st.just("counter"), LABELS, AMOUNTS),
        st.tuples(st.just("counter_plain"), st.just(""), AMOUNTS),
        st.tuples(st.just("gauge_set"), LABELS, VALUES),
        st.tuples(st.just("gauge_inc"), LABELS, VALUES),
        st.tuples(st.just("gauge_dec"), LABELS, VALUES),
        st.tuples(st.just("gauge_function"), LABELS, VALUES),
        st.tuples(st.just("gauge_remove"), LABELS, st.just(0.0)),
        st.tuples(st.just("histogram"), LABELS, VALUES),
        st.tuples(st.just("histogram_plain"), st.just(""), st.sampled_from([*BUCKETS, 0.0, 99.0])),
    ),
    max_size=30,
)


def _both() -> tuple[CollectorRegistry, dict[str, Any], CollectorRegistry, dict[str, Any]]:
    theirs_registry = CollectorRegistry()
    theirs = {
        "counter": prometheus_client.Counter(
            "x_requests_total", "Requests.", ("code",), registry=theirs_registry
        ),
        "counter_plain": prometheus_client.Counter(
            "x_panics_total", "Panics.", registry=theirs_registry
        ),
        "gauge": prometheus_client.Gauge("x_depth", "Depth.", ("queue",), registry=theirs_registry),
        "histogram": prometheus_client.Histogram(
            "x_seconds", "Seconds.", ("ctl",), buckets=BUCKETS, registry=theirs_registry
        ),
        "histogram_plain": prometheus_client.Histogram(
            "x_lag_seconds", "Lag.", buckets=BUCKETS, registry=theirs_registry
        ),
    }
    ours = {
        "counter": fam.Counter("x_requests_total", "Requests.", ("code",)),
        "counter_plain": fam.Counter("x_panics_total", "Panics."),
        "gauge": fam.Gauge("x_depth", "Depth.", ("queue",)),
        "histogram": fam.Histogram("x_seconds", "Seconds.", ("ctl",), buckets=BUCKETS),
        "histogram_plain": fam.Histogram("x_lag_seconds", "Lag.", buckets=BUCKETS),
    }
    ours_registry = CollectorRegistry()
    ours_registry.register(fam.FamilyCollector(list(ours.values())))  # type: ignore[arg-type]
    return theirs_registry, theirs, ours_registry, ours


def _apply(metrics: dict[str, Any], op: str, label: str, amount: float) -> None:
    if op == "counter":
        metrics["counter"].labels(label).inc(amount)
    elif op == "counter_plain":
        metrics["counter_plain"].inc(amount)
    elif op == "gauge_set":
        metrics["gauge"].labels(queue=label).set(amount)
    elif op == "gauge_inc":
        metrics["gauge"].labels(label).inc(amount)
    elif op == "gauge_dec":
        metrics["gauge"].labels(label).dec(amount)
    elif op == "gauge_function":
        metrics["gauge"].labels(label).set_function(lambda: amount)
    elif op == "gauge_remove":
        metrics["gauge"].labels(label)
        metrics["gauge"].remove(label)
    elif op == "histogram":
        metrics["histogram"].labels(label).observe(amount)
    else:
        metrics["histogram_plain"].observe(amount)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(operations)
def test_the_exposition_is_prometheus_clients(ops: list[tuple[str, str, float]]) -> None:
    theirs_registry, theirs, ours_registry, ours = _both()
    for op, label, amount in ops:
        _apply(theirs, op, label, amount)
        _apply(ours, op, label, amount)
    for accept in ("text/plain", "application/openmetrics-text"):
        assert render(ours_registry, accept) == render(theirs_registry, accept)


def test_label_mistakes_are_refused_as_prometheus_client_refuses_them() -> None:
    counter = fam.Counter("y_total", "Y.", ("a", "b"))
    with pytest.raises(ValueError, match="Incorrect label count"):
        counter.labels("only-one")
    with pytest.raises(ValueError, match="Incorrect label names"):
        counter.labels(a="1", c="2")
    with pytest.raises(ValueError, match="both"):
        counter.labels("1", b="2")
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("1", "2").inc(-1)
    with pytest.raises(ValueError, match="has labels"):
        counter.inc()
    with pytest.raises(ValueError, match="No label names"):
        fam.Counter("z_total", "Z.").labels("x")
    assert counter.labels(1, 2) is counter.labels(a="1", b="2")  # values become strings


def test_concurrent_increments_are_not_lost() -> None:
    counter = fam.Counter("w_total", "W.", ("t",))
    series = counter.labels("x")

    def bump() -> None:
        for _ in range(20_000):
            series.inc()

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert series.get() == 80_000


def test_a_nan_observation_counts_nowhere_and_leaves_the_sum() -> None:
    """NaN is in no bucket (bisect put it in the first), the count and the sum stay as they were.

    prometheus_client also keeps NaN out of the buckets but adds it to the sum, which then
    reads NaN for the life of the process (every rate(sum)/rate(count) panel blank); setpoint
    ignores the observation whole, as the issue asks ("refuse or ignore").
    """
    ours = fam.Histogram("n_seconds", "N.", buckets=BUCKETS)
    ours.observe(0.05)
    ours.observe(float("nan"))
    samples = {
        (name, labels.get("le", "")): value
        for name, labels, value in ours._only().samples("n_seconds", {})
    }
    assert samples[("n_seconds_bucket", "0.005")] == 0
    assert samples[("n_seconds_bucket", "0.1")] == 1
    assert samples[("n_seconds_bucket", "+Inf")] == 1
    assert samples[("n_seconds_count", "")] == 1
    assert samples[("n_seconds_sum", "")] == 0.05


def test_a_nan_observation_is_kept_out_of_the_buckets_as_prometheus_client_keeps_it() -> None:
    """The buckets and the count agree with prometheus_client's for NaN among other values."""
    theirs_registry, theirs, ours_registry, ours = _both()
    for amount in (float("nan"), 0.001, float("nan"), 3.0):
        theirs["histogram_plain"].observe(amount)
        ours["histogram_plain"].observe(amount)

    def without_sum(rendered: tuple[bytes, str]) -> list[bytes]:
        return [line for line in rendered[0].splitlines() if b"_sum" not in line]

    for accept in ("text/plain", "application/openmetrics-text"):
        assert without_sum(render(ours_registry, accept)) == without_sum(
            render(theirs_registry, accept)
        )
