"""``setpoint demo``'s offline parts: the table, its live redraw, the directory reader."""

from __future__ import annotations

import io
import sqlite3
import sys
from pathlib import Path

import pytest

from setpoint.cli import demo


def complete_row(name: str, namespaces: list[str], *, isolated: bool) -> demo.TenantRow:
    row = demo.TenantRow(name, namespaces, isolated, exists=True, ready="True")
    row.ready_reason = "Provisioned"
    row.degraded = "False"
    row.namespaces = len(namespaces)
    row.registered = True
    for title, _, per_isolation in demo.CHILD_KINDS:
        row.children[title] = row.expected(per_isolation)
    return row


def test_progress_counts_namespaces_children_registration_and_ready() -> None:
    row = demo.TenantRow("acme", ["a", "b"], True)
    assert row.progress == 0.0
    assert not row.converged
    done = complete_row("acme", ["a", "b"], isolated=True)
    assert done.progress == 1.0
    assert done.converged
    done.ready = "False"
    assert not done.converged
    # Extra children (a stale one not yet deleted) do not make up for a missing namespace.
    partial = complete_row("acme", ["a", "b"], isolated=True)
    partial.namespaces = 1
    partial.children["QUOTA"] = 5
    assert not partial.converged


def test_network_policies_are_expected_only_when_isolated() -> None:
    open_row = demo.TenantRow("globex", ["g"], False)
    closed_row = demo.TenantRow("acme", ["a", "b"], True)
    assert open_row.expected(per_isolation=True) == 0
    assert closed_row.expected(per_isolation=True) == 2
    assert open_row.expected(per_isolation=False) == 1


def test_table_fits_100_columns_and_shows_state() -> None:
    rows = {
        "acme": complete_row("acme", ["acme-dev", "acme-prod"], isolated=True),
        "globex": complete_row("globex", ["globex"], isolated=False),
        "initech": demo.TenantRow("initech", ["initech-web", "initech-api"], True),
    }
    rows["initech"].exists = True
    rows["initech"].deleting = True
    lines = demo.render_table(rows)
    assert len(lines) == 4
    assert all(len(line) <= 100 for line in lines), [len(line) for line in lines]
    assert lines[0].split()[:3] == ["TENANT", "READY", "DEGRADED"]
    assert lines[1].startswith("acme     True Provisioned")
    assert lines[1].endswith("[##########] 100%")
    assert " 2/2 " in lines[1]
    netpol = lines[0].split().index("NETPOL")
    assert lines[2].split()[netpol + 1] == "-"  # globex is not isolated: no NetworkPolicy
    assert "deleting" in lines[3]
    assert lines[3].endswith("[..........]   0%")


def test_screen_appends_changed_snapshots_without_escapes_when_not_a_terminal() -> None:
    out = io.StringIO()
    now = [100.0]
    screen = demo.Screen(out, tty=False, started=100.0, clock=lambda: now[0])
    screen.table(["T", "a 0%"])
    now[0] = 100.999
    screen.table(["T", "a 50%"])  # within a second of the last: skipped
    now[0] = 101.0
    screen.table(["T", "a 60%"])  # a second after the last: shown
    now[0] = 101.5
    screen.table(["T", "a 100%"], final=True)  # the final state is always shown
    screen.table(["T", "a 100%"], final=True)  # unchanged: not repeated
    text = out.getvalue()
    assert "\x1b[" not in text
    assert text.count("-- ") == 3
    assert "--   0.0s\nT\na 0%\n" in text
    assert "a 50%" not in text
    assert "--   1.0s\nT\na 60%\n" in text
    assert text.count("a 100%") == 1


def test_screen_redraws_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    screen = demo.Screen(out, tty=True, started=0.0, clock=lambda: 2.5)
    screen.table(["T", "a 0%", "b 0%"])
    screen.table(["T", "a 50%", "b 0%"])
    text = out.getvalue()
    assert text.count("\x1b[3F\x1b[J") == 1  # up over the 3 lines drawn, clear, redraw
    assert text.count("T  [  2.5s]\n") == 2  # the elapsed time, on the clock given
    screen.end_table()
    screen.line("after")
    screen.table(["T", "c"])
    assert out.getvalue().count("\x1b[J") == 1  # a new table after other output: no erase


def test_read_directory(tmp_path: Path) -> None:
    path = tmp_path / "directory.db"
    assert demo.read_directory(path) is None
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE other (x)")
    assert demo.read_directory(path) is None  # no tenants table yet
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE tenants (name TEXT PRIMARY KEY, uid TEXT)")
        db.executemany("INSERT INTO tenants VALUES (?, ?)", [("globex", "2"), ("acme", "1")])
    assert demo.read_directory(path) == ["acme", "globex"]


def test_operator_command_is_what_a_user_types(tmp_path: Path) -> None:
    command = demo.operator_command(tmp_path / "kubeconfig", 1234, 1235, 1236, tmp_path / "c")
    shown = " ".join(demo._short(arg) for arg in command)
    assert shown.startswith("python -m setpoint run examples/tenants/tenants --kubeconfig ")
    assert "--leader-elect" in command
    assert "127.0.0.1:1234" in command
    assert "127.0.0.1:1235" in command
    assert f"--webhook-bind-address 127.0.0.1:1236 --webhook-cert-dir {tmp_path / 'c'}" in shown
    assert command[0] == sys.executable


def test_demo_outside_a_checkout_says_to_clone_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As in an installed wheel: no examples/ next to the package, none in the working directory.
    monkeypatch.setattr(demo, "_repo_root", lambda: tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path)
    from setpoint.cli.main import main

    assert main(["demo"]) == 1
    err = capsys.readouterr().err
    assert "not installed with setpoint" in err
    assert "clone the setpoint repository" in err
    assert "Traceback" not in err


def test_demo_finds_the_example_in_a_clone_it_runs_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = tmp_path / "examples" / "tenants" / "tenants"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.setattr(demo, "_repo_root", lambda: tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path)
    assert demo.operator_path() == package.resolve()


def test_the_traced_log_line_is_one_whose_span_was_exported() -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    other = "0" * 31 + "1"
    log = "\n".join(
        [
            '{"ts":"t","level":"info","msg":"Controller started"}',
            '{"ts":"t","level":"info","msg":"early","trace_id":"' + other + '","span_id":"1"}',
            '{"ts":"t","level":"info","msg":"Created a namespace","trace_id":"'
            + trace
            + '","span_id":"00f067aa0ba902b7"}',
            "{",
            '    "name": "reconcile tenant",',
            '    "context": {',
            f'        "trace_id": "0x{trace}",',
            "    }",
            "}",
        ]
    )
    found = demo.traced_log_line(log)
    assert found is not None and found[0] == trace  # "early"'s span was never exported
    assert '"msg":"Created a namespace"' in found[1]
    assert demo.traced_log_line(log.replace(f"0x{trace}", "0xffff")) is None
