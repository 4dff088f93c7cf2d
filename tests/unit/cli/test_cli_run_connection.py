"""``setpoint run`` and the manager when the connection is wrong: timeouts and messages.

The real-server cases (closed port, wrong CA, bogus token, no permissions) are in
tests/integration/manager/test_preflight.py; these cover the settings and the wording.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

import setpoint as sp
from setpoint.api import kinds
from setpoint.cache.errors import CacheSyncTimeout
from setpoint.cli import run
from setpoint.cli.main import build_parser, main
from setpoint.client.config import ConfigError
from setpoint.client.errors import Forbidden
from setpoint.client.kubeconfig import load_kubeconfig
from setpoint.controller import ControllerOptions
from setpoint.manager import Manager, ManagerOptions
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient


def settings(*argv: str, env: dict[str, str] | None = None) -> run.RunSettings:
    return run.resolve_settings(build_parser().parse_args(["run", *argv]), env or {})


def test_cache_sync_timeout_flag_variable_and_default() -> None:
    """--cache-sync-timeout and SETPOINT_CACHE_SYNC_TIMEOUT set the manager's sync timeout."""
    assert settings("op").cache_sync_timeout == ManagerOptions().cache_sync_timeout == 120.0
    from_env = settings("op", env={"SETPOINT_CACHE_SYNC_TIMEOUT": "15"})
    assert from_env.cache_sync_timeout == 15.0
    from_flag = settings(
        "op", "--cache-sync-timeout", "7.5", env={"SETPOINT_CACHE_SYNC_TIMEOUT": "15"}
    )
    assert from_flag.cache_sync_timeout == 7.5
    assert run.build_manager_options(from_flag, "op").cache_sync_timeout == 7.5


def test_cache_sync_timeout_variable_must_be_seconds() -> None:
    """A bad SETPOINT_CACHE_SYNC_TIMEOUT names the variable, the flag and the rule."""
    with pytest.raises(ValueError, match="SETPOINT_CACHE_SYNC_TIMEOUT='soon'") as info:
        settings("op", env={"SETPOINT_CACHE_SYNC_TIMEOUT": "soon"})
    assert "--cache-sync-timeout" in str(info.value)


def test_help_lists_the_cache_sync_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    """`setpoint run --help` lists the flag with its variable and default."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert "--cache-sync-timeout SECONDS" in flat
    assert "[env SETPOINT_CACHE_SYNC_TIMEOUT] (default: 120)" in flat


async def _noop(ctx: sp.Context, request: sp.Request) -> None:
    return None


def test_controllers_take_the_managers_sync_timeout_unless_they_set_one() -> None:
    """A controller built by the manager waits as long as the manager's sync timeout."""
    manager = Manager(FakeClient(), ManagerOptions(cache_sync_timeout=9.0))
    default = manager.controller("a").for_(kinds.ConfigMap).build(_noop)
    own = (
        manager.controller("b")
        .for_(kinds.ConfigMap)
        .with_options(ControllerOptions(cache_sync_timeout=3.0))
        .build(_noop)
    )
    assert default.options.cache_sync_timeout == 9.0
    assert own.options.cache_sync_timeout == 3.0


async def test_sync_timeout_message_carries_the_informers_last_error() -> None:
    """A cache that does not sync fails startup with the informer's last error in the message."""
    fake = FakeClient()
    fake.faults.fail_next(("list", "watch"), kind=kinds.ConfigMap, error=Forbidden, times=None)
    options = ManagerOptions(
        metrics=Metrics.isolated(),
        metrics_bind_address="0",
        health_probe_bind_address="0",
        handle_signals=False,
        cache_sync_timeout=0.5,
    )
    manager = Manager(fake, options)
    manager.cache.informer(kinds.ConfigMap)
    with pytest.raises(CacheSyncTimeout) as info:
        await asyncio.wait_for(manager.run(), 10)
    message = str(info.value)
    assert "did not sync within 0.5s" in message
    assert "last error: Forbidden" in message


EMPTY = "apiVersion: v1\nkind: Config\n"
NO_CURRENT = textwrap.dedent(
    """\
    apiVersion: v1
    kind: Config
    clusters:
    - name: c
      cluster: {server: "https://127.0.0.1:6443"}
    users:
    - name: u
      user: {token: t}
    contexts:
    - name: dev
      context: {cluster: c, user: u}
    """
)


def test_library_message_names_the_context_argument(tmp_path: Path) -> None:
    """From Python, a kubeconfig without current-context says to pass context=...."""
    path = tmp_path / "config"
    path.write_text(NO_CURRENT)
    with pytest.raises(ConfigError) as info:
        load_kubeconfig(path)
    assert "pass context=... naming one of dev" in str(info.value)


def test_empty_kubeconfig_says_it_defines_no_contexts(tmp_path: Path) -> None:
    """An empty kubeconfig says there is no context at all, not to pick one."""
    path = tmp_path / "config"
    path.write_text(EMPTY)
    with pytest.raises(ConfigError) as info:
        load_kubeconfig(path)
    assert "defines no contexts" in str(info.value)


@pytest.mark.parametrize(("text", "expected"), [(NO_CURRENT, "--context NAME"), (EMPTY, "")])
def test_setpoint_run_names_its_own_flag(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    expected: str,
) -> None:
    """From `setpoint run`, the context hint is the --context flag, never context=...."""
    monkeypatch.chdir(tmp_path)
    module = f"op_context_hint_{len(expected)}"  # one module name per case: imports are cached
    (tmp_path / f"{module}.py").write_text("def setup(manager):\n    pass\n")
    config = tmp_path / "config"
    config.write_text(text)
    code = main(["run", f"{module}.py", "--kubeconfig", str(config)])
    err = capsys.readouterr().err
    assert code == 1
    assert "context=..." not in err
    assert expected in err
    assert "Traceback" not in err
    assert "error: " in err and str(config) in err


def test_a_missing_kubeconfig_file_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`setpoint run --kubeconfig MISSING` names the --kubeconfig flag, not a Python argument."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "op_missing_config.py").write_text("def setup(manager):\n    pass\n")
    missing = tmp_path / "nope.kubeconfig"
    code = main(["run", "op_missing_config.py", "--kubeconfig", str(missing)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"kubeconfig file {missing} does not exist (given as --kubeconfig)" in err
    assert "make --kubeconfig name an existing kubeconfig file" in err
    assert "load_kubeconfig" not in err and "path argument" not in err
    assert "Traceback" not in err


@pytest.mark.parametrize("check", [[], ["finalizers"], ["leader-election"], ["crds"], ["shards"]])
def test_doctor_names_the_kubeconfig_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], check: list[str]
) -> None:
    """`setpoint doctor [check] --kubeconfig MISSING` names the flag, as `setpoint run` does."""
    missing = tmp_path / "nope.kubeconfig"
    code = main(["doctor", *check, "--kubeconfig", str(missing)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"kubeconfig file {missing} does not exist (given as --kubeconfig)" in err
    assert "load_kubeconfig" not in err and "Traceback" not in err
