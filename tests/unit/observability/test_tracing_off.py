"""Tracing costs nothing when it is off: nothing imported, no ids on log lines, clear config."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from setpoint.observability import tracing

WITHOUT_OTEL = textwrap.dedent(
    """
    import asyncio, io, json, logging, os, sys
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            del os.environ[name]

    from setpoint.api import kinds
    from setpoint.observability import tracing
    from setpoint.observability.logging import configure_logging
    from setpoint.testing import FakeClient, run_operator

    seen = []

    async def reconcile(ctx, request):
        ctx.log.info("inside")
        seen.append(request.name)

    def setup(manager):
        manager.controller("plain").for_(kinds.ConfigMap).build(reconcile)

    async def main():
        stream = io.StringIO()
        configure_logging(format="json", stream=stream)
        fake = FakeClient()
        async with run_operator(setup, client=fake) as op:
            await fake.create({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "a", "namespace": "default"}})
            await op.wait_idle()
        line = [json.loads(l) for l in stream.getvalue().splitlines() if '"inside"' in l][0]
        assert "trace_id" not in line and line["caller"] == "<string>:15", line
        assert seen == ["a"], seen
        assert tracing.active_tracing() is None
        assert not tracing.otel_imported(), sorted(m for m in sys.modules if "opentelemetry" in m)
        print("ok")

    asyncio.run(main())
    """
)


def test_an_operator_without_otel_variables_never_imports_opentelemetry() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_SERVICE_NAME": "x"},  # naming the service alone does not ask for traces
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
    ],
)
def test_tracing_stays_off_unless_the_variables_ask_for_it(environ: dict[str, str]) -> None:
    assert tracing.configure_from_environment(environ) is None
    assert tracing.active_tracing() is None


def test_an_unknown_exporter_is_named_with_the_ones_that_work() -> None:
    with pytest.raises(ValueError, match=r"OTEL_TRACES_EXPORTER='zipkin': setpoint builds the"):
        tracing.configure_from_environment({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert tracing.active_tracing() is None


def test_the_console_exporter_turns_tracing_on_and_shutdown_turns_it_off() -> None:
    configured = tracing.configure_from_environment(
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "unit"}
    )
    try:
        assert configured is not None and tracing.active_tracing() is configured
        assert tracing.configure_from_environment({"OTEL_TRACES_EXPORTER": "console"}) is configured
        assert configured.ids() is None  # no span here
    finally:
        tracing.shutdown()
    assert tracing.active_tracing() is None


def test_tracing_without_opentelemetry_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Tracing()`` without OpenTelemetry: the error every missing extra raises, naming it."""
    from setpoint._extras import ExtraNotInstalled

    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry fails
    with pytest.raises(ExtraNotInstalled) as info:
        tracing.Tracing()
    assert info.value.extra == "otel"
    assert "pip install 'setpoint[otel]'" in str(info.value)
    assert isinstance(info.value, ImportError)
