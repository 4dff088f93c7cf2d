"""Every ``setpoint doctor`` check connects the same way and names its own options.

The checks share one connection and report path (:func:`setpoint.cli.doctor.run_check`),
so a kubeconfig problem reads the same whichever check met it: in the words of the
command line (``--context NAME``, ``--kubeconfig``), not of the Python API.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from setpoint.cli import doctor

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: abc}
contexts:
- name: a
  context: {cluster: c, user: u}
current-context: a
"""

CHECKS = [[], ["finalizers"], ["leader-election"], ["crds"], ["webhooks"], ["shards"], ["paused"]]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c[0] if c else "all")
def test_an_unknown_context_is_named_as_the_option(
    check: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    assert doctor.main([*check, "--kubeconfig", str(path), "--context", "nope"]) == 1
    err = capsys.readouterr().err
    assert "context 'nope' (given as --context NAME) does not exist; known contexts: a" in err


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c[0] if c else "all")
def test_a_missing_kubeconfig_is_named_as_the_option(
    check: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "absent"
    assert doctor.main([*check, "--kubeconfig", str(missing)]) == 1
    err = capsys.readouterr().err
    assert str(missing) in err and "--kubeconfig" in err
