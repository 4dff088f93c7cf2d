"""Structured logging: bound fields, JSON and console formats, stdlib interplay."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from setpoint.observability.logging import (
    FIELDS_ATTR,
    configure_logging,
    get_logger,
)


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line]


def test_json_line_has_ts_level_logger_msg_and_bound_keys(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(level="debug", format="json", stream=stream)
    log = get_logger("setpoint.test.json", controller="tenant").bind(namespace="prod", name="a")
    log.info("Reconcile finished", reconcile_id="r-1", duration=0.5)
    (line,) = lines(stream)
    record = json.loads(line)
    assert record["level"] == "info"
    assert record["logger"] == "setpoint.test.json"
    assert record["msg"] == "Reconcile finished"
    assert record["controller"] == "tenant"
    assert record["namespace"] == "prod"
    assert record["name"] == "a"
    assert record["reconcile_id"] == "r-1"
    assert record["duration"] == 0.5
    assert record["ts"].endswith("Z") and "T" in record["ts"]


def test_json_exception_carries_error_and_stacktrace(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(format="json", stream=stream)
    log = get_logger("setpoint.test.exc")
    try:
        raise KeyError("missing")
    except KeyError:
        log.exception("Reconcile failed", controller="c")
    record = json.loads(lines(stream)[0])
    assert record["level"] == "error"
    assert record["error"] == "KeyError: 'missing'"
    assert "Traceback" in record["stacktrace"]
    assert record["controller"] == "c"


def test_reserved_keys_are_renamed_not_lost(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(format="json", stream=stream)
    get_logger("setpoint.test.reserved").info("real message", msg="field", level=3)
    record = json.loads(lines(stream)[0])
    assert record["msg"] == "real message"
    assert record["field.msg"] == "field"
    assert record["field.level"] == 3
    assert record["level"] == "info"


def test_unserializable_values_render_as_strings(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(format="json", stream=stream)

    class Thing:
        def __str__(self) -> str:
            return "thing!"

    get_logger("setpoint.test.values").info("m", thing=Thing(), tags={"a"})
    record = json.loads(lines(stream)[0])
    assert record["thing"] == "thing!"
    assert record["tags"] == ["a"]


def test_console_format_is_readable(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(format="console", stream=stream)
    get_logger("setpoint.test.console", controller="tenant").warning(
        "Slow reconcile", name="has space", seconds=3
    )
    (line,) = lines(stream)
    assert "WARNING" in line
    assert "setpoint.test.console" in line
    assert "Slow reconcile" in line
    assert "controller=tenant" in line
    assert 'name="has space"' in line
    assert "seconds=3" in line


def test_level_filters_records(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(level="warning", format="json", stream=stream)
    log = get_logger("setpoint.test.level")
    log.debug("no")
    log.info("no")
    log.warning("yes")
    log.error("yes too")
    assert [json.loads(line)["msg"] for line in lines(stream)] == ["yes", "yes too"]
    assert not log.is_enabled_for(logging.INFO)


def test_bind_is_immutable_and_call_keys_win() -> None:
    base = get_logger("setpoint.test.bind", a=1)
    child = base.bind(b=2, a=3)
    assert dict(base.bound) == {"a": 1}
    assert dict(child.bound) == {"a": 3, "b": 2}
    assert child.name == "setpoint.test.bind"


def test_user_handlers_receive_records_with_fields(restore_root: None) -> None:
    seen: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger = logging.getLogger("setpoint.test.user")
    handler = Capture()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        configure_logging(format="json", stream=io.StringIO())
        get_logger("setpoint.test.user", controller="x").info("hello", name="obj")
    finally:
        logger.removeHandler(handler)
    (record,) = seen
    assert record.getMessage() == "hello"
    assert getattr(record, FIELDS_ATTR) == {"controller": "x", "name": "obj"}
    # stacklevel points at this test, not at the logging module.
    assert record.funcName == "test_user_handlers_receive_records_with_fields"


def test_configure_twice_replaces_only_its_own_handler(restore_root: None) -> None:
    root = logging.getLogger()
    mine = logging.NullHandler()
    root.addHandler(mine)
    first, second = io.StringIO(), io.StringIO()
    configure_logging(format="json", stream=first)
    configure_logging(format="json", stream=second)
    get_logger("setpoint.test.twice").info("once")
    assert lines(first) == []
    assert len(lines(second)) == 1
    assert mine in root.handlers


def test_stdlib_records_without_fields_render(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(format="json", stream=stream)
    logging.getLogger("plain.stdlib").warning("value %d", 7)
    record = json.loads(lines(stream)[0])
    assert record["msg"] == "value 7"
    assert record["logger"] == "plain.stdlib"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"level": "loud"}, "level='loud'"), ({"format": "xml"}, "format='xml'")],
)
def test_bad_arguments_are_explained(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        configure_logging(**kwargs)


def test_import_is_cheap() -> None:
    code = (
        "import sys; import setpoint.observability.logging; "
        "heavy = [m for m in ('prometheus_client', 'aiohttp', 'pydantic') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_a_call_never_replaces_bound_context(restore_root: None) -> None:
    """ctx.log.info(..., namespace=x) must not make the line name another object."""
    stream = io.StringIO()
    configure_logging(level="info", format="json", stream=stream)
    log = get_logger("setpoint.test.clash").bind(namespace="tenant-a", name="t")
    log.info("created", namespace="child-ns", extra="1")
    line = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert line["namespace"] == "tenant-a"
    assert line["arg.namespace"] == "child-ns"
    assert line["extra"] == "1"
    log.info("same value is not duplicated", namespace="tenant-a")
    line = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert "arg.namespace" not in line


def test_process_fields_go_on_every_line_and_a_records_own_field_wins(
    restore_root: None,
) -> None:
    """``fields`` (a worker's index under ``--processes N``) on every line, JSON and console."""
    stream = io.StringIO()
    configure_logging(format="json", stream=stream, fields={"worker": 1, "msg": "kept"})
    get_logger("setpoint.test.fields").info("Started")
    get_logger("setpoint.test.fields").info("Moved", worker=0)
    logging.getLogger("plain.stdlib").warning("no fields of its own")
    first, second, plain = (json.loads(line) for line in lines(stream))
    assert first["worker"] == 1 and first["msg"] == "Started"
    assert first["field.msg"] == "kept"
    assert second["worker"] == 0
    assert plain["worker"] == 1
    console = io.StringIO()
    configure_logging(format="console", stream=console, fields={"worker": 1})
    get_logger("setpoint.test.fields").info("Started", name="a")
    (line,) = lines(console)
    assert line.endswith("worker=1 name=a")


def test_setpoint_run_names_the_worker_on_each_line(
    restore_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In worker 1 of a supervisor (``SETPOINT_WORKER_INDEX``), ``setpoint run``'s lines say so."""
    from setpoint.cli import run

    monkeypatch.setenv("SETPOINT_WORKER_INDEX", "1")
    monkeypatch.setenv("SETPOINT_WORKER_COUNT", "2")
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    settings = run.RunSettings(target="/nonexistent/operator.py", log_format="json")
    assert run.run_command(settings) == run.EXIT_ERROR
    get_logger("setpoint.test.worker").info("after")
    assert json.loads(lines(stream)[-1])["worker"] == 1
