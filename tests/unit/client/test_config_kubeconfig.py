"""Kubeconfig loading: kubectl's merge rules, relative paths, and every error being clear."""

from __future__ import annotations

import base64
import logging
import os
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


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No test sees the real $KUBECONFIG, home directory or pod environment."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    return home


def kubeconfig(
    *,
    clusters: dict[str, dict[str, Any]] | None = None,
    contexts: dict[str, dict[str, Any]] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
    current: str | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    if current is not None:
        doc["current-context"] = current
    if clusters is not None:
        doc["clusters"] = [{"name": n, "cluster": c} for n, c in clusters.items()]
    if contexts is not None:
        doc["contexts"] = [{"name": n, "context": c} for n, c in contexts.items()]
    if users is not None:
        doc["users"] = [{"name": n, "user": u} for n, u in users.items()]
    return doc


def simple(**user: Any) -> dict[str, Any]:
    """One cluster ``c``, one user ``u``, context ``dev`` (current)."""
    return kubeconfig(
        clusters={"c": {"server": "https://127.0.0.1:6443"}},
        contexts={"dev": {"cluster": "c", "user": "u"}},
        users={"u": user or {"token": "t0k"}},
        current="dev",
    )


def write(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc), encoding="utf-8")
    return path


def load_error(path: Path, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_kubeconfig(path, **kwargs)
    return info.value


# --- loading ----------------------------------------------------------------------


def test_loads_current_context(tmp_path: Path) -> None:
    doc = simple(token="abc", **{"as": "bob", "as-groups": ["g1", "g2"]})
    doc["contexts"][0]["context"]["namespace"] = "team-a"
    doc["clusters"][0]["cluster"].update(
        {"tls-server-name": "kube.local", "proxy-url": "http://p:3128"}
    )
    path = write(tmp_path / "kc", doc)

    cfg = load_kubeconfig(path)

    assert cfg.server == "https://127.0.0.1:6443"
    assert cfg.namespace == "team-a"
    assert cfg.token == "abc"
    assert cfg.impersonate_user == "bob"
    assert cfg.impersonate_groups == ("g1", "g2")
    assert cfg.tls_server_name == "kube.local"
    assert cfg.proxy_url == "http://p:3128"
    assert cfg.source == f"kubeconfig {path} (context dev)"


# What kubectl and the cloud CLIs write: block style, indented and unindented sequences,
# a folded double-quoted string over two lines, an empty flow mapping, a null.
KUBECTL_STYLE = """\
apiVersion: v1
clusters:
- cluster:
    server: https://127.0.0.1:6443
  name: kind-kind
- cluster:
    server: https://api.example.com
    tls-server-name: api.internal
  name: prod
contexts:
- context:
    cluster: kind-kind
    namespace: default
    user: kind-kind
  name: kind-kind
- context:
    cluster: prod
    user: gke
  name: gke
- context:
    cluster: prod
    user: eks
  name: eks
current-context: kind-kind
kind: Config
preferences: {}
users:
- name: kind-kind
  user:
    token: abc.def
- name: gke
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      args:
      - --use_application_default_credentials
      command: gke-gcloud-auth-plugin
      env: null
      installHint: "Install gke-gcloud-auth-plugin for use with kubectl by following
        https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl"
      interactiveMode: IfAvailable
      provideClusterInfo: true
- name: eks
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      args:
        - eks
        - get-token
      command: aws
      env:
        - name: AWS_PROFILE
          value: 'dev'
"""


def test_the_kubeconfigs_kubectl_and_the_cloud_clis_write(tmp_path: Path) -> None:
    path = write(tmp_path / "kc", KUBECTL_STYLE)
    kind = load_kubeconfig(path)
    assert (kind.server, kind.token, kind.namespace) == (
        "https://127.0.0.1:6443",
        "abc.def",
        "default",
    )
    gke = load_kubeconfig(path, context="gke").exec
    assert gke is not None
    assert gke.args == ("--use_application_default_credentials",)
    assert gke.install_hint == (
        "Install gke-gcloud-auth-plugin for use with kubectl by following "
        "https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl"
    )
    assert gke.provide_cluster_info is True
    eks = load_kubeconfig(path, context="eks").exec
    assert eks is not None
    assert (eks.command, eks.args, eks.env) == (
        "aws",
        ("eks", "get-token"),
        (("AWS_PROFILE", "dev"),),
    )


def test_kubeconfigs_are_parsed_by_libyaml() -> None:
    """PyYAML's C loader (a maintained parser, decision 0020), not its pure-Python one."""
    from setpoint.client.kubeconfig import _yaml_loader

    assert issubclass(_yaml_loader(), yaml.CSafeLoader)


def test_context_argument_overrides_current_context(tmp_path: Path) -> None:
    doc = kubeconfig(
        clusters={"a": {"server": "https://a:1"}, "b": {"server": "https://b:2"}},
        contexts={"ctx-a": {"cluster": "a"}, "ctx-b": {"cluster": "b", "namespace": "x"}},
        current="ctx-a",
    )
    path = write(tmp_path / "kc", doc)

    assert load_kubeconfig(path).server == "https://a:1"
    cfg = load_kubeconfig(path, context="ctx-b")
    assert (cfg.server, cfg.namespace) == ("https://b:2", "x")


def test_context_without_user_or_namespace_is_anonymous_in_default(tmp_path: Path) -> None:
    doc = kubeconfig(
        clusters={"c": {"server": "http://localhost:8080/"}},
        contexts={"dev": {"cluster": "c"}},
        current="dev",
    )
    cfg = load_kubeconfig(write(tmp_path / "kc", doc))
    assert cfg.namespace == "default"
    assert cfg.server == "http://localhost:8080"  # trailing slash removed
    assert (cfg.token, cfg.token_file, cfg.exec, cfg.client_cert_data) == (None, None, None, None)


def test_server_path_prefix_is_kept(tmp_path: Path) -> None:
    doc = simple()
    doc["clusters"][0]["cluster"]["server"] = "https://rancher.example/k8s/clusters/c-1/"
    assert load_kubeconfig(write(tmp_path / "kc", doc)).server == (
        "https://rancher.example/k8s/clusters/c-1"
    )


def test_empty_file_counts_as_empty_config(tmp_path: Path) -> None:
    err = load_error(write(tmp_path / "kc", ""))
    assert "defines no contexts" in str(err)


# --- where the files come from, and merging ----------------------------------------


def test_default_location_used_without_kubeconfig_env(clean_env: Path) -> None:
    write(clean_env / ".kube" / "config", simple(token="from-home"))
    assert load_kubeconfig().token == "from-home"


def test_kubeconfig_env_is_preferred_over_home(
    clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(clean_env / ".kube" / "config", simple(token="from-home"))
    env_file = write(tmp_path / "env-kc", simple(token="from-env"))
    monkeypatch.setenv("KUBECONFIG", str(env_file))
    assert load_kubeconfig().token == "from-env"


def test_merge_first_file_to_define_a_name_wins_whole_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write(
        tmp_path / "a",
        kubeconfig(
            clusters={"c": {"server": "https://first:1"}},
            users={"u": {"token": "first-token"}},
        ),
    )
    second = write(
        tmp_path / "b",
        kubeconfig(
            # Same names: ignored entirely, even tls-server-name that "first" lacks.
            clusters={"c": {"server": "https://second:2", "tls-server-name": "nope"}},
            users={"u": {"token": "second-token"}, "v": {"token": "v-token"}},
            contexts={"dev": {"cluster": "c", "user": "u"}, "other": {"cluster": "c", "user": "v"}},
            current="dev",
        ),
    )
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), "", str(second)]))

    cfg = load_kubeconfig()
    assert cfg.server == "https://first:1"
    assert cfg.tls_server_name is None
    assert cfg.token == "first-token"
    assert cfg.source == f"kubeconfig {second} (context dev)"
    assert load_kubeconfig(context="other").token == "v-token"


def test_merge_current_context_from_first_file_that_sets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clusters = {"a": {"server": "https://a:1"}, "b": {"server": "https://b:1"}}
    none_set = write(tmp_path / "0", kubeconfig(clusters=clusters))
    sets_a = write(
        tmp_path / "1",
        kubeconfig(contexts={"ctx-a": {"cluster": "a"}}, current="ctx-a"),
    )
    sets_b = write(
        tmp_path / "2",
        kubeconfig(contexts={"ctx-b": {"cluster": "b"}}, current="ctx-b"),
    )
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(map(str, [none_set, sets_a, sets_b])))
    assert load_kubeconfig().server == "https://a:1"


def test_kubeconfig_env_skips_missing_files_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "missing"
    present = write(tmp_path / "kc", simple())
    monkeypatch.setenv("KUBECONFIG", f"{missing}{os.pathsep}{present}")
    with caplog.at_level(logging.WARNING, logger="setpoint.client.config"):
        cfg = load_kubeconfig()
    assert cfg.token == "t0k"
    assert str(missing) in caplog.text


def test_relative_paths_resolve_against_the_defining_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "conf" / "tokens" / "t", "file-token\n")
    doc = simple(tokenFile="tokens/t")
    doc["users"].append(
        {
            "name": "e",
            "user": {
                "exec": {
                    "apiVersion": EXEC_API_V1,
                    "command": "./bin/plugin",  # has a "/": resolved like a file path
                    "interactiveMode": "Never",
                }
            },
        }
    )
    doc["contexts"].append({"name": "exec", "context": {"cluster": "c", "user": "e"}})
    path = write(tmp_path / "conf" / "kc", doc)
    monkeypatch.chdir(tmp_path)  # the working directory must not matter

    assert load_kubeconfig(path).token_file == str(tmp_path / "conf" / "tokens" / "t")
    exec_cfg = load_kubeconfig(path, context="exec").exec
    assert exec_cfg is not None
    assert exec_cfg.command == str(tmp_path / "conf" / "bin" / "plugin")


def test_exec_settings_are_read(tmp_path: Path) -> None:
    doc = simple(
        exec={
            "apiVersion": EXEC_API_V1BETA1,
            "command": "kubelogin",  # a bare name stays a $PATH lookup
            "args": ["get-token", "--server-id", "x"],
            "env": [{"name": "A", "value": "1"}, {"name": "B"}],
            "installHint": "brew install kubelogin",
            "provideClusterInfo": True,
        }
    )
    doc["clusters"][0]["cluster"]["extensions"] = [
        {"name": "other", "extension": {"x": 1}},
        {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "kube"}},
    ]
    cfg = load_kubeconfig(write(tmp_path / "kc", doc))
    assert cfg.exec == ExecConfig(
        command="kubelogin",
        args=("get-token", "--server-id", "x"),
        env=(("A", "1"), ("B", "")),
        api_version=EXEC_API_V1BETA1,
        install_hint="brew install kubelogin",
        provide_cluster_info=True,
        interactive_mode="IfAvailable",  # the v1beta1 default
        cluster_config={"audience": "kube"},
    )


# --- errors: files ------------------------------------------------------------------


def test_missing_explicit_file_names_path_and_argument(tmp_path: Path) -> None:
    err = load_error(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(err)
    assert "given as path=..." in str(err)
    assert "make path=... name an existing kubeconfig file" in str(err)


def test_missing_default_file_names_path_and_why(clean_env: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_kubeconfig()
    msg = str(info.value)
    assert str(clean_env / ".kube" / "config") in msg
    assert "$KUBECONFIG is not set" in msg


def test_all_kubeconfig_env_files_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}")
    with pytest.raises(ConfigError) as info:
        load_kubeconfig()
    msg = str(info.value)
    assert "$KUBECONFIG" in msg
    assert str(tmp_path / "a") in msg
    assert str(tmp_path / "b") in msg


def test_single_kubeconfig_env_file_missing_names_the_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "a"))
    with pytest.raises(ConfigError) as info:
        load_kubeconfig()
    assert str(tmp_path / "a") in str(info.value)
    assert "listed in $KUBECONFIG" in str(info.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    err = load_error(tmp_path / "dir")
    assert str(tmp_path / "dir") in str(err)
    assert "cannot be read" in str(err)


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path / "kc",
        "apiVersion: v1\nclusters:\n- name: c\n  cluster: {server: https://x\ncontexts: []\n",
    )
    err = load_error(path)
    assert err.file == str(path)
    assert "not valid YAML" in str(err)
    assert "line 5" in str(err)
    assert not isinstance(err.__cause__, yaml.YAMLError)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    err = load_error(write(tmp_path / "kc", "- a\n- b\n"))
    assert "top level must be a mapping" in str(err)
    assert "a list" in str(err)


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        (lambda d: d.update(clusters={"c": 1}), "clusters", "must be a list"),
        (lambda d: d["clusters"].append("x"), "clusters[1]", "must be a mapping"),
        (lambda d: d["users"].append({"user": {}}), "users[1].name", "non-empty string"),
        (lambda d: d["contexts"].append({"name": "dev"}), "contexts[name=dev]", "more than once"),
        (
            lambda d: d["clusters"][0].update(cluster=["x"]),
            "clusters[name=c].cluster",
            "must be a mapping",
        ),
        (
            lambda d: d["clusters"][0]["cluster"].update(server=6443),
            "clusters[name=c].cluster.server",
            "must be a string",
        ),
        (
            lambda d: d["clusters"][0]["cluster"].update({"insecure-skip-tls-verify": "yes"}),
            "clusters[name=c].cluster.insecure-skip-tls-verify",
            "true or false",
        ),
        (
            lambda d: d["users"][0]["user"].update({"as-groups": "admins"}),
            "users[name=u].user.as-groups",
            "list of strings",
        ),
        (
            lambda d: d["users"][0]["user"].update({"as": "x", "as-groups": ["ok", 3]}),
            "users[name=u].user.as-groups[1]",
            "must be a string",
        ),
        (
            lambda d: d["contexts"][0]["context"].update(namespace=["a"]),
            "contexts[name=dev].context.namespace",
            "must be a string",
        ),
        (lambda d: d.update({"current-context": 5}), "current-context", "must be a string"),
    ],
)
def test_wrong_shapes_and_types_name_the_field(
    tmp_path: Path, mutate: Any, field: str, words: str
) -> None:
    doc = simple()
    mutate(doc)
    path = write(tmp_path / "kc", doc)
    err = load_error(path)
    assert err.file == str(path)
    assert err.field == field
    assert words in str(err)
    assert f"{path}: {field}: " in str(err)


# --- errors: resolving the context -------------------------------------------------------


def test_no_current_context_and_none_given(tmp_path: Path) -> None:
    doc = simple()
    del doc["current-context"]
    path = write(tmp_path / "kc", doc)
    err = load_error(path)
    assert "no current-context" in str(err)
    assert "context=" in str(err)
    assert "dev" in str(err)  # the known contexts
    assert str(path) in str(err)


def test_unknown_current_context_lists_known(tmp_path: Path) -> None:
    doc = simple()
    doc["current-context"] = "prod"
    doc["contexts"].append({"name": "staging", "context": {"cluster": "c"}})
    path = write(tmp_path / "kc", doc)
    err = load_error(path)
    assert err.field == "current-context"
    assert "'prod'" in str(err)
    assert "known contexts: dev, staging" in str(err)
    assert str(path) in str(err)


def test_unknown_context_argument(tmp_path: Path) -> None:
    path = write(tmp_path / "kc", simple())
    err = load_error(path, context="prod")
    assert "'prod' (given as context=...)" in str(err)
    assert "known contexts: dev" in str(err)


def test_context_naming_unknown_cluster(tmp_path: Path) -> None:
    doc = simple()
    doc["contexts"][0]["context"]["cluster"] = "gone"
    path = write(tmp_path / "kc", doc)
    err = load_error(path)
    assert err.field == "contexts[name=dev].context.cluster"
    assert "'gone'" in str(err)
    assert "known clusters: c" in str(err)
    assert str(path) in str(err)


def test_context_naming_unknown_user(tmp_path: Path) -> None:
    doc = simple()
    doc["contexts"][0]["context"]["user"] = "mallory"
    err = load_error(write(tmp_path / "kc", doc))
    assert err.field == "contexts[name=dev].context.user"
    assert "known users: u" in str(err)


def test_context_without_cluster(tmp_path: Path) -> None:
    doc = simple()
    del doc["contexts"][0]["context"]["cluster"]
    err = load_error(write(tmp_path / "kc", doc))
    assert err.field == "contexts[name=dev].context.cluster"
    assert "missing" in str(err)


# --- errors: values -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "server",
    [
        "ftp://host:21",
        "127.0.0.1:6443",
        "https://",
        "https://host:99999",
        "https://user:pw@host",
        "https://host/?q=1",
        "https://ho st",
        "",
    ],
)
def test_bad_server_url_names_the_field(tmp_path: Path, server: str) -> None:
    doc = simple()
    doc["clusters"][0]["cluster"]["server"] = server
    err = load_error(write(tmp_path / "kc", doc))
    assert err.field == "clusters[name=c].cluster.server"
    assert "http" in str(err)


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("clusters", "certificate-authority-data"),
        ("users", "client-certificate-data"),
        ("users", "client-key-data"),
    ],
)
def test_bad_base64_names_the_field(tmp_path: Path, where: str, key: str) -> None:
    doc = simple()
    inner = "cluster" if where == "clusters" else "user"
    doc[where][0][inner][key] = "!!not base64!!"
    err = load_error(write(tmp_path / "kc", doc))
    name = "c" if where == "clusters" else "u"
    assert err.field == f"{where}[name={name}].{inner}.{key}"
    assert "not valid base64" in str(err)
    assert err.__cause__ is None and err.__suppress_context__


def test_base64_that_is_not_pem(tmp_path: Path) -> None:
    doc = simple()
    doc["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(b"hi").decode()
    err = load_error(write(tmp_path / "kc", doc))
    assert err.field == "clusters[name=c].cluster.certificate-authority-data"
    assert "PEM" in str(err)


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("clusters", "certificate-authority"),
        ("users", "client-certificate"),
        ("users", "tokenFile"),
    ],
)
def test_unreadable_referenced_file_names_field_and_path(
    tmp_path: Path, where: str, key: str
) -> None:
    doc = simple()
    inner = "cluster" if where == "clusters" else "user"
    doc[where][0][inner][key] = "missing/file.pem"
    if key == "client-certificate":
        doc[where][0][inner]["client-key"] = "missing/key.pem"
    err = load_error(write(tmp_path / "kc", doc))
    name = "c" if where == "clusters" else "u"
    assert err.field == f"{where}[name={name}].{inner}.{key}"
    assert str(tmp_path / "missing" / "file.pem") in str(err)


def test_empty_token_file(tmp_path: Path) -> None:
    write(tmp_path / "tok", "  \n")
    err = load_error(write(tmp_path / "kc", simple(tokenFile="tok")))
    assert err.field == "users[name=u].user.tokenFile"
    assert "empty" in str(err)


def test_certificate_without_key(tmp_path: Path) -> None:
    doc = simple(**{"client-certificate-data": base64.b64encode(b"x").decode()})
    err = load_error(write(tmp_path / "kc", doc))
    assert err.field == "users[name=u].user"
    assert "client-key" in str(err)


@pytest.mark.parametrize(
    ("user", "field", "words"),
    [
        ({"auth-provider": {"name": "gcp"}}, "auth-provider", "exec plugin"),
        ({"username": "a", "password": "b"}, "username", "basic authentication"),
        ({"as": "x", "as-uid": "1"}, "as-uid", "not supported"),
        (
            {
                "token": "t",
                "exec": {"apiVersion": EXEC_API_V1, "command": "x", "interactiveMode": "Never"},
            },
            None,
            "keep one",
        ),
    ],
)
def test_unsupported_or_ambiguous_auth(
    tmp_path: Path, user: dict[str, Any], field: str | None, words: str
) -> None:
    err = load_error(write(tmp_path / "kc", simple(**user)))
    if field is not None:
        assert err.field == f"users[name=u].user.{field}"
    assert words in str(err)


@pytest.mark.parametrize(
    ("exec_cfg", "field", "words"),
    [
        ({"command": "x", "interactiveMode": "Never"}, "apiVersion", "missing"),
        (
            {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"},
            "apiVersion",
            "v1alpha1 was removed",
        ),
        ({"apiVersion": EXEC_API_V1, "command": "x"}, "interactiveMode", "required"),
        ({"apiVersion": EXEC_API_V1, "interactiveMode": "Never"}, "command", "missing"),
        ({"apiVersion": EXEC_API_V1BETA1, "command": "x", "args": "a b"}, "args", "list"),
        (
            {"apiVersion": EXEC_API_V1BETA1, "command": "x", "env": [{"value": "v"}]},
            "env[0].name",
            "missing",
        ),
        (
            {"apiVersion": EXEC_API_V1, "command": "x", "interactiveMode": "Always"},
            None,
            "without a terminal",
        ),
        (
            {"apiVersion": EXEC_API_V1, "command": "x", "interactiveMode": "Sometimes"},
            None,
            "not one of",
        ),
    ],
)
def test_bad_exec_settings_name_the_field(
    tmp_path: Path, exec_cfg: dict[str, Any], field: str | None, words: str
) -> None:
    err = load_error(write(tmp_path / "kc", simple(exec=exec_cfg)))
    expected = "users[name=u].user.exec" + (f".{field}" if field else "")
    assert err.field == expected
    assert words in str(err)


def test_errors_never_leak_library_exceptions(tmp_path: Path) -> None:
    """Garbage in every position produces ConfigError, not yaml/base64/ssl tracebacks."""
    docs = [
        "{{{{",
        "clusters: !!python/object:os.system {}",
        simple(**{"client-key-data": "QQ==", "client-certificate-data": "QQ=="}),
        simple(**{"client-key-data": "%%%", "client-certificate-data": "QQ=="}),
    ]
    for i, doc in enumerate(docs):
        with pytest.raises(ConfigError):
            load_kubeconfig(write(tmp_path / f"kc{i}", doc))


# --- ClientConfig and ExecConfig built directly --------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"server": "localhost:6443"}, "https://"),
        ({"server": "https://h", "namespace": ""}, "namespace"),
        ({"server": "https://h", "client_cert_data": b"c"}, "both its certificate and its key"),
        ({"server": "https://h", "insecure_skip_tls_verify": True, "ca_data": b"x"}, "remove one"),
        ({"server": "https://h", "impersonate_groups": ("g",)}, "impersonate_user"),
        (
            {"server": "https://h", "token": "t", "exec": ExecConfig(command="x")},
            "keep one",
        ),
    ],
)
def test_client_config_validates_on_construction(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        ClientConfig(**kwargs)


def test_client_config_repr_hides_secrets() -> None:
    cfg = ClientConfig(
        server="https://h", token="s3cret", client_cert_data=b"c", client_key_data=b"k3y"
    )
    assert "s3cret" not in repr(cfg)
    assert "k3y" not in repr(cfg)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"command": ""}, "empty"),
        ({"command": "x", "api_version": "client.authentication.k8s.io/v1alpha1"}, "removed"),
        ({"command": "x", "timeout": 0}, "positive"),
        ({"command": "x", "interactive_mode": "Always"}, "terminal"),
    ],
)
def test_exec_config_validates_on_construction(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        ExecConfig(**kwargs)
