"""Request-time credentials: static tokens, rotating token files and exec plugins.

Exec plugins here are small Python scripts written into tmp_path, driven by a
JSON "behaviour" file, so each test says exactly what its plugin does.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.client import load_kubeconfig
from setpoint.client.config import (
    EXEC_API_V1,
    EXEC_API_V1BETA1,
    ClientConfig,
    ConfigError,
    ExecConfig,
)
from setpoint.client.credentials import (
    FAILURE_BACKOFF,
    REFRESH_BEFORE_EXPIRY,
    STDOUT_LIMIT,
    Credentials,
    ExecCredentials,
    credentials_for,
)
from setpoint.client.errors import RequestTimeout
from setpoint.client.transport import Transport, TransportOptions
from setpoint.testing.waits import eventually
from tests._support.virtual_time import RecordingClock

SERVER = "https://127.0.0.1:6443"

PLUGIN_SOURCE = """\
import json, os, sys, time
spec = json.load(open(sys.argv[1]))
with open(spec["count"], "a") as f:
    f.write("x")
if "record_pid" in spec:
    with open(spec["record_pid"], "w") as f:
        f.write(str(os.getpid()))
if "record_info" in spec:
    with open(spec["record_info"], "w") as f:
        f.write(os.environ.get("KUBERNETES_EXEC_INFO", ""))
if "spawn" in spec:
    # A helper that inherits stdout and stderr and outlives the plugin unless killed.
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(spec["spawn"], "w") as f:
        f.write(str(child.pid))
if spec.get("big_stdout"):
    sys.stdout.write("x" * spec["big_stdout"])
    sys.stdout.flush()
if spec.get("sleep"):
    time.sleep(spec["sleep"])
if spec.get("stderr"):
    sys.stderr.write(spec["stderr"])
if "stdout" in spec:
    sys.stdout.write(spec["stdout"])
else:
    status = dict(spec.get("status", {}))
    if "token_from_env" in spec:
        status["token"] = os.environ[spec["token_from_env"]]
    print(json.dumps({
        "apiVersion": spec.get("apiVersion", "client.authentication.k8s.io/v1"),
        "kind": spec.get("kind", "ExecCredential"),
        "status": status,
    }))
sys.exit(spec.get("exit", 0))
"""


class Plugin:
    """A scripted exec plugin; ``behave(...)`` sets what its next runs do."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.script = directory / "plugin.py"
        self.script.write_text(PLUGIN_SOURCE)
        self.spec_file = directory / "spec.json"
        self.count_file = directory / "count"
        self.count_file.write_text("")
        self.behave(status={"token": "tok-1"})

    def behave(self, **spec: Any) -> None:
        spec["count"] = str(self.count_file)
        self.spec_file.write_text(json.dumps(spec))

    @property
    def runs(self) -> int:
        return len(self.count_file.read_text())

    def exec_config(self, **kwargs: Any) -> ExecConfig:
        kwargs.setdefault("command", sys.executable)
        kwargs.setdefault("args", ("-S", str(self.script), str(self.spec_file)))
        return ExecConfig(**kwargs)

    def credentials(self, **kwargs: Any) -> Credentials:
        config_kwargs = kwargs.pop("config", {})
        cfg = ClientConfig(
            server=SERVER, exec=self.exec_config(**kwargs), source="test", **config_kwargs
        )
        return credentials_for(cfg)


@pytest.fixture
def plugin(tmp_path: Path) -> Plugin:
    return Plugin(tmp_path)


def in_hours(hours: float) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- static and file tokens ---------------------------------------------------------


async def test_no_credentials() -> None:
    creds = credentials_for(ClientConfig(server=SERVER))
    assert await creds.headers() == {}
    assert await creds.client_certificate() is None


async def test_static_token() -> None:
    creds = credentials_for(ClientConfig(server=SERVER, token="abc"))
    assert await creds.headers() == {"Authorization": "Bearer abc"}
    creds.invalidate()
    assert await creds.headers() == {"Authorization": "Bearer abc"}


async def test_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    creds = credentials_for(ClientConfig(server=SERVER, token_file=str(token)))
    assert await creds.headers() == {"Authorization": "Bearer first"}

    token.write_text("second-token")
    assert await creds.headers() == {"Authorization": "Bearer second-token"}


async def test_token_file_rotated_by_symlink_swap(tmp_path: Path) -> None:
    """The kubelet's projected volumes rotate by re-pointing a ``..data`` symlink."""
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "token").write_text("one")
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "token").write_text("two")
    (tmp_path / "..data").symlink_to("v1")
    (tmp_path / "token").symlink_to("..data/token")
    creds = credentials_for(ClientConfig(server=SERVER, token_file=str(tmp_path / "token")))
    assert await creds.headers() == {"Authorization": "Bearer one"}

    (tmp_path / "..data_tmp").symlink_to("v2")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert await creds.headers() == {"Authorization": "Bearer two"}


async def test_token_file_cached_until_changed_or_invalidated(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("aaaa")
    creds = credentials_for(ClientConfig(server=SERVER, token_file=str(token)))
    assert await creds.headers() == {"Authorization": "Bearer aaaa"}
    stat = token.stat()

    # Same size, same inode, same mtime: looks unchanged, so the cached value is used ...
    with token.open("r+") as f:
        f.write("bbbb")
    os.utime(token, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert await creds.headers() == {"Authorization": "Bearer aaaa"}
    # ... until a 401 makes the caller invalidate.
    creds.invalidate()
    assert await creds.headers() == {"Authorization": "Bearer bbbb"}


async def test_token_file_keeps_last_token_when_it_disappears(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("kept")
    creds = credentials_for(ClientConfig(server=SERVER, token_file=str(token)))
    assert await creds.headers() == {"Authorization": "Bearer kept"}
    token.unlink()
    assert await creds.headers() == {"Authorization": "Bearer kept"}


async def test_token_file_wins_over_token_and_token_is_the_fallback(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("from-file")
    creds = credentials_for(ClientConfig(server=SERVER, token="static", token_file=str(token)))
    assert await creds.headers() == {"Authorization": "Bearer from-file"}

    missing = ClientConfig(server=SERVER, token="static", token_file=str(tmp_path / "no"))
    assert await credentials_for(missing).headers() == {"Authorization": "Bearer static"}


async def test_unreadable_token_file_without_fallback(tmp_path: Path) -> None:
    creds = credentials_for(
        ClientConfig(
            server=SERVER, token_file=str(tmp_path / "no-token"), source="kubeconfig k (context x)"
        )
    )
    with pytest.raises(ConfigError) as info:
        await creds.headers()
    assert str(tmp_path / "no-token") in str(info.value)
    assert "kubeconfig k (context x)" in str(info.value)


# --- exec plugins: success and caching -----------------------------------------------------


async def test_exec_token_cached_until_expiry(plugin: Plugin) -> None:
    plugin.behave(status={"token": "tok-1", "expirationTimestamp": in_hours(1)})
    creds = plugin.credentials()
    assert await creds.headers() == {"Authorization": "Bearer tok-1"}
    assert await creds.headers() == {"Authorization": "Bearer tok-1"}
    assert await creds.client_certificate() is None
    assert plugin.runs == 1


async def test_exec_expired_token_runs_plugin_again(plugin: Plugin) -> None:
    plugin.behave(status={"token": "old", "expirationTimestamp": in_hours(-1)})
    creds = plugin.credentials()
    assert await creds.headers() == {"Authorization": "Bearer old"}
    plugin.behave(status={"token": "new", "expirationTimestamp": in_hours(1)})
    assert await creds.headers() == {"Authorization": "Bearer new"}
    assert plugin.runs == 2


async def test_exec_refreshes_shortly_before_expiry(plugin: Plugin) -> None:
    expiry = datetime(2030, 1, 1, tzinfo=UTC)
    plugin.behave(status={"token": "t", "expirationTimestamp": "2030-01-01T00:00:00Z"})
    now = [expiry - timedelta(hours=1)]
    cfg = ClientConfig(server=SERVER, exec=plugin.exec_config())
    creds = ExecCredentials(cfg, clock=lambda: now[0])

    await creds.headers()
    now[0] = expiry - REFRESH_BEFORE_EXPIRY - timedelta(seconds=1)
    await creds.headers()
    assert plugin.runs == 1
    now[0] = expiry - REFRESH_BEFORE_EXPIRY
    await creds.headers()
    assert plugin.runs == 2


async def test_exec_without_expiry_cached_until_invalidated(plugin: Plugin) -> None:
    creds = plugin.credentials()
    await creds.headers()
    await creds.headers()
    assert plugin.runs == 1
    plugin.behave(status={"token": "tok-2"})
    creds.invalidate()
    assert await creds.headers() == {"Authorization": "Bearer tok-2"}
    assert plugin.runs == 2


async def test_exec_concurrent_callers_share_one_run(plugin: Plugin) -> None:
    creds = plugin.credentials()
    results = await asyncio.gather(*(creds.headers() for _ in range(8)))
    assert all(r == {"Authorization": "Bearer tok-1"} for r in results)
    assert plugin.runs == 1


async def test_exec_v1beta1(plugin: Plugin) -> None:
    plugin.behave(apiVersion=EXEC_API_V1BETA1, status={"token": "beta"})
    creds = plugin.credentials(api_version=EXEC_API_V1BETA1)
    assert await creds.headers() == {"Authorization": "Bearer beta"}


async def test_exec_env_and_exec_info(plugin: Plugin, tmp_path: Path) -> None:
    info_file = tmp_path / "info.json"
    plugin.behave(token_from_env="MY_TOKEN", record_info=str(info_file))
    creds = plugin.credentials(
        env=(("MY_TOKEN", "from-env"),),
        provide_cluster_info=True,
        cluster_config={"audience": "kube"},
        config={"tls_server_name": "kube.local", "insecure_skip_tls_verify": True},
    )
    assert await creds.headers() == {"Authorization": "Bearer from-env"}
    info = json.loads(info_file.read_text())
    assert info == {
        "apiVersion": EXEC_API_V1,
        "kind": "ExecCredential",
        "spec": {
            "interactive": False,
            "cluster": {
                "server": SERVER,
                "tls-server-name": "kube.local",
                "insecure-skip-tls-verify": True,
                "config": {"audience": "kube"},
            },
        },
    }


async def test_exec_info_without_cluster_and_with_ca(plugin: Plugin, tmp_path: Path) -> None:
    info_file = tmp_path / "info.json"
    plugin.behave(status={"token": "x"}, record_info=str(info_file))
    await plugin.credentials().headers()
    assert json.loads(info_file.read_text())["spec"] == {"interactive": False}

    ca = b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"
    creds = plugin.credentials(provide_cluster_info=True, config={"ca_data": ca})
    await creds.headers()
    cluster = json.loads(info_file.read_text())["spec"]["cluster"]
    assert base64.b64decode(cluster["certificate-authority-data"]) == ca


async def test_exec_from_kubeconfig_with_relative_command(tmp_path: Path) -> None:
    bin_dir = tmp_path / "kube" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "get-token"
    script.write_text(
        f"#!{sys.executable} -S\n"
        "import json\n"
        'print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", '
        '"kind": "ExecCredential", "status": {"token": "kc-token"}}))\n'
    )
    script.chmod(0o755)
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": SERVER}}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "exec": {
                        "apiVersion": EXEC_API_V1,
                        "command": "bin/get-token",
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "current-context": "dev",
    }
    path = tmp_path / "kube" / "config"
    path.write_text(yaml.safe_dump(doc))
    creds = credentials_for(load_kubeconfig(path))
    assert await creds.headers() == {"Authorization": "Bearer kc-token"}


# --- exec plugins: failures ----------------------------------------------------------------


async def exec_error(creds: Credentials) -> str:
    with pytest.raises(ConfigError) as info:
        await creds.headers()
    err = info.value
    assert err.__cause__ is None
    return str(err)


async def test_exec_plugin_not_found(tmp_path: Path) -> None:
    cfg = ClientConfig(
        server=SERVER,
        exec=ExecConfig(command=str(tmp_path / "kubelogin"), install_hint="Install kubelogin."),
        source="kubeconfig k (context dev)",
    )
    msg = await exec_error(credentials_for(cfg))
    assert str(tmp_path / "kubelogin") in msg
    assert "was not found" in msg
    assert "Install kubelogin." in msg
    assert "kubeconfig k (context dev)" in msg


async def test_exec_plugin_bare_name_not_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent-bin")
    cfg = ClientConfig(server=SERVER, exec=ExecConfig(command="setpoint-no-such-plugin"))
    msg = await exec_error(credentials_for(cfg))
    assert "'setpoint-no-such-plugin'" in msg
    assert "/nonexistent-bin" in msg


async def test_exec_plugin_not_executable(tmp_path: Path) -> None:
    script = tmp_path / "plugin"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    cfg = ClientConfig(server=SERVER, exec=ExecConfig(command=str(script)))
    msg = await exec_error(credentials_for(cfg))
    assert "could not be started" in msg


async def test_exec_plugin_nonzero_exit(plugin: Plugin) -> None:
    plugin.behave(exit=3, stderr="\n  error: login required; run `mylogin`  \n\n", stdout="")
    msg = await exec_error(plugin.credentials(install_hint="See https://example/login"))
    assert sys.executable in msg
    assert "exited with code 3" in msg
    assert ": error: login required; run `mylogin`\nSee https://example/login" in msg


async def test_exec_plugin_long_stderr_is_trimmed(plugin: Plugin) -> None:
    plugin.behave(exit=1, stderr="x" * 50_000 + "THE END", stdout="")
    msg = await exec_error(plugin.credentials())
    assert msg.endswith("THE END")
    assert len(msg) < 3000


async def test_exec_plugin_prints_garbage(plugin: Plugin) -> None:
    plugin.behave(stdout="<html>Sign in</html>", stderr="warning: cache stale")
    msg = await exec_error(plugin.credentials())
    assert "not one JSON object" in msg
    assert "printed 20 bytes" in msg
    assert "line 1, column 1" in msg
    assert "Sign in" not in msg  # stdout is never quoted: it may hold the token
    assert "warning: cache stale" in msg


async def test_exec_plugin_wrong_api_version(plugin: Plugin) -> None:
    plugin.behave(apiVersion=EXEC_API_V1BETA1, status={"token": "t"})
    msg = await exec_error(plugin.credentials(api_version=EXEC_API_V1))
    assert EXEC_API_V1BETA1 in msg
    assert EXEC_API_V1 in msg
    assert "exec.apiVersion" in msg


@pytest.mark.parametrize(
    ("behaviour", "words"),
    [
        ({"stdout": "[1, 2]"}, "not an ExecCredential object"),
        ({"kind": "Status"}, "kind 'Status'"),
        (
            {
                "stdout": '{"apiVersion": "client.authentication.k8s.io/v1", '
                '"kind": "ExecCredential"}'
            },
            "without a status",
        ),
        ({"status": {}}, "neither status.token nor"),
        ({"status": {"token": 5}}, "not a string"),
        ({"status": {"clientCertificateData": "x"}}, "only one of"),
        ({"status": {"token": "t", "expirationTimestamp": "tomorrow"}}, "RFC 3339"),
        ({"status": {"token": "t", "expirationTimestamp": "2030-01-01T00:00:00"}}, "with a zone"),
        (
            {"status": {"clientCertificateData": "not pem", "clientKeyData": "not pem"}},
            "cannot be used",
        ),
    ],
)
async def test_exec_plugin_bad_credential(
    plugin: Plugin, behaviour: dict[str, Any], words: str
) -> None:
    plugin.behave(**behaviour)
    msg = await exec_error(plugin.credentials())
    assert words in msg


async def until(condition: Callable[[], bool], description: str) -> None:
    """Wait (polling every 20 ms, for at most 10 s) until ``condition`` holds."""
    await eventually(condition, timeout=10, interval=0.02, description=description)


def gone(pid: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    return check


async def test_exec_plugin_timeout_kills_it(plugin: Plugin, tmp_path: Path) -> None:
    # The plugin is a real process and its timeout runs on the real clock; how long that took
    # is not asserted: the message proves the timeout ended the run (the plugin sleeps for a
    # minute and would then fail differently), and the plugin is gone.
    plugin.behave(sleep=60, record_pid=str(tmp_path / "pid"))
    msg = await exec_error(plugin.credentials(timeout=0.5))
    assert "did not finish within 0.5 s" in msg
    await until(gone(int((tmp_path / "pid").read_text())), "the timed-out plugin is killed")


async def test_exec_plugin_killed_when_caller_is_cancelled(plugin: Plugin, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    plugin.behave(sleep=60, record_pid=str(pid_file))
    task = asyncio.create_task(plugin.credentials().headers())
    await until(lambda: pid_file.exists() and bool(pid_file.read_text()), "the plugin runs")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(gone(int(pid_file.read_text())), "the plugin is killed")


async def test_exec_failure_is_not_cached(plugin: Plugin) -> None:
    """A failed run is retried once its backoff has passed, and a success is used at once."""
    now = [datetime(2030, 1, 1, tzinfo=UTC)]
    plugin.behave(exit=1, stderr="down", stdout="")
    creds = ExecCredentials(
        ClientConfig(server=SERVER, exec=plugin.exec_config()), clock=lambda: now[0]
    )
    await exec_error(creds)
    plugin.behave(status={"token": "back"})
    now[0] += timedelta(seconds=FAILURE_BACKOFF[0])
    assert await creds.headers() == {"Authorization": "Bearer back"}


# --- exec plugins: hostile and broken plugins (issue 18, items 1, 3, 4, 12) -------------------


async def test_exec_plugin_output_after_the_json_is_never_echoed(plugin: Plugin) -> None:
    """A plugin that logs after its JSON: the error names the size and the place, not the token."""
    credential = {
        "apiVersion": EXEC_API_V1,
        "kind": "ExecCredential",
        "status": {"token": "SECRET-TOKEN-0123456789"},
    }
    plugin.behave(stdout=json.dumps(credential) + "\nINFO refreshed the session\n")
    msg = await exec_error(plugin.credentials())
    assert "SECRET-TOKEN" not in msg
    assert "refreshed" not in msg
    assert "bytes on stdout that are not one JSON object" in msg
    assert "line 2, column 1: Extra data" in msg


async def test_exec_plugin_huge_stdout_is_refused_not_buffered(plugin: Plugin) -> None:
    """More than STDOUT_LIMIT bytes on stdout fails the run instead of filling memory."""
    plugin.behave(big_stdout=STDOUT_LIMIT + 10, stdout="")
    msg = await exec_error(plugin.credentials())
    assert f"printed more than {STDOUT_LIMIT} bytes on stdout" in msg


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_exec_plugin_timeout_kills_its_helpers_and_leaks_no_descriptors(
    plugin: Plugin, tmp_path: Path
) -> None:
    """A plugin whose helper holds the pipes: each timeout kills the whole group, fds return."""
    now = [datetime(2030, 1, 1, tzinfo=UTC)]
    # 4 s: long enough for the plugin to start its helper on a loaded machine.
    creds = ExecCredentials(
        ClientConfig(server=SERVER, exec=plugin.exec_config(timeout=4)), clock=lambda: now[0]
    )
    baseline = open_fds()
    helpers: list[int] = []
    for i in range(2):
        spawn = tmp_path / f"helper-{i}"
        plugin.behave(sleep=60, spawn=str(spawn))
        msg = await exec_error(creds)
        assert "did not finish within 4 s" in msg
        helpers.append(int(spawn.read_text()))
        now[0] += timedelta(seconds=FAILURE_BACKOFF[1])  # past the backoff
    for pid in helpers:
        await until(gone(pid), f"helper {pid} of a timed-out plugin is killed")
    await until(lambda: open_fds() <= baseline, f"back to {baseline} open descriptors")


async def test_exec_plugin_helper_left_running_does_not_block_a_good_answer(
    plugin: Plugin, tmp_path: Path
) -> None:
    """The plugin answers and exits, but a helper keeps stdout open: the answer is used.

    A real process on the real clock, and how long it took is not asserted: waiting for the
    pipes until the 30 s timeout would end in "did not finish within 30 s", not in the token.
    """
    spawn = tmp_path / "helper"
    plugin.behave(status={"token": "ok"}, spawn=str(spawn))
    assert await plugin.credentials(timeout=30).headers() == {"Authorization": "Bearer ok"}
    await until(gone(int(spawn.read_text())), "the helper holding the pipes is killed")


async def test_exec_plugin_failure_backs_off(plugin: Plugin) -> None:
    """A failing plugin is not rerun for every request; the backoff doubles, then it reruns."""
    now = [datetime(2030, 1, 1, tzinfo=UTC)]
    plugin.behave(exit=2, stderr="login required", stdout="")
    creds = ExecCredentials(
        ClientConfig(server=SERVER, exec=plugin.exec_config()), clock=lambda: now[0]
    )
    first = await exec_error(creds)
    assert "login required" in first
    for _ in range(5):
        msg = await exec_error(creds)
        assert "login required" in msg
        assert "is not run again for another" in msg
    assert plugin.runs == 1
    now[0] += timedelta(seconds=FAILURE_BACKOFF[0])
    await exec_error(creds)
    assert plugin.runs == 2
    now[0] += timedelta(seconds=FAILURE_BACKOFF[0])  # the second backoff is twice as long
    await exec_error(creds)
    assert plugin.runs == 2
    now[0] += timedelta(seconds=FAILURE_BACKOFF[0])
    plugin.behave(status={"token": "fixed"})
    assert await creds.headers() == {"Authorization": "Bearer fixed"}
    assert plugin.runs == 3


async def test_slow_exec_plugin_is_bounded_by_request_timeout(
    plugin: Plugin, tmp_path: Path
) -> None:
    """With request_timeout=1 a slow plugin fails the request at 1 s, and the plugin is killed.

    On virtual time: the request's deadline is a timer on the transport's clock, moved by the
    test once the (real) plugin runs.
    """
    pid_file = tmp_path / "pid"
    plugin.behave(sleep=60, status={"token": "late"}, record_pid=str(pid_file))
    clock = RecordingClock()
    transport = Transport(
        ClientConfig(server="https://127.0.0.1:1", exec=plugin.exec_config()),
        TransportOptions(request_timeout=1.0, connect_timeout=0.5, clock=clock),
    )
    try:
        request = asyncio.create_task(transport.request("GET", "/version"))
        await until(lambda: pid_file.exists() and bool(pid_file.read_text()), "the plugin runs")
        assert clock.delays == [1.0]  # the request's deadline, and nothing else waits on time
        start = clock.now()
        clock.advance_to(start + 0.999)
        await asyncio.sleep(0)
        assert not request.done()
        clock.advance_to(start + 1.0)
        with pytest.raises(RequestTimeout) as info:
            await request
    finally:
        await transport.close()
    assert "credentials were not ready in time" in str(info.value)
    await until(gone(int(pid_file.read_text())), "the plugin run is cancelled and killed")


async def test_credential_reprs_hide_secrets(plugin: Plugin) -> None:
    """repr() of configs and cached plugin results shows no token, key, password or env value."""
    config = ClientConfig(
        server=SERVER,
        token="TOKEN-abcdef",
        proxy_url="http://proxyuser:PROXY-PASS@proxy.example:3128",
        source="test",
    )
    text = repr(config)
    assert "TOKEN-abcdef" not in text
    assert "PROXY-PASS" not in text
    assert "proxyuser" in text  # the user is not a secret
    exec_config = plugin.exec_config(env=(("API_KEY", "ENV-SECRET"),))
    text = repr(ClientConfig(server=SERVER, exec=exec_config))
    assert "ENV-SECRET" not in text
    assert "API_KEY" in text
    plugin.behave(status={"token": "PLUGIN-TOKEN-1"})
    creds = plugin.credentials()
    await creds.headers()
    assert isinstance(creds, ExecCredentials)
    assert "PLUGIN-TOKEN-1" not in repr(creds._current)
    assert "PLUGIN-TOKEN-1" not in repr(creds)


@pytest.mark.parametrize("token", ["two\nlines", "tok en", "caf\u00e9"])
async def test_tokens_that_cannot_be_a_header_are_refused(plugin: Plugin, token: str) -> None:
    """A token with a newline, space or non-ASCII fails at load, never on every request."""
    with pytest.raises(ConfigError, match="cannot be sent"):
        ClientConfig(server=SERVER, token=token)
    plugin.behave(status={"token": token})
    msg = await exec_error(plugin.credentials())
    assert "cannot be sent in an Authorization header" in msg
    assert token not in msg
