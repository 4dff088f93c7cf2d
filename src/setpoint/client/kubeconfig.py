"""Reading, merging and resolving kubeconfig files: :func:`load_kubeconfig`, :func:`load_config`.

The rules are kubectl's (``clientcmd``'s loading rules):

* ``$KUBECONFIG`` is a list of files. Missing ones are skipped (with a
  warning); a file that exists but does not parse is an error.
* Merging: the first file to define a cluster, context or user *name* wins, and
  its whole entry is used (a later file's entry of the same name is ignored,
  even fields the first one lacks). ``current-context`` comes from the first
  file that sets it.
* Relative paths (``certificate-authority``, ``client-certificate``,
  ``client-key``, ``tokenFile``, and an exec ``command`` containing a ``/``)
  resolve against the directory of the file that holds the entry.
* ``*-data`` fields are base64; the plain fields are file paths. When both are
  given, the data wins, as in client-go.

Only the chosen context's cluster and user are validated field by field; other
entries need only be well-formed lists of named mappings.

Untrusted kubeconfigs. A kubeconfig is code execution (``exec`` plugins run a command) and
a local-file read (``tokenFile``, certificate and key paths: a path such as the pod's own
service-account token would hand this process's identity to whoever wrote the file).
:func:`load_kubeconfig_data` therefore loads in *restricted* mode by default: no ``exec``,
no file references, inline ``*-data``, ``token`` and plain settings only; so does
:func:`kubeconfig_from_secret`, for kubeconfigs kept in the cluster (multi-cluster
operators). The operator's own configuration (:func:`load_kubeconfig`, :func:`load_config`)
is trusted, as with kubectl.

Hostile input never hangs or crashes the loader: YAML aliases that expand to a huge or
self-referential document, deep nesting, values of the wrong type and non-JSON YAML types
(``!!binary``, ``!!set``) end in a :class:`~setpoint.client.config.ConfigError` naming the
field. Messages name the types of wrong values, never the values (a misplaced token must not
be echoed). Dates are read as strings, as client-go reads them.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from setpoint.api.redaction import brief
from setpoint.client.config import (
    _EXEC_API_VERSIONS,
    EXEC_API_V1,
    ClientConfig,
    ConfigError,
    ExecConfig,
    _default_kubeconfig,
    _normalize_server,
    load_incluster_config,
)
from setpoint.tls.pem import load_ca, load_cert_chain, os_reason, ssl_reason

if TYPE_CHECKING:
    from setpoint.client.protocols import Reader

__all__ = [
    "MAX_KUBECONFIG_DEPTH",
    "MAX_KUBECONFIG_VALUES",
    "kubeconfig_from_secret",
    "load_config",
    "load_kubeconfig",
    "load_kubeconfig_data",
]

_log = logging.getLogger("setpoint.client.config")

_EXEC_EXTENSION = "client.authentication.k8s.io/exec"

MAX_KUBECONFIG_VALUES = 200_000
"""Most values (mappings, lists and scalars, counted as if YAML aliases were expanded) a
kubeconfig may hold. A kubeconfig with a thousand contexts holds a few tens of thousands; a
"billion laughs" document of nested aliases stops here instead of eating CPU and memory."""

MAX_KUBECONFIG_DEPTH = 64
"""Deepest nesting of mappings and lists accepted (a self-referential alias stops here too)."""

_FILE_FIELDS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")


@dataclass(frozen=True)
class _Origin:
    """A candidate kubeconfig file, why it was chosen and how to point elsewhere (for errors)."""

    path: Path
    why: str
    fix: str = "point $KUBECONFIG at an existing kubeconfig"


@dataclass(frozen=True)
class _Source:
    """Where a kubeconfig document came from and how far it is trusted."""

    label: str
    """The file path, or a description (``Secret ns/name, key value``), for messages."""
    base_dir: Path
    """Relative file references resolve against this directory."""
    restricted: bool
    """No exec plugins and no file references (see the module docstring)."""


class _Node:
    """A mapping from one kubeconfig, with its field path for error messages."""

    def __init__(self, source: _Source, path: str, value: dict[str, Any]) -> None:
        self.source = source
        self.file = source.label
        self.path = path
        self.value = value

    def sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def fail(self, key: str | None, message: str) -> NoReturn:
        # "from None": a wrapped yaml/base64/OS error must not show up as a chained traceback.
        raise ConfigError(
            message, file=self.file, field=self.sub(key) if key else self.path
        ) from None

    def text(self, key: str, *, required: bool = False) -> str | None:
        value = self.value.get(key)
        if value is None or value == "":
            if required:
                self.fail(key, "is missing or empty")
            return None
        if not isinstance(value, str):
            # The type only: the value may be a token or key data pasted in the wrong place.
            self.fail(key, f"must be a string, got {_kind(value)}")
        return value

    def flag(self, key: str) -> bool:
        value = self.value.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {_kind(value)}")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.value.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fail(key, f"must be a list of strings, got {_kind(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.fail(f"{key}[{i}]", f"must be a string, got {_kind(item)}")
        return tuple(value)

    def child(self, key: str) -> _Node | None:
        value = self.value.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping, got {_kind(value)}")
        return _Node(self.source, self.sub(key), value)

    def file_or_data(self, key: str) -> tuple[bytes, str] | None:
        """Read ``<key>-data`` (base64) or else the file ``<key>``; return bytes and field path."""
        data_key = f"{key}-data"
        data = self.text(data_key)
        if data is not None:
            try:
                # Go's decoder skips newlines; people paste wrapped base64.
                return base64.b64decode("".join(data.split()), validate=True), self.sub(data_key)
            except (binascii.Error, ValueError):
                self.fail(
                    data_key,
                    "is not valid base64; it must hold the base64 of the PEM file "
                    f"(e.g. `base64 -w0 file.pem`), or use {key}: <path> instead",
                )
        name = self.text(key)
        if name is None:
            return None
        self.refuse_file_reference(key)
        return _read_ref(self, key, _resolve(self.source.base_dir, name)), self.sub(key)

    def refuse_file_reference(self, key: str) -> None:
        if self.source.restricted:
            inline = "token" if key == "tokenFile" else f"{key}-data"
            self.fail(
                key,
                "is a file reference, which a restricted kubeconfig may not use (it comes "
                "from outside this operator's own configuration, and would read a local "
                f"file); put the content inline as {inline}",
            )


CONTEXT_ARGUMENT = "context=..."
"""How a library caller picks a context; the default ``context_option`` of the loaders."""

PATH_ARGUMENT = "path=..."
"""How a library caller names a kubeconfig file; the default ``path_option`` of
:func:`load_kubeconfig`."""


def load_kubeconfig(
    path: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    context_option: str = CONTEXT_ARGUMENT,
    path_option: str = PATH_ARGUMENT,
) -> ClientConfig:
    """Load a :class:`~setpoint.client.config.ClientConfig` from kubeconfig files, as kubectl does.

    ``path`` is one file. ``None`` means ``$KUBECONFIG`` (a ``:``-separated list,
    merged with kubectl's rules: the first file to define a name or
    ``current-context`` wins, missing files are skipped) or else ``~/.kube/config``.
    ``context`` overrides ``current-context``. ``context_option`` is how the caller's user
    passes a context, named in messages about contexts (``"--context NAME"`` for a
    command line; the default ``"context=..."`` for Python callers); ``path_option``
    likewise names how ``path`` was given (``"--kubeconfig"``; ``"path=..."``).

    Relative file paths in a kubeconfig resolve against that file's directory.
    Referenced files are read (and certificates parsed) now, so mistakes show
    up at start-up; only the token file is read again later, as it rotates.

    Raises:
        ConfigError: naming the file, the field path and what to do.

    """
    files = [_read_file(origin) for origin in _existing(_candidates(path, path_option))]
    return _resolve_config(files, context, context_option)


def load_kubeconfig_data(
    data: str | bytes,
    *,
    context: str | None = None,
    source: str = "kubeconfig data",
    restricted: bool = True,
) -> ClientConfig:
    """Load a :class:`~setpoint.client.config.ClientConfig` from kubeconfig content in memory.

    For kubeconfigs that do not come from this operator's own configuration (a Secret, a
    custom resource, an upload), so ``restricted`` is on by default: ``exec`` plugins and
    file references (``tokenFile``, ``certificate-authority``, ``client-certificate``,
    ``client-key``) are refused with a :class:`~setpoint.client.config.ConfigError`, and
    only inline data is used. Turn it off only for content as trusted as a file in
    ``$KUBECONFIG``; relative paths then resolve against the current directory.

    ``source`` names the content in error messages (``Secret tenants/prod-kubeconfig``).

    Raises:
        ConfigError: naming ``source``, the field path and what to do.

    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError("is not UTF-8 text; a kubeconfig is YAML", file=source) from None
    else:
        text = data
    origin = _Source(source, Path.cwd(), restricted)
    return _resolve_config([_parse(text, origin)], context, CONTEXT_ARGUMENT)


async def kubeconfig_from_secret(
    reader: Reader,
    name: str,
    *,
    namespace: str,
    key: str = "value",
    context: str | None = None,
    restricted: bool = True,
) -> ClientConfig:
    """Load the kubeconfig stored under ``key`` of Secret ``namespace/name``, restricted.

    The default key ``value`` is Cluster API's (``<cluster>-kubeconfig`` Secrets). Anyone who
    can write that Secret chooses what this process connects to and how it authenticates,
    so the kubeconfig is loaded in restricted mode (see :func:`load_kubeconfig_data`) unless
    ``restricted=False`` is passed deliberately.

    Raises:
        ConfigError: the Secret has no such key, it is not base64, or the kubeconfig is not
            usable (naming the Secret, the key and the field).
        NotFound: the Secret does not exist (from ``reader.get``).

    """
    from setpoint.api.kinds import Secret

    where = f"Secret {namespace}/{name}, key {key}"
    secret = await reader.get(Secret, name, namespace=namespace)
    data = secret.get("data") if isinstance(secret, dict) else None
    encoded = data.get(key) if isinstance(data, dict) else None
    if not isinstance(encoded, str):
        keys = sorted(data) if isinstance(data, dict) else []
        raise ConfigError(
            f"the Secret has no data key {key!r} (it has: {', '.join(keys) or 'none'}); "
            "pass key=... naming the key that holds the kubeconfig",
            file=where,
        )
    try:
        content = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("is not valid base64", file=where) from None
    return load_kubeconfig_data(content, context=context, source=where, restricted=restricted)


def load_config(
    *, context: str | None = None, context_option: str = CONTEXT_ARGUMENT
) -> ClientConfig:
    """Find the config an operator should use wherever it runs.

    In order: ``$KUBECONFIG`` when set, ``~/.kube/config`` when it exists, the
    pod's service account when ``$KUBERNETES_SERVICE_HOST`` is set. ``context_option`` is
    as for :func:`load_kubeconfig`.

    Raises:
        ConfigError: from the source that was chosen, or listing every place
            looked at when none applies.

    """
    looked: list[str] = []
    if os.environ.get("KUBECONFIG", ""):
        return load_kubeconfig(context=context, context_option=context_option)
    looked.append("$KUBECONFIG (not set)")
    default = _default_kubeconfig()
    if default is not None and default.is_file():
        return load_kubeconfig(context=context, context_option=context_option)
    looked.append(f"{default or '~/.kube/config'} (does not exist)")
    if os.environ.get("KUBERNETES_SERVICE_HOST", ""):
        if context is not None:
            raise ConfigError(
                f"context {context!r} was asked for, but there is no kubeconfig (looked at "
                f"{', '.join(looked)}) and in-cluster config has no contexts"
            )
        return load_incluster_config()
    looked.append("in-cluster service account ($KUBERNETES_SERVICE_HOST not set)")
    raise ConfigError(
        f"no Kubernetes configuration found; looked at: {'; '.join(looked)}. Set $KUBECONFIG, "
        "create ~/.kube/config (e.g. with `kind create cluster` or your cloud CLI), "
        "or run inside a pod"
    )


def _candidates(path: str | os.PathLike[str] | None, path_option: str) -> list[_Origin]:
    if path is not None:
        fix = f"make {path_option} name an existing kubeconfig file"
        return [_Origin(Path(path), f"given as {path_option}", fix)]
    env = os.environ.get("KUBECONFIG", "")
    if env:
        seen: list[_Origin] = []
        for item in env.split(os.pathsep):
            if item and all(o.path != Path(item) for o in seen):
                seen.append(_Origin(Path(item), "listed in $KUBECONFIG"))
        if seen:
            return seen
    default = _default_kubeconfig()
    if default is None:
        raise ConfigError(
            "$KUBECONFIG is not set and there is no home directory to find ~/.kube/config in; "
            "set $KUBECONFIG or $HOME"
        )
    return [
        _Origin(
            default,
            "the default location, used because $KUBECONFIG is not set",
            "set $KUBECONFIG to an existing kubeconfig",
        )
    ]


def _existing(origins: list[_Origin]) -> list[_Origin]:
    """Keep the origins whose files exist; missing ones are skipped only in a list."""
    found = [o for o in origins if o.path.exists()]
    if found:
        for o in origins:
            if o not in found:
                _log.warning("kubeconfig %s (%s) does not exist; skipping it", o.path, o.why)
        return found
    if len(origins) == 1:
        o = origins[0]
        raise ConfigError(
            f"kubeconfig file {o.path} does not exist ({o.why}); create it, or {o.fix}"
        )
    listed = ", ".join(str(o.path) for o in origins)
    raise ConfigError(
        f"none of the kubeconfig files listed in $KUBECONFIG exists ({listed}); fix $KUBECONFIG "
        "or unset it to use ~/.kube/config"
    )


@dataclass(frozen=True)
class _File:
    """One parsed kubeconfig file, its named entries checked for shape."""

    label: str
    current_context: str | None
    clusters: dict[str, _Node]
    contexts: dict[str, _Node]
    users: dict[str, _Node]


def _read_file(origin: _Origin) -> _File:
    path = origin.path
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"kubeconfig file {path} ({origin.why}) cannot be read: {os_reason(e)}"
        ) from None
    return _parse(text, _Source(str(path), path.parent, restricted=False))


_loader_class: Any = None


def _yaml_loader() -> Any:
    """The safe YAML loader, without timestamp resolution.

    client-go reads dates as strings: a date in an exec extension must reach the plugin as
    the text it was, not as a value JSON cannot encode.
    """
    global _loader_class  # noqa: PLW0603 - built once, on first use
    if _loader_class is None:
        # Imported here: YAML parsing costs ~20 ms of import time that an in-cluster
        # operator never needs.
        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        resolvers = {
            first: [(tag, rx) for tag, rx in entries if tag != "tag:yaml.org,2002:timestamp"]
            for first, entries in base.yaml_implicit_resolvers.items()
        }
        loader: Any = type("KubeconfigLoader", (base,), {"yaml_implicit_resolvers": resolvers})
        # An explicit !!timestamp stays text as well (PyYAML's own constructor also fails
        # with an AttributeError on a value that only looks like a date).
        loader.add_constructor("tag:yaml.org,2002:timestamp", base.construct_yaml_str)
        _loader_class = loader
    return _loader_class


def _parse(text: str, source: _Source) -> _File:
    doc = _load_yaml(text, source)
    if doc is None:  # an empty file is an empty config, as for kubectl
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(
            f"the top level must be a mapping with clusters, contexts and users, got {_kind(doc)}",
            file=source.label,
        )
    _check_document(doc, source.label)
    root = _Node(source, "", doc)
    return _File(
        label=source.label,
        current_context=root.text("current-context"),
        clusters=_named(root, "clusters", "cluster"),
        contexts=_named(root, "contexts", "context"),
        users=_named(root, "users", "user"),
    )


def _load_yaml(text: str, source: _Source) -> Any:
    """``text`` read by PyYAML's C loader (libyaml), or a ConfigError saying where.

    The loader builds no Python objects beyond the document's own values: an alias is a
    second reference to the same object, never a copy, so :func:`_check_document` (which
    counts values as if aliases were expanded) stops a "billion laughs" document before
    anything walks it in full.
    """
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())  # a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise ConfigError(
            f"not valid YAML at {where}{str(problem)[:200]}; fix the syntax there",
            file=source.label,
        ) from None
    except RecursionError:
        raise ConfigError("is nested too deeply to be a kubeconfig", file=source.label) from None
    except Exception as e:  # PyYAML's constructors raise ValueError, AttributeError &c.
        # An explicit tag with a value it cannot take (``!!int x``, ``!!float ?``).
        raise ConfigError(
            f"holds a YAML value that cannot be read ({type(e).__name__}: an explicit tag "
            "such as !!int or !!float with a value it cannot take?)",
            file=source.label,
        ) from None


def _check_document(doc: dict[str, Any], label: str) -> None:
    """Refuse documents too big (aliases expanded), too deep, or holding non-JSON values.

    Iterative and bounded by :data:`MAX_KUBECONFIG_VALUES`: a self-referential alias or a
    "billion laughs" document stops at the limit instead of recursing or expanding.
    """
    count = 0
    stack: list[tuple[Any, int, str]] = [(doc, 0, "")]
    while stack:
        value, depth, path = stack.pop()
        count += 1
        if count > MAX_KUBECONFIG_VALUES:
            raise ConfigError(
                f"holds more than {MAX_KUBECONFIG_VALUES} values when its YAML aliases are "
                "expanded; a kubeconfig never needs that many (aliases nested to blow up?)",
                file=label,
            )
        if depth > MAX_KUBECONFIG_DEPTH:
            raise ConfigError(
                f"is nested more than {MAX_KUBECONFIG_DEPTH} levels deep (a self-referential "
                "YAML alias?)",
                file=label,
                field=path or None,
            )
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    raise ConfigError(
                        f"has a mapping key of type {type(key).__name__}; keys are strings",
                        file=label,
                        field=path or None,
                    )
                stack.append((item, depth + 1, f"{path}.{key}" if path else str(key)))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            if not -(2**63) <= value < 2**63:
                raise ConfigError(
                    "holds an integer outside the 64-bit range", file=label, field=path or None
                )
        elif not isinstance(value, (str, float, bool)) and value is not None:
            raise ConfigError(
                f"holds a YAML value of type {type(value).__name__} (an explicit tag such as "
                "!!binary, !!set or !!timestamp?); kubeconfig values are strings, numbers, "
                "booleans, lists and mappings",
                file=label,
                field=path or None,
            )


def _named(root: _Node, list_key: str, inner_key: str) -> dict[str, _Node]:
    """``clusters: [{name: a, cluster: {...}}]`` as ``{"a": node at clusters[name=a].cluster}``."""
    items = root.value.get(list_key)
    if items is None:
        return {}
    if not isinstance(items, list):
        root.fail(
            list_key, f"must be a list of {{name: ..., {inner_key}: ...}}, got {_kind(items)}"
        )
    out: dict[str, _Node] = {}
    for i, item in enumerate(items):
        at = f"{list_key}[{i}]"
        if not isinstance(item, dict):
            root.fail(at, f"must be a mapping with name and {inner_key}, got {_kind(item)}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            root.fail(f"{at}.name", f"must be a non-empty string, got {_kind(name)}")
        if name in out:
            # client-go refuses duplicate names within one file as well.
            root.fail(f"{list_key}[name={name}]", "appears more than once; names must be unique")
        entry = _Node(root.source, f"{list_key}[name={name}]", item)
        out[name] = entry.child(inner_key) or _Node(root.source, entry.sub(inner_key), {})
    return out


def _resolve_config(files: list[_File], context: str | None, context_option: str) -> ClientConfig:
    clusters: dict[str, _Node] = {}
    contexts: dict[str, _Node] = {}
    users: dict[str, _Node] = {}
    current: tuple[str, str] | None = None
    for f in files:
        for merged, mine in ((clusters, f.clusters), (contexts, f.contexts), (users, f.users)):
            for name, node in mine.items():
                merged.setdefault(name, node)
        if current is None and f.current_context:
            current = (f.current_context, f.label)
    where = ", ".join(f.label for f in files)

    if context is not None:
        ctx_name, asked_by = context, f"context {context!r} (given as {context_option})"
        asked_file, asked_field = where, None
    elif current is not None:
        ctx_name, asked_by = current[0], f"current-context {current[0]!r}"
        asked_file, asked_field = current[1], "current-context"
        asked_file, asked_field = str(current[1]), "current-context"
    elif not contexts:
        raise ConfigError(
            "defines no contexts, so there is no cluster to connect to: use a kubeconfig "
            "written for your cluster (by its tools, or by `setpoint controlplane up` for a "
            "local one)",
            file=where,
        )
    else:
        raise ConfigError(
            f"no current-context is set and no context was given: pass {context_option} "
            f"naming one of {_names(contexts)}, or run `kubectl config use-context NAME`",
            file=where,
        )
    ctx = contexts.get(ctx_name)
    if ctx is None:
        raise ConfigError(
            f"{asked_by} does not exist; known contexts: {_names(contexts)}",
            file=asked_file,
            field=asked_field,
        )
    cluster_name = ctx.text("cluster", required=True)
    assert cluster_name is not None
    cluster = clusters.get(cluster_name)
    if cluster is None:
        ctx.fail(
            "cluster",
            f"names cluster {cluster_name!r}, which does not exist; known "
            f"clusters: {_names(clusters)}",
        )
    user_name = ctx.text("user")
    user: _Node | None = None
    if user_name is not None:
        user = users.get(user_name)
        if user is None:
            ctx.fail(
                "user",
                f"names user {user_name!r}, which does not exist; known users: {_names(users)}",
            )
    source = f"kubeconfig {ctx.file} (context {ctx_name})"
    kwargs = _cluster_settings(cluster)
    if user is not None:
        kwargs.update(_user_settings(user, cluster))
    namespace = ctx.text("namespace") or "default"
    try:
        return ClientConfig(namespace=namespace, source=source, **kwargs)
    except ConfigError as e:
        # Rules that span fields (e.g. insecure-skip-tls-verify with a CA, token with exec).
        raise ConfigError(e.reason, file=ctx.file, field=ctx.path) from None


def _cluster_settings(cluster: _Node) -> dict[str, Any]:
    server = cluster.text("server")
    if server is None:
        cluster.fail("server", "is missing; set it to the API server URL, e.g. https://host:6443")
    try:
        server = _normalize_server(server)
    except ValueError as e:
        cluster.fail("server", str(e))
    out: dict[str, Any] = {
        "server": server,
        "insecure_skip_tls_verify": cluster.flag("insecure-skip-tls-verify"),
        "tls_server_name": cluster.text("tls-server-name"),
        "proxy_url": cluster.text("proxy-url"),
    }
    proxy = out["proxy_url"]
    if proxy is not None and not proxy.startswith(("http://", "https://", "socks5://")):
        cluster.fail("proxy-url", "must start with http://, https:// or socks5://")
    ca = cluster.file_or_data("certificate-authority")
    if ca is not None:
        data, field_path = ca
        try:
            load_ca(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), data)
        except (ssl.SSLError, ValueError) as e:
            raise ConfigError(
                f"is not a usable PEM certificate bundle ({ssl_reason(e)})",
                file=cluster.file,
                field=field_path,
            ) from None
        out["ca_data"] = data
    return out


def _exec_extension(cluster: _Node) -> Any:
    """Return the cluster's ``client.authentication.k8s.io/exec`` extension value, if any."""
    items = cluster.value.get("extensions")
    if items is None:
        return None
    if not isinstance(items, list):
        cluster.fail("extensions", f"must be a list of {{name, extension}}, got {_kind(items)}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            cluster.fail(f"extensions[{i}]", f"must be a mapping, got {_kind(item)}")
        if item.get("name") == _EXEC_EXTENSION:
            # Already checked to be JSON values (_check_document), so it reaches the plugin.
            return item.get("extension")
    return None


def _user_settings(user: _Node, cluster: _Node) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if user.value.get("auth-provider") is not None:
        provider = user.child("auth-provider")
        name = provider.text("name") if provider is not None else None
        user.fail(
            "auth-provider",
            f"auth-provider {name or ''!r} plugins were removed from Kubernetes clients; use the "
            "exec plugin that replaces it (gke-gcloud-auth-plugin, kubelogin, ...)",
        )
    for field_name in ("username", "password"):
        if user.value.get(field_name) is not None:
            user.fail(
                field_name,
                "basic authentication was removed in Kubernetes 1.19; use a token, "
                "a client certificate or an exec plugin",
            )
    for field_name in ("as-uid", "as-user-extra"):
        if user.value.get(field_name) is not None:
            # Dropping these silently would act with a different identity than asked.
            user.fail(
                field_name, "is not supported by setpoint yet; remove it or impersonate without it"
            )

    cert = user.file_or_data("client-certificate")
    key = user.file_or_data("client-key")
    if (cert is None) != (key is None):
        missing = "client-key" if cert is not None else "client-certificate"
        user.fail(
            None, f"has a client {'certificate' if cert else 'key'} but no {missing}[-data]; add it"
        )
    if cert is not None and key is not None:
        try:
            load_cert_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), cert[0], key[0])
        except (ssl.SSLError, ValueError, OSError) as e:
            raise ConfigError(
                f"the client certificate and key ({cert[1]}, {key[1]}) cannot be used "
                f"({ssl_reason(e)}); check that they are PEM, match each other and the key "
                "is unencrypted",
                file=user.file,
                field=user.path,
            ) from None
        out["client_cert_data"], out["client_key_data"] = cert[0], key[0]

    token = user.text("token")
    if token is not None:
        out["token"] = token
    token_file = user.text("tokenFile")
    if token_file is not None:
        user.refuse_file_reference("tokenFile")
        resolved = _resolve(user.source.base_dir, token_file)
        if not _read_ref(user, "tokenFile", resolved).strip():
            user.fail("tokenFile", f"{resolved} is empty; it must hold a bearer token")
        out["token_file"] = str(resolved)

    impersonate = user.text("as")
    if impersonate is not None:
        out["impersonate_user"] = impersonate
    groups = user.texts("as-groups")
    if groups:
        out["impersonate_groups"] = groups

    exec_node = user.child("exec")
    if exec_node is not None:
        if user.source.restricted:
            user.fail(
                "exec",
                "runs a credential plugin (a command on this machine), which a restricted "
                "kubeconfig may not use (it comes from outside this operator's own "
                "configuration); use a token or client certificate data instead",
            )
        out["exec"] = _exec_config(exec_node, cluster)
    return out


def _exec_config(node: _Node, cluster: _Node) -> ExecConfig:
    api_version = node.text("apiVersion", required=True)
    assert api_version is not None
    if api_version not in _EXEC_API_VERSIONS:
        node.fail(
            "apiVersion",
            f"{brief(api_version)} is not supported; use {_EXEC_API_VERSIONS[0]!r} or "
            f"{_EXEC_API_VERSIONS[1]!r} (v1alpha1 was removed in Kubernetes 1.24)",
        )
    command = node.text("command", required=True)
    assert command is not None
    if "/" in command and not os.path.isabs(command):
        # kubectl resolves only commands that contain a separator; a bare name
        # is looked up on $PATH.
        command = str(_resolve(node.source.base_dir, command))
    interactive = node.text("interactiveMode")
    if interactive is None:
        if api_version == EXEC_API_V1:
            node.fail(
                "interactiveMode", f"is required for {EXEC_API_V1}; set it to Never or IfAvailable"
            )
        interactive = "IfAvailable"
    env: list[tuple[str, str]] = []
    raw_env = node.value.get("env")
    if raw_env is not None:
        if not isinstance(raw_env, list):
            node.fail("env", f"must be a list of {{name, value}}, got {_kind(raw_env)}")
        for i, item in enumerate(raw_env):
            if not isinstance(item, dict):
                node.fail(f"env[{i}]", f"must be a mapping with name and value, got {_kind(item)}")
            entry = _Node(node.source, node.sub(f"env[{i}]"), item)
            name = entry.text("name", required=True)
            value = entry.text("value") or ""
            assert name is not None
            env.append((name, value))
    settings: dict[str, Any] = {
        "args": node.texts("args"),
        "install_hint": node.text("installHint"),
        "provide_cluster_info": node.flag("provideClusterInfo"),
        "cluster_config": _exec_extension(cluster),
    }
    try:
        return ExecConfig(
            command=command,
            env=tuple(env),
            api_version=api_version,
            interactive_mode=interactive,
            **settings,
        )
    except ConfigError as e:
        raise ConfigError(e.reason, file=node.file, field=node.path) from None


def _resolve(base_dir: Path, name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() else base_dir / path


def _read_ref(node: _Node, key: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        node.fail(
            key,
            f"cannot read {path}: {os_reason(e)}; fix the path (relative paths "
            f"resolve against {node.source.base_dir})",
        )


def _names(entries: dict[str, _Node]) -> str:
    return ", ".join(sorted(entries)) or "(none)"


def _kind(value: object) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)
