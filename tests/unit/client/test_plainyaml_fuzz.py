"""The kubeconfig's YAML fast path against PyYAML: the same value, or it declines.

``setpoint.client._plainyaml.load`` reads the plain YAML that kubectl, kind and PyYAML write
so that an operator's start does not import PyYAML. Its promise: whenever it returns a value,
PyYAML's loader (the kubeconfig's, dates as strings) returns the same value for the same text;
anything else it declines. Documents come from random trees dumped by PyYAML in several styles
(block, flow, quoted, narrow lines, indented sequences) and from random edits of those.
SETPOINT_FUZZ_EXAMPLES sets the number of examples (small in CI; ``make fuzz`` runs thousands).
"""

from __future__ import annotations

import operator
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setpoint.client import _plainyaml
from setpoint.client.kubeconfig import _yaml_loader, load_kubeconfig_data

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "100"))

TRICKY = [
    *("yes", "No", "ON", "off", "y", "n", "true", "False", "null", "NULL", "~", ""),
    *("0", "007", "0x1f", "1_000", "1:30", "-1", "+1", "1.5", ".5", ".inf", "-.inf", ".NaN"),
    *("2001-12-14", "2001-12-14t21:59:43.10-05:00", "<<", "=", "-", "--", "---", "...", "?"),
    *("a: b", "a #b", "a#b", "#c", "a:", ":a", "- a", "[x]", "{x}", "{}", "[]", "'q'", '"d"'),
    *("it's", 'say "hi"', "back\\slash", " lead", "trail ", "two  spaces", "tab\there"),
    *("https://127.0.0.1:6443", "client.authentication.k8s.io/v1", "LS0tLS1CRUdJTi0tLS0t"),
    *("line\nbreak", "ünïcode", "\x07bell", "\x7f", "@at", "`tick", "%pct", "!tag", "&a", "*a"),
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.sampled_from(TRICKY),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
    st.text(max_size=6),
)
keys = st.one_of(st.sampled_from(TRICKY), st.text(max_size=8), st.integers(-5, 5), st.booleans())
trees = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


class _IndentedDumper(yaml.SafeDumper):
    """Writes sequences indented under their key (``key:\\n  - a``), as some tools do."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _pyyaml(text: str) -> tuple[bool, Any]:
    try:
        return True, yaml.load(text, Loader=_yaml_loader())
    except Exception as e:  # any refusal counts as "PyYAML has no value"
        return False, e


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (``1 == True`` does not count)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            _same(k1, k2) and _same(v1, v2)
            for (k1, v1), (k2, v2) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _check(text: str) -> bool:
    """Assert the promise for ``text``; True when the fast path gave a value."""
    got = _plainyaml.load(text)
    if got is _plainyaml.DECLINED:
        return False
    ok, expected = _pyyaml(text)
    assert ok, f"fast path read {got!r} where PyYAML refuses ({expected!r}):\n{text}"
    assert _same(got, expected), f"fast path {got!r} != PyYAML {expected!r}:\n{text}"
    return True


@st.composite
def documents(draw: st.DrawFn) -> str:
    tree = draw(st.one_of(trees, st.dictionaries(keys, trees, min_size=1, max_size=5)))
    dumper = draw(st.sampled_from([yaml.SafeDumper, _IndentedDumper]))
    return yaml.dump(
        tree,
        Dumper=dumper,
        default_flow_style=draw(st.sampled_from([False, False, None, True])),
        default_style=draw(st.sampled_from([None, None, "'", '"'])),
        indent=draw(st.integers(2, 5)),
        width=draw(st.sampled_from([12, 40, 80, 10_000])),
        allow_unicode=draw(st.booleans()),
        sort_keys=draw(st.booleans()),
        explicit_start=draw(st.booleans()),
    )


# What kubeconfigs hold: names, URLs, base64, flags; numbers, booleans and nulls; quotes.
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _words(rest: str, size: int) -> st.SearchStrategy[str]:
    """A letter, then up to ``size`` characters of ``rest``."""
    return st.builds(operator.add, st.sampled_from(LETTERS), st.text(rest, max_size=size))


words = _words("".join(chr(c) for c in range(32, 127) if chr(c) != "\\"), 30)
names = _words(LETTERS + "0123456789_.-", 12)
plain_trees = st.recursive(
    st.one_of(words, st.integers(0, 2**40), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=4)),
    max_leaves=8,
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(documents())
def test_dumped_documents_read_as_pyyaml_reads_them(text: str) -> None:
    _check(text)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.dictionaries(names, plain_trees, min_size=1, max_size=4),
    st.sampled_from([yaml.SafeDumper, _IndentedDumper]),
    st.integers(2, 4),
)
def test_kubeconfig_like_documents_take_the_fast_path(
    tree: dict[str, Any], dumper: type[yaml.SafeDumper], indent: int
) -> None:
    """Block style, printable ASCII without escapes: always read, and read as PyYAML reads it."""
    text = yaml.dump(tree, Dumper=dumper, default_flow_style=False, indent=indent, width=10_000)
    assert _check(text), f"declined:\n{text}"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(documents(), st.data())
def test_edited_documents_read_as_pyyaml_reads_them_or_decline(text: str, data: Any) -> None:
    """Random edits: lines dropped, re-indented or given stray characters."""
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        edit = data.draw(st.sampled_from(["drop", "indent", "dedent", "insert", "dup"]))
        if edit == "drop":
            del lines[i]
        elif edit == "indent":
            lines[i] = " " * data.draw(st.integers(1, 3)) + lines[i]
        elif edit == "dedent":
            lines[i] = lines[i][data.draw(st.integers(1, 3)) :]
        elif edit == "insert":
            at = data.draw(st.integers(0, len(lines[i])))
            piece = data.draw(st.sampled_from([": ", " #", "-", "- ", "'", '"', ":", "\t", "\r"]))
            lines[i] = lines[i][:at] + piece + lines[i][at:]
        else:
            lines.insert(i, lines[i])
        if not lines:
            lines = [""]
    _check("\n".join(lines))


KUBECTL = """\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQ=
    server: https://127.0.0.1:6443
  name: kind-kind
- cluster:
    insecure-skip-tls-verify: true
    proxy-url: socks5://localhost:1080
    server: https://api.example.com
    tls-server-name: api.internal
  name: prod
contexts:
- context:
    cluster: kind-kind
    namespace: default
    user: kind-kind
  name: kind-kind
current-context: kind-kind
kind: Config
preferences: {}
users:
- name: kind-kind
  user:
    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==
- name: gke
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      args:
      - --use_application_default_credentials
      command: gke-gcloud-auth-plugin
      env: null
      installHint: "Install gke-gcloud-auth-plugin for use with kubectl by following
        https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl#install_plugin"
      interactiveMode: IfAvailable
      provideClusterInfo: true
- name: eks
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      args:
        - eks
        - get-token
        - --cluster-name
        - demo
      command: aws
      env:
        - name: AWS_PROFILE
          value: 'dev'
"""


def _without_install_hint() -> str:
    return "\n".join(
        line
        for line in KUBECTL.split("\n")
        if "installHint" not in line and "cloud.google" not in line
    )


def test_the_kubeconfigs_tools_write_are_read_without_pyyaml() -> None:
    """kubectl's and PyYAML's layouts take the fast path, and it reads them as PyYAML does.

    The gke user's multi-line quoted installHint is the exception that declines: the whole
    file then goes to PyYAML, so it is checked without that user too.
    """
    assert _plainyaml.load(KUBECTL) is _plainyaml.DECLINED
    without_hint = _without_install_hint()
    assert _check(without_hint)
    assert _check(yaml.safe_dump(yaml.safe_load(without_hint), sort_keys=False))
    assert _check(yaml.dump(yaml.safe_load(without_hint), Dumper=_IndentedDumper))


@pytest.mark.parametrize(
    ("text", "fast"),
    [
        ("a: 1\nb: true\nc: null\nd: ~\ne:\nf: ''\ng: \"x\"\n", True),
        ("a:\n- 1\n-\n  b: c\n", True),
        ("a:\n- - nested\n  - more\n- x\n", True),
        ("key: it''s\n", True),
        ("k: 'it''s' # comment\n", True),
        ("'quoted key': v\n\"k2\": w\n", True),
        ("# only a comment\n", True),
        ("", True),
        ("a: yes\n", False),
        ("a: b\n  c\n", False),
        ("a: |\n  x\n", False),
        ('a: "x\\ny"\n', False),
        ("a: 1\r\nb: 2\r\n", True),
        ("a: 0777\n", False),
    ],
)
def test_small_documents(text: str, fast: bool) -> None:
    """Corners: read as PyYAML reads them, or declined where the reader says it declines."""
    assert _check(text) is fast


def test_an_operator_reading_a_plain_kubeconfig_never_imports_pyyaml(tmp_path: Any) -> None:
    """The start-up cost this exists to save: no ``yaml`` module after loading a kubeconfig."""
    path = tmp_path / "config"
    path.write_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            clusters:
            - cluster:
                insecure-skip-tls-verify: true
                server: https://127.0.0.1:6443
              name: local
            contexts:
            - context:
                cluster: local
                namespace: default
                user: admin
              name: local
            current-context: local
            kind: Config
            preferences: {}
            users:
            - name: admin
              user:
                token: abc.def
            """
        )
    )
    code = textwrap.dedent(
        f"""
        import sys
        from setpoint.client.kubeconfig import load_kubeconfig
        config = load_kubeconfig({str(path)!r})
        assert config.server == "https://127.0.0.1:6443", config.server
        print("yaml" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_declined_documents_still_load_through_pyyaml() -> None:
    """The fallback path: an anchor makes the fast path decline, the loader still reads it."""
    text = textwrap.dedent(
        """\
        clusters:
        - name: c
          cluster: &c
            server: https://h
        contexts:
        - name: x
          context: {cluster: c, user: u}
        users:
        - name: u
          user: {token: t}
        current-context: x
        """
    )
    assert _plainyaml.load(text) is _plainyaml.DECLINED
    assert load_kubeconfig_data(text).server == "https://h"
