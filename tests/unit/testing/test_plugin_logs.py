"""The pytest plugin shows setpoint's log fields in a failed test's report.

Building issue 10's SecretMirror, a test's captured log said only
``WARNING setpoint.cache:informer.py List/watch failed; retrying``: pytest's formatter
prints the message, and the reason was in the record's fields.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TEST = """
import logging

from setpoint.observability.logging import get_logger


def test_fails() -> None:
    get_logger("setpoint.cache").bind(kind="Secret").warning(
        "List/watch failed; retrying", error="Forbidden: secrets is forbidden"
    )
    logging.getLogger("plain").warning("no fields here")
    assert False
"""


def run(directory: Path, *args: str) -> str:
    (directory / "test_logs.py").write_text(TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout


def test_a_failed_tests_log_shows_the_fields(tmp_path: Path) -> None:
    """Captured and live log lines carry ``[kind=... error=...]`` after the message.

    A record without fields (another library's) is shown exactly as pytest shows it.
    """
    out = run(tmp_path, "-o", "log_cli=true", "--log-cli-level=WARNING")
    logged = [x for x in out.splitlines() if x.startswith("WARNING")]
    fields = "List/watch failed; retrying [kind=Secret error=Forbidden: secrets is forbidden]"
    # once live (log_cli), once in the failure's "Captured log call" section
    assert sum(line.endswith(fields) for line in logged) == 2, out
    assert [x for x in logged if "no fields here" in x], out
    assert all(x.endswith("no fields here") for x in logged if "no fields here" in x), out
