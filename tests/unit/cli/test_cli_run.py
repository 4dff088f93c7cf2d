"""``setpoint run``: settings from flags and environment, target resolution, exit codes."""

from __future__ import annotations

import argparse
import asyncio
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from setpoint.cli import run
from setpoint.cli.main import build_parser, main
from setpoint.manager import LeaderElectionLost, Manager, ManagerOptions
from setpoint.testing.fake import FakeClient
from setpoint.tls.pem import KeyPair

# Written out, not read from run.py, so a variable dropped from the table fails the tests.
ENV_VARS = (
    "KUBECONFIG",
    "SETPOINT_CONTEXT",
    "SETPOINT_LOG_LEVEL",
    "SETPOINT_LOG_FORMAT",
    "SETPOINT_METRICS_BIND_ADDRESS",
    "SETPOINT_METRICS_SECURE",
    "SETPOINT_METRICS_CERT_DIR",
    "SETPOINT_HEALTH_PROBE_BIND_ADDRESS",
    "SETPOINT_LEADER_ELECT",
    "SETPOINT_LEADER_ELECTION_NAMESPACE",
    "SETPOINT_LEADER_ELECTION_ID",
    "SETPOINT_LEADER_ELECTION_LEASE_DURATION",
    "SETPOINT_LEADER_ELECTION_RENEW_DEADLINE",
    "SETPOINT_LEADER_ELECTION_RETRY_PERIOD",
    "SETPOINT_WATCH_NAMESPACES",
    "SETPOINT_GRACEFUL_SHUTDOWN_TIMEOUT",
    "SETPOINT_WEBHOOK_CERT_SECRET",
    "SETPOINT_WEBHOOK_SERVICE",
    "SETPOINT_WEBHOOK_HOSTS",
    "SETPOINT_WEBHOOK_INJECT",
)

FLAGS = (
    "--kubeconfig",
    "--context",
    "--log-level",
    "--log-format",
    "--metrics-bind-address",
    "--metrics-secure",
    "--no-metrics-secure",
    "--metrics-cert-dir",
    "--health-probe-bind-address",
    "--leader-elect",
    "--no-leader-elect",
    "--leader-election-namespace",
    "--leader-election-id",
    "--leader-election-lease-duration",
    "--leader-election-renew-deadline",
    "--leader-election-retry-period",
    "--namespace",
    "--graceful-shutdown-timeout",
    "--webhook-cert-secret",
    "--webhook-service",
    "--webhook-host",
    "--webhook-inject",
)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def settings(*argv: str, env: dict[str, str] | None = None) -> run.RunSettings:
    return run.resolve_settings(parse(*argv), env or {})


# -- help --


def test_help_lists_every_flag_env_var_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse("--help")
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    flat = " ".join(text.split())  # argparse wraps lines; compare on words
    for name in ENV_VARS:
        assert f"[env {name}]" in flat, name
    for flag in FLAGS:
        assert flag in flat, flag
    assert "(default: '127.0.0.1:8080')" in flat
    assert "(default: ':8081' in a pod, '127.0.0.1:8081' elsewhere)" in flat
    assert "(default: 30)" in flat
    for code, meaning in (("0", "clean shutdown"), ("1", "error"), ("3", "leadership lost")):
        assert f"{code} {meaning}" in flat


def test_run_is_a_registered_command() -> None:
    args = parse("tenants")
    assert args.func is run._cmd_run
    assert args.target == "tenants"


# -- precedence --


def test_defaults_are_the_manager_options_defaults() -> None:
    resolved = settings("op", env={"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    defaults = ManagerOptions()
    assert resolved.metrics_bind_address == defaults.metrics_bind_address == "127.0.0.1:8080"
    assert resolved.metrics_secure is defaults.metrics_secure is False
    assert resolved.health_probe_bind_address == defaults.health_probe_bind_address == ":8081"
    assert resolved.graceful_shutdown_timeout == defaults.graceful_shutdown_timeout == 30.0
    assert resolved.leader_elect is False
    assert resolved.log_level == "info"
    assert resolved.log_format == "console"
    assert resolved.namespaces == ()
    assert resolved.kubeconfig is None
    assert resolved.context is None
    assert resolved.leader_election_id is None
    assert resolved.leader_election_namespace is None


def test_outside_a_pod_nothing_listens_beyond_loopback_unless_asked() -> None:
    """Issue 10: `setpoint run` on a laptop binds metrics and probes to 127.0.0.1 only."""
    resolved = settings("op", env={})
    assert resolved.metrics_bind_address == "127.0.0.1:8080"
    assert resolved.health_probe_bind_address == "127.0.0.1:8081"
    asked = settings("op", "--health-probe-bind-address", ":9000", env={})
    assert asked.health_probe_bind_address == ":9000"
    secure = settings("op", "--metrics-secure", "--metrics-bind-address", ":8443")
    assert (secure.metrics_secure, secure.metrics_bind_address) == (True, ":8443")
    options = run.build_manager_options(secure, "op")
    assert options.metrics_secure is True


ENV = {
    "SETPOINT_CONTEXT": "env-ctx",
    "SETPOINT_LOG_LEVEL": "WARNING",
    "SETPOINT_LOG_FORMAT": "json",
    "SETPOINT_METRICS_BIND_ADDRESS": "127.0.0.1:9000",
    "SETPOINT_HEALTH_PROBE_BIND_ADDRESS": "0",
    "SETPOINT_LEADER_ELECT": "true",
    "SETPOINT_LEADER_ELECTION_NAMESPACE": "ops",
    "SETPOINT_LEADER_ELECTION_ID": "env-lease",
    "SETPOINT_WATCH_NAMESPACES": "a, b,,c",
    "SETPOINT_GRACEFUL_SHUTDOWN_TIMEOUT": "12.5",
}


def test_environment_overrides_defaults() -> None:
    resolved = settings("op", env=ENV)
    assert resolved.context == "env-ctx"
    assert resolved.log_level == "warning"
    assert resolved.log_format == "json"
    assert resolved.metrics_bind_address == "127.0.0.1:9000"
    assert resolved.health_probe_bind_address == "0"
    assert resolved.leader_elect is True
    assert resolved.leader_election_namespace == "ops"
    assert resolved.leader_election_id == "env-lease"
    assert resolved.namespaces == ("a", "b", "c")
    assert resolved.graceful_shutdown_timeout == 12.5


def test_flags_override_environment() -> None:
    resolved = settings(
        "op",
        "--context=flag-ctx",
        "--log-level=debug",
        "--log-format=console",
        "--metrics-bind-address=:9100",
        "--health-probe-bind-address=127.0.0.1:9101",
        "--no-leader-elect",
        "--leader-election-namespace=flag-ns",
        "--leader-election-id=flag-lease",
        "--namespace=x",
        "--namespace=y",
        "--graceful-shutdown-timeout=3",
        env=ENV,
    )
    assert resolved.context == "flag-ctx"
    assert resolved.log_level == "debug"
    assert resolved.log_format == "console"
    assert resolved.metrics_bind_address == ":9100"
    assert resolved.health_probe_bind_address == "127.0.0.1:9101"
    assert resolved.leader_elect is False
    assert resolved.leader_election_namespace == "flag-ns"
    assert resolved.leader_election_id == "flag-lease"
    assert resolved.namespaces == ("x", "y")  # the flags replace the variable's list
    assert resolved.graceful_shutdown_timeout == 3.0


def test_leader_elect_flag_turns_it_on_over_a_false_variable() -> None:
    assert settings("op", "--leader-elect", env={"SETPOINT_LEADER_ELECT": "0"}).leader_elect
    assert settings("op", env={"SETPOINT_LEADER_ELECT": "yes"}).leader_elect
    assert not settings("op", env={"SETPOINT_LEADER_ELECT": "off"}).leader_elect


def test_empty_variables_count_as_unset() -> None:
    resolved = settings("op", env=dict.fromkeys(ENV, ""))
    assert resolved == settings("op")


def test_kubeconfig_variable_is_left_to_the_kubeconfig_loader() -> None:
    # $KUBECONFIG may be a ':'-separated list that only the loader merges.
    assert settings("op", env={"KUBECONFIG": "/a:/b"}).kubeconfig is None
    assert settings("op", "--kubeconfig", "/c", env={"KUBECONFIG": "/a"}).kubeconfig == "/c"


@pytest.mark.parametrize(
    ("variable", "value", "hint"),
    [
        ("SETPOINT_LOG_LEVEL", "loud", "use one of debug"),
        ("SETPOINT_LOG_FORMAT", "xml", "use console or json"),
        ("SETPOINT_METRICS_BIND_ADDRESS", "8080", "it needs a port"),
        ("SETPOINT_HEALTH_PROBE_BIND_ADDRESS", "::1:80", "IPv6"),
        ("SETPOINT_LEADER_ELECT", "maybe", "use true or false"),
        ("SETPOINT_LEADER_ELECTION_NAMESPACE", "Not_OK", "not a namespace name"),
        ("SETPOINT_WATCH_NAMESPACES", "good,Bad!", "'Bad!' is not a namespace name"),
        ("SETPOINT_GRACEFUL_SHUTDOWN_TIMEOUT", "-1", "positive"),
        ("SETPOINT_GRACEFUL_SHUTDOWN_TIMEOUT", "soon", "number of seconds"),
    ],
)
def test_invalid_variable_names_the_variable_and_the_rule(
    variable: str, value: str, hint: str
) -> None:
    with pytest.raises(ValueError) as error:
        settings("op", env={variable: value})
    message = str(error.value)
    assert message.startswith(f"{variable}={value!r}")
    assert hint in message


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "loud"],
        ["--metrics-bind-address", "nope"],
        ["--namespace", "UPPER"],
        ["--graceful-shutdown-timeout", "0"],
    ],
)
def test_invalid_flag_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse("op", *argv)
    assert exit_info.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_invalid_variable_exits_1_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SETPOINT_LOG_FORMAT", "xml")
    assert main(["run", "op"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("setpoint: error: SETPOINT_LOG_FORMAT='xml'")
    assert "Traceback" not in err


# -- manager options --


def test_manager_options_without_leader_election() -> None:
    options = run.build_manager_options(settings("op", "--metrics-bind-address=0"), "op")
    assert options.leader_election is None
    assert options.metrics_bind_address == "0"
    assert options.health_probe_bind_address == "127.0.0.1:8081"  # not in a pod


def test_leader_election_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "SERVICE_ACCOUNT_DIR", str(tmp_path / "absent"))
    options = run.build_manager_options(settings("x", "--leader-elect"), "my_operator.main")
    le = options.leader_election
    assert le is not None
    assert le.name == "my-operator-main-leader-election"
    assert le.namespace == "default"
    assert le.release_on_cancel is True


def test_leader_election_namespace_in_a_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "namespace").write_text("tenant-system\n")
    monkeypatch.setattr(run, "SERVICE_ACCOUNT_DIR", str(tmp_path))
    options = run.build_manager_options(settings("x", "--leader-elect"), "tenants")
    assert options.leader_election is not None
    assert options.leader_election.namespace == "tenant-system"
    explicit = run.build_manager_options(
        settings("x", "--leader-elect", "--leader-election-namespace=ops"), "tenants"
    )
    assert explicit.leader_election is not None
    assert explicit.leader_election.namespace == "ops"


def test_leader_election_timing_from_flags_and_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "SERVICE_ACCOUNT_DIR", str(tmp_path / "absent"))
    defaults = run.build_manager_options(settings("x", "--leader-elect"), "op").leader_election
    assert defaults is not None
    assert (defaults.lease_duration, defaults.renew_deadline, defaults.retry_period) == (15, 10, 2)
    env = {
        "SETPOINT_LEADER_ELECT": "true",
        "SETPOINT_LEADER_ELECTION_LEASE_DURATION": "60",
        "SETPOINT_LEADER_ELECTION_RENEW_DEADLINE": "40",
        "SETPOINT_LEADER_ELECTION_RETRY_PERIOD": "5",
    }
    resolved = settings(
        "x",
        "--leader-election-lease-duration=4",
        "--leader-election-renew-deadline=3",
        "--leader-election-retry-period=1",
        env=env,
    )
    le = run.build_manager_options(resolved, "op").leader_election
    assert le is not None
    assert (le.lease_duration, le.renew_deadline, le.retry_period) == (4, 3, 1)
    le = run.build_manager_options(settings("x", env=env), "op").leader_election
    assert le is not None
    assert (le.lease_duration, le.renew_deadline, le.retry_period) == (60, 40, 5)


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (
            ["--leader-elect", "--leader-election-lease-duration=10"],
            "--leader-election-renew-deadline (10 s) must be shorter than "
            "--leader-election-lease-duration (10 s)",
        ),
        (["--leader-elect", "--leader-election-lease-duration=7.5"], "whole number of seconds"),
        (
            ["--leader-elect", "--leader-election-retry-period=9"],
            "--leader-election-retry-period (9 s) is too long",
        ),
        (["--leader-election-lease-duration=60"], "add --leader-elect"),
    ],
)
def test_leader_election_timing_that_breaks_the_rules_names_the_flags(
    argv: list[str], hint: str
) -> None:
    with pytest.raises(ValueError) as error:
        settings("x", *argv)
    assert hint in str(error.value)
    assert "LeaderElectionOptions" not in str(error.value)


def test_processes_time_the_workers_leadership_inside_the_leader_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from setpoint.manager.processes import WorkerEnvironment, worker_options
    from setpoint.manager.workersplit import SupervisorLock

    monkeypatch.setattr(run, "SERVICE_ACCOUNT_DIR", str(tmp_path / "absent"))
    resolved = settings(
        "x",
        "--processes=2",
        "--leader-election-lease-duration=4",
        "--leader-election-renew-deadline=3",
        "--leader-election-retry-period=1",
    )
    options = run.build_manager_options(resolved, "op")
    le = options.leader_election
    assert le is not None and (le.lease_duration, le.renew_deadline, le.retry_period) == (4, 3, 1)
    worker = worker_options(options, WorkerEnvironment(0, 2, None, group="pod-abc123"))
    wle = worker.leader_election
    assert worker.sharding is None and wle is not None
    assert isinstance(wle.lock, SupervisorLock)
    # The worker renews inside the supervisor's fence: lease_duration - renew_deadline.
    assert (wle.renew_deadline, wle.retry_period) == (1, 0.25)


@pytest.mark.parametrize(
    ("module", "lease"),
    [
        ("tenants", "tenants-leader-election"),
        ("Acme_Ops.controllers", "acme-ops-controllers-leader-election"),
        ("__main__", "main-leader-election"),
    ],
)
def test_default_leader_election_id(module: str, lease: str) -> None:
    assert run.default_leader_election_id(module) == lease


def test_watch_namespaces_restrict_the_manager_cache() -> None:
    options = run.build_manager_options(settings("op", "--namespace=a", "--namespace=b"), "op")
    cache = options.new_cache(FakeClient())
    assert cache.options.namespaces == ("a", "b")
    unrestricted = run.build_manager_options(settings("op"), "op")
    assert unrestricted.new_cache(FakeClient()).options.namespaces == ()


def test_self_managed_webhook_certificates_from_flags_and_variables() -> None:
    """--webhook-cert-secret and friends build SelfManagedCertificates for the pod's namespace."""
    from setpoint.webhook.certificates import SelfManagedCertificates

    resolved = settings(
        "op",
        "--webhook-cert-secret=op-webhook-cert",
        "--webhook-service=op-webhook-service",
        "--webhook-host=127.0.0.1",
        "--webhook-inject=crd/widgets.example.com",
        "--webhook-inject=validating/op-validating-webhook-configuration",
    )
    client = FakeClient()
    options = run.build_manager_options(resolved, "op", client)
    source = options.webhook_server.certificate
    assert isinstance(source, SelfManagedCertificates)
    certs = source.options
    assert certs.secret_name == "op-webhook-cert"
    assert certs.secret_namespace == client.default_namespace
    assert certs.hosts == (
        f"op-webhook-service.{client.default_namespace}.svc",
        f"op-webhook-service.{client.default_namespace}.svc.cluster.local",
        "127.0.0.1",
    )
    assert certs.crds == ("widgets.example.com",)
    assert certs.validating_webhook_configurations == ("op-validating-webhook-configuration",)
    assert certs.mutating_webhook_configurations == ()
    from_env = settings(
        "op",
        env={
            "SETPOINT_WEBHOOK_CERT_SECRET": "s",
            "SETPOINT_WEBHOOK_HOSTS": "127.0.0.1,localhost",
            "SETPOINT_WEBHOOK_INJECT": "mutating/m,crd/c",
        },
    )
    assert from_env.webhook_hosts == ("127.0.0.1", "localhost")
    assert from_env.webhook_inject == ("mutating/m", "crd/c")


def test_webhook_certificate_settings_that_cannot_work_are_refused() -> None:
    """Two certificate sources, hosts without a Secret, or a bad target: one clear error."""
    with pytest.raises(ValueError, match="give one"):
        settings("op", "--webhook-cert-secret=s", "--webhook-cert-dir=/certs")
    with pytest.raises(ValueError, match="add --webhook-cert-secret"):
        settings("op", "--webhook-host=127.0.0.1")
    with pytest.raises(ValueError, match="use crd/NAME, validating/NAME or mutating/NAME"):
        settings("op", env={"SETPOINT_WEBHOOK_INJECT": "service/x"})
    with pytest.raises(SystemExit):
        parse("op", "--webhook-inject=oops")


def test_equal_bind_addresses_are_rejected() -> None:
    with pytest.raises(ValueError, match="different ports"):
        run.build_manager_options(
            settings("op", "--metrics-bind-address=:9000", "--health-probe-bind-address=:9000"),
            "op",
        )


# -- the metrics serving certificate --


def write_pair(directory: Path, common_name: str) -> KeyPair:
    """A CA-signed serving certificate for localhost as tls.crt and tls.key in ``directory``."""
    from setpoint.tls.certs import CertificateAuthority

    pair = CertificateAuthority(f"{common_name}-ca").serving_cert(common_name, ("127.0.0.1",))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)
    return pair


def test_metrics_cert_dir_serves_the_directorys_certificate(tmp_path: Path) -> None:
    """--metrics-cert-dir (or its variable): /metrics serves tls.crt/tls.key of the directory,
    as controller-runtime's --metrics-cert-path, instead of a self-signed certificate."""
    pair = write_pair(tmp_path / "certs", "metrics-a")
    for resolved in (
        settings("op", "--metrics-secure", f"--metrics-cert-dir={tmp_path / 'certs'}"),
        settings(
            "op",
            env={
                "SETPOINT_METRICS_SECURE": "true",
                "SETPOINT_METRICS_CERT_DIR": str(tmp_path / "certs"),
            },
        ),
    ):
        assert resolved.metrics_cert_dir == str(tmp_path / "certs")
        options = run.build_manager_options(resolved, "op")
        assert options.metrics_tls is not None
        assert options.metrics_tls.certificate == pair
    assert run.build_manager_options(settings("op", "--metrics-secure"), "op").metrics_tls is None


def test_metrics_cert_dir_without_metrics_secure_is_refused() -> None:
    """A certificate for a plain-HTTP endpoint would be silently unused: say what to add."""
    with pytest.raises(ValueError, match="add --metrics-secure"):
        settings("op", "--metrics-cert-dir=/certs")
    with pytest.raises(ValueError, match="add --metrics-secure"):
        settings("op", "--no-metrics-secure", env={"SETPOINT_METRICS_CERT_DIR": "/certs"})


@pytest.mark.usefixtures("clean_imports")
def test_a_missing_metrics_certificate_exits_1_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "op_certs.py", "def setup(manager):\n    pass\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["run", "op_certs.py", "--kubeconfig", str(kubeconfig(tmp_path)), "--metrics-secure"]
    code = main([*argv, f"--metrics-cert-dir={empty}"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"setpoint: error: --metrics-cert-dir {empty}: ")
    assert "tls.crt" in err
    assert "Traceback" not in err


def served_certificate(address: tuple[str, int]) -> bytes:
    """The DER certificate a TLS handshake with ``address`` is served (not verified)."""
    import socket
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(address, timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der(pair: KeyPair) -> bytes:
    import ssl

    return ssl.PEM_cert_to_DER_cert(pair.cert_pem.decode())


@pytest.mark.usefixtures("clean_imports")
async def test_the_metrics_certificate_is_reloaded_when_the_directory_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`setpoint run --metrics-cert-dir` adds a watch of the directory to the manager: when
    the kubelet swaps the mounted Secret's files (cert-manager renewed it), new handshakes on
    /metrics get the new certificate without a restart, as the webhook server's do."""
    from setpoint.webhook.server import CertificateDirectory

    monkeypatch.chdir(tmp_path)
    write(tmp_path / "op_reload.py", "def setup(manager):\n    pass\n")
    first = write_pair(tmp_path / "certs", "metrics-first")
    managers: list[Manager] = []

    async def capture(self: Manager) -> None:
        managers.append(self)

    monkeypatch.setattr(Manager, "run", capture)
    argv = ["run", "op_reload.py", "--kubeconfig", str(kubeconfig(tmp_path)), "--metrics-secure"]
    argv += ["--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=0"]
    # main() runs its own event loop; this test's loop runs the servers afterwards.
    code = await asyncio.to_thread(main, [*argv, f"--metrics-cert-dir={tmp_path / 'certs'}"])
    assert code == 0
    [manager] = managers
    by_name = {r.name: r for r in manager.runnables}
    server, watch = by_name["metrics-server"], by_name["metrics-certificate"]
    assert watch.group == server.group
    assert not watch.needs_leader_election
    # The same watch on a short poll, so the test does not wait the default 10 s.
    assert isinstance(watch, run._CertificateReload)
    assert watch.tls is manager.options.metrics_tls
    assert watch.source.path == str(tmp_path / "certs")
    fast = run._CertificateReload(
        CertificateDirectory(str(tmp_path / "certs"), poll_interval=0.02), watch.tls
    )
    await server.start()
    await fast.start()
    try:
        address = manager.metrics_address
        assert address is not None
        assert await asyncio.to_thread(served_certificate, address) == der(first)
        second = write_pair(tmp_path / "certs", "metrics-second")
        served = b""
        for _ in range(500):
            served = await asyncio.to_thread(served_certificate, address)
            if served == der(second):
                break
            await asyncio.sleep(0.02)
        assert served == der(second)
        assert fast.failure() is None
    finally:
        await fast.stop(1.0)
        await server.stop(1.0)


# -- loading the operator --


@pytest.fixture
def clean_imports() -> Iterator[None]:
    """Undo what loading operators does to sys.path and sys.modules."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        del sys.modules[name]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.usefixtures("clean_imports")
def test_load_a_module_by_name_from_the_current_directory(tmp_path: Path) -> None:
    write(tmp_path / "op_by_name.py", "def setup(manager):\n    return 'ok'\n")
    loaded = run.load_operator("op_by_name", cwd=tmp_path)
    assert loaded.name == "op_by_name"
    assert loaded.setup(None) == "ok"


@pytest.mark.usefixtures("clean_imports")
def test_load_a_package_directory_with_relative_imports(tmp_path: Path) -> None:
    write(tmp_path / "src" / "op_pkg" / "__init__.py", "from .wiring import setup\n")
    write(tmp_path / "src" / "op_pkg" / "wiring.py", "def setup(manager):\n    return 'pkg'\n")
    loaded = run.load_operator("src/op_pkg", cwd=tmp_path)
    assert loaded.name == "op_pkg"
    assert loaded.setup(None) == "pkg"
    assert str(tmp_path / "src") in sys.path


@pytest.mark.usefixtures("clean_imports")
def test_load_a_file_inside_a_package_keeps_its_package(tmp_path: Path) -> None:
    write(tmp_path / "op_outer" / "__init__.py", "")
    write(tmp_path / "op_outer" / "helpers.py", "VALUE = 'helped'\n")
    write(
        tmp_path / "op_outer" / "main.py",
        "from .helpers import VALUE\ndef setup(manager):\n    return VALUE\n",
    )
    loaded = run.load_operator(str(tmp_path / "op_outer" / "main.py"))
    assert loaded.name == "op_outer.main"
    assert loaded.setup(None) == "helped"


@pytest.mark.usefixtures("clean_imports")
def test_file_whose_name_is_taken_by_an_imported_module(tmp_path: Path) -> None:
    # The standard library's `operator` is imported already; a file of that name would
    # silently load the wrong module.
    write(tmp_path / "operator.py", "def setup(manager):\n    pass\n")
    with pytest.raises(run.OperatorLoadError, match="already taken by"):
        run.load_operator("operator.py", cwd=tmp_path)


@pytest.mark.usefixtures("clean_imports")
def test_path_that_is_not_a_valid_module_name(tmp_path: Path) -> None:
    write(tmp_path / "my-operator.py", "def setup(manager):\n    pass\n")
    with pytest.raises(run.OperatorLoadError, match="which Python cannot import"):
        run.load_operator("my-operator.py", cwd=tmp_path)


@pytest.mark.usefixtures("clean_imports")
def test_unknown_module_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(run.OperatorLoadError) as error:
        run.load_operator("op_does_not_exist", cwd=tmp_path)
    assert "not found: no module named 'op_does_not_exist'" in str(error.value)
    assert not error.value.in_user_code


@pytest.mark.usefixtures("clean_imports")
def test_missing_path_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(run.OperatorLoadError, match="no such file or directory"):
        run.load_operator("./missing.py", cwd=tmp_path)


@pytest.mark.usefixtures("clean_imports")
def test_directory_without_init_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(run.OperatorLoadError, match="not a Python package"):
        run.load_operator("plain", cwd=tmp_path)


@pytest.mark.usefixtures("clean_imports")
def test_import_error_quotes_the_failing_line(tmp_path: Path) -> None:
    write(tmp_path / "op_raises.py", "x = 1\nraise RuntimeError('no database')\n")
    with pytest.raises(run.OperatorLoadError) as error:
        run.load_operator("op_raises.py", cwd=tmp_path)
    message = str(error.value)
    assert "RuntimeError: no database" in message
    assert f"{tmp_path / 'op_raises.py'}:2: raise RuntimeError('no database')" in message
    assert error.value.in_user_code


@pytest.mark.usefixtures("clean_imports")
def test_missing_dependency_is_an_import_error_not_a_missing_operator(tmp_path: Path) -> None:
    write(tmp_path / "op_dep.py", "import op_absent_dependency_xyz\n")
    with pytest.raises(run.OperatorLoadError) as error:
        run.load_operator("op_dep", cwd=tmp_path)
    message = str(error.value)
    assert "importing 'op_dep' failed" in message
    assert "No module named 'op_absent_dependency_xyz'" in message
    assert "op_dep.py:1: import op_absent_dependency_xyz" in message


@pytest.mark.usefixtures("clean_imports")
def test_syntax_error_shows_file_line_and_text(tmp_path: Path) -> None:
    write(tmp_path / "op_syntax.py", "def broken(:\n    pass\n")
    with pytest.raises(run.OperatorLoadError) as error:
        run.load_operator("op_syntax.py", cwd=tmp_path)
    message = str(error.value)
    assert f"{tmp_path / 'op_syntax.py'}:1: SyntaxError" in message
    assert "def broken(:" in message


@pytest.mark.usefixtures("clean_imports")
def test_module_without_setup(tmp_path: Path) -> None:
    write(tmp_path / "op_nosetup.py", "def start(manager):\n    pass\n")
    with pytest.raises(run.OperatorLoadError, match=r"defines no setup\(\) function"):
        run.load_operator("op_nosetup", cwd=tmp_path)


@pytest.mark.usefixtures("clean_imports")
def test_setup_that_is_not_callable(tmp_path: Path) -> None:
    write(tmp_path / "op_setupvar.py", "setup = {'controllers': []}\n")
    with pytest.raises(run.OperatorLoadError, match="is a dict, not a function"):
        run.load_operator("op_setupvar", cwd=tmp_path)


@pytest.mark.usefixtures("clean_imports")
async def test_setup_raising_names_setup_and_the_line(tmp_path: Path) -> None:
    write(
        tmp_path / "op_badsetup.py",
        "def setup(manager):\n    raise KeyError('TENANTS_DIRECTORY_PATH')\n",
    )
    loaded = run.load_operator("op_badsetup", cwd=tmp_path)
    with pytest.raises(run.OperatorLoadError) as error:
        await run._call_setup(loaded, object())
    message = str(error.value)
    assert message.startswith(
        "op_badsetup.setup(manager) raised KeyError: 'TENANTS_DIRECTORY_PATH'"
    )
    assert "op_badsetup.py:2: raise KeyError('TENANTS_DIRECTORY_PATH')" in message
    assert error.value.in_user_code


@pytest.mark.usefixtures("clean_imports")
async def test_async_setup_is_awaited(tmp_path: Path) -> None:
    write(
        tmp_path / "op_async.py",
        "async def setup(manager):\n    manager.append('registered')\n",
    )
    loaded = run.load_operator("op_async", cwd=tmp_path)
    seen: list[str] = []
    await run._call_setup(loaded, seen)
    assert seen == ["registered"]


# -- whole command: exit codes, no tracebacks --


def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig for a server nobody listens on: building a client does not connect."""
    return write(
        tmp_path / "kubeconfig",
        """\
        apiVersion: v1
        kind: Config
        clusters:
        - name: c
          cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}
        users:
        - name: u
          user: {token: t}
        contexts:
        - name: ctx
          context: {cluster: c, user: u}
        current-context: ctx
        """,
    )


@pytest.mark.usefixtures("clean_imports")
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def setup(manager):\n    raise ValueError('bad setting')\n", "raised ValueError"),
        ("import op_gone_dependency_xyz\n", "importing"),
        ("x = 1\n", "defines no setup()"),
    ],
)
def test_operator_failures_exit_1_without_traceback(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    expected: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "op_cmd.py", source)
    code = main(["run", "op_cmd.py", "--kubeconfig", str(kubeconfig(tmp_path))])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("setpoint: error: ")
    assert expected in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("clean_imports")
def test_debug_level_shows_the_operators_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "op_dbg.py", "def setup(manager):\n    raise ValueError('bad setting')\n")
    code = main(
        ["run", "op_dbg.py", "--log-level=debug", "--kubeconfig", str(kubeconfig(tmp_path))]
    )
    assert code == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.usefixtures("clean_imports")
def test_unknown_context_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "op_ctx.py", "def setup(manager):\n    pass\n")
    code = main(["run", "op_ctx.py", "--kubeconfig", str(kubeconfig(tmp_path)), "--context=nope"])
    err = capsys.readouterr().err
    assert code == 1
    assert "nope" in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("clean_imports")
@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        (None, run.EXIT_OK),
        (LeaderElectionLost("Lease default/op", "me"), run.EXIT_LEADERSHIP_LOST),
    ],
)
def test_exit_codes_of_the_manager_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    outcome: BaseException | None,
    code: int,
) -> None:
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path / "op_exit.py",
        "def setup(manager):\n    manager.setup_called = True\n",
    )
    seen: list[Any] = []

    async def fake_run(self: Manager) -> None:
        seen.append((getattr(self, "setup_called", False), self.options))
        if outcome is not None:
            raise outcome

    monkeypatch.setattr(Manager, "run", fake_run)
    assert (
        main(
            [
                "run",
                "op_exit.py",
                "--kubeconfig",
                str(kubeconfig(tmp_path)),
                "--leader-elect",
                "--leader-election-namespace=ops",
            ]
        )
        == code
    )
    [(setup_called, options)] = seen
    assert setup_called  # setup ran before the manager
    assert options.leader_election.name == "op-exit-leader-election"
    assert options.leader_election.namespace == "ops"
    if outcome is not None:
        assert "lost leadership" in capsys.readouterr().err
