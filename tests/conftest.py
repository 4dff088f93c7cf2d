"""Session-wide rules of setpoint's own test suite: a run leaves nothing in the checkout.

Loaded first for anything under tests/ (``make test``, ``make unit``, one file):

- **kubectl** caches discovery under ``$HOME/.kube/cache``, or ``./.kube/cache`` of its
  working directory when ``HOME`` is unset; run from the checkout, that put 58 cache files
  under ``.kube/`` that were then committed (issue 28). Every tool a test starts inherits
  ``KUBECACHEDIR``, pointed at a temporary directory removed at the end of the session.
- **hypothesis** keeps its example database and caches in ``./.hypothesis``;
  ``HYPOTHESIS_STORAGE_DIRECTORY`` moves them to ``<setpoint cache>/hypothesis``
  (``~/.cache/setpoint``), where failing examples are still replayed by the next run.
- **The check**: ``git status`` is taken when the session starts and when it ends; any file
  that appeared, changed or vanished in between fails the run, listed with what to do
  (:mod:`tests._support.checkout`). Ignored build output (``.venv``, ``__pycache__``) is
  not looked at, and outside a git checkout there is nothing to check. Files edited by
  hand during the run count too; ``SETPOINT_SKIP_CHECKOUT_CHECK=1`` skips the check.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from setpoint.testing.controlplane import cache_dir
from tests._support.checkout import SKIP_VARIABLE, left_behind, report, snapshot

CHECKOUT = Path(__file__).resolve().parents[1]
"""The repository the suite belongs to (the directory above tests/)."""

# Before any test asks hypothesis for its storage (it reads the variable once, lazily).
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(cache_dir() / "hypothesis"))

_BEFORE = pytest.StashKey[dict[str, str] | None]()
_LEFT = pytest.StashKey[list[str]]()
_KUBECTL_CACHE = pytest.StashKey[tuple[str, str | None]]()


def pytest_configure(config: pytest.Config) -> None:
    """Point kubectl's cache (for every subprocess) at a directory of this session's own."""
    cache = tempfile.mkdtemp(prefix="setpoint-tests-kubectl-cache-")
    config.stash[_KUBECTL_CACHE] = (cache, os.environ.get("KUBECACHEDIR"))
    os.environ["KUBECACHEDIR"] = cache


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this session's kubectl cache and give back the caller's ``KUBECACHEDIR``."""
    saved = config.stash.get(_KUBECTL_CACHE, None)
    if saved is None:
        return
    cache, previous = saved
    shutil.rmtree(cache, ignore_errors=True)
    if previous is None:
        os.environ.pop("KUBECACHEDIR", None)
    else:
        os.environ["KUBECACHEDIR"] = previous


def _is_worker(config: pytest.Config) -> bool:
    """A pytest-xdist worker: the controller process does the checking."""
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Record what is untracked or changed in the checkout before any test runs."""
    if not _is_worker(session.config) and os.environ.get(SKIP_VARIABLE) != "1":
        session.config.stash[_BEFORE] = snapshot(CHECKOUT)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when files appeared or changed in the checkout since it started."""
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    after = snapshot(CHECKOUT)
    if after is None:
        return
    left = left_behind(before, after)
    if not left:
        return
    session.config.stash[_LEFT] = left
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if session.config.pluginmanager.get_plugin("terminalreporter") is None:
        sys.stderr.write(f"setpoint: {report(CHECKOUT, left)}\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Show the files a run left in the checkout, above pytest's summary line."""
    left = terminalreporter.config.stash.get(_LEFT, None)
    if left:
        terminalreporter.write_sep("=", "files left in the checkout", red=True, bold=True)
        terminalreporter.write_line(report(CHECKOUT, left), red=True)
