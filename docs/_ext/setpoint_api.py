"""Sphinx extension: the API reference, generated from setpoint's public surface at build time.

The reference follows the code without edits: when a name joins or leaves
``setpoint.__all__``, ``setpoint.testing.__all__`` or the ``__all__`` of a subpackage,
the next build documents it or drops it.

Expected Flow:
    1. :func:`collect` imports every surface (``setpoint``, ``setpoint.testing``, then
       each subpackage of ``setpoint`` that declares ``__all__``; ``setpoint.cli`` is
       the command line, documented in the guides) and gives each distinct object one
       canonical name: its top-level name when ``setpoint`` exports it, else
       ``<surface>.<name>``.
    2. :func:`write_pages` writes ``api/<area>.rst`` (one page per area, such as
       ``client`` or ``controller``, with an autodoc entry, and so an anchor, for each
       canonical name) and ``api/index.rst`` (every public name of every surface,
       linking to its entry). ``api/`` is generated and ignored by git.
    3. :func:`resolve_alias` answers references Sphinx cannot resolve by itself: a name
       spelled through another surface (``setpoint.client.Client``) or through its
       defining module (``setpoint.client.client.Client``, as type annotations spell
       it) is sent to the canonical entry.

Guarantees:
    - Every public name of every surface has an anchor in the reference and a row in
      the index.
    - A reference that no alias explains stays unresolved, so the strict build fails on
      it (``nitpicky``): broken references in docstrings cannot hide.

Caveats:
    - Objects that are not classes, functions or modules (type aliases, constants) are
      documented as data; their docstring is the attribute docstring next to them, when
      autodoc can find one.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from docutils import nodes
from sphinx import addnodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

__all__ = ["Entry", "collect", "resolve_alias", "setup", "write_pages"]

TOP = "setpoint"
FIRST_SURFACES = ("setpoint", "setpoint.testing")
# The typed built-in kinds (decision 0032) are Kubernetes' own types, documented upstream;
# docs/guide/typed-kinds.md lists them.
EXCLUDED = ("setpoint.cli", "setpoint.api.kinds.")

AREA_TITLES = {
    "api": "Resources, kinds and object helpers (setpoint.api)",
    "cache": "Informers and the cache (setpoint.cache)",
    "client": "The client (setpoint.client)",
    "controller": "Controllers (setpoint.controller)",
    "crd": "CRD and RBAC generation (setpoint.crd)",
    "manager": "The manager (setpoint.manager)",
    "observability": "Logging, metrics and Events (setpoint.observability)",
    "testing": "The testing kit (setpoint.testing)",
}


@dataclass
class Entry:
    """One documented object: its canonical name, how to document it, and its other names."""

    canonical: str
    obj: Any
    area: str
    directive: str
    aliases: set[str] = field(default_factory=set)


def _excluded(name: str) -> bool:
    return any(name == e or name.startswith(e if e.endswith(".") else f"{e}.") for e in EXCLUDED)


def _public_module(name: str) -> bool:
    parts = name.split(".")
    return (
        not any(p.startswith("_") for p in parts)
        and not _excluded(name)
        and name not in FIRST_SURFACES
    )


def surfaces() -> list[ModuleType]:
    """The modules whose ``__all__`` make up the public API, widest first.

    ``setpoint`` and ``setpoint.testing``; then each subpackage with ``__all__``; then
    each public module with ``__all__``, for names that public signatures use but no
    package re-exports (an options class, a protocol).
    """
    found = [importlib.import_module(name) for name in FIRST_SURFACES]
    package = importlib.import_module(TOP)
    modules = sorted(
        (info for info in pkgutil.walk_packages(package.__path__, f"{TOP}.")),
        key=lambda info: (not info.ispkg, info.name),
    )
    for info in modules:
        if _public_module(info.name):
            module = importlib.import_module(info.name)
            if hasattr(module, "__all__"):
                found.append(module)
    return found


def _drop_private_bases(app: Sphinx, name: str, obj: Any, options: Any, bases: list[Any]) -> None:
    """Show only documented bases: a private base class is an implementation detail."""
    bases[:] = [
        b
        for b in bases
        if not getattr(b, "__name__", "").startswith("_")
        and not any(p.startswith("_") for p in str(getattr(b, "__module__", "")).split("."))
    ]


def _directive(obj: Any) -> str:
    if inspect.ismodule(obj):
        return "automodule"
    if inspect.isclass(obj):
        return "autoexception" if issubclass(obj, BaseException) else "autoclass"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "autofunction"
    if callable(obj) and inspect.isfunction(getattr(obj, "__wrapped__", None)):
        return "autofunction"  # a decorated function
    return "autodata"


def _area(obj: Any, surface: str) -> str:
    home = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None)
    for candidate in (home, surface):
        if isinstance(candidate, str) and candidate.startswith(f"{TOP}."):
            area = candidate.split(".")[1]
            if area in AREA_TITLES:
                return area
    return surface.split(".")[1] if "." in surface else "api"


def _identity(obj: Any) -> object:
    # Constants (strings, numbers) may be equal without being the same export.
    return id(obj) if not isinstance(obj, str | int | float | bool | tuple) else None


def collect() -> list[Entry]:
    """Every distinct public object with its canonical name and aliases."""
    # (object, name) -> its entry: the same object exported under the same name by several
    # surfaces is one entry; under another name (ControllerBuilder, Builder) it is another.
    by_identity: dict[tuple[object, str], Entry] = {}
    entries: list[Entry] = []
    for module in surfaces():
        for name in module.__all__:
            obj = getattr(module, name)
            spelled = f"{module.__name__}.{name}"
            key = _identity(obj)
            entry = by_identity.get((key, name)) if key is not None else None
            if entry is not None:
                entry.aliases.add(spelled)
                continue
            directive = _directive(obj)
            canonical = obj.__name__ if directive == "automodule" else spelled
            entry = Entry(canonical, obj, _area(obj, module.__name__), directive)
            if directive == "automodule":
                entry.aliases.add(spelled)
            home = getattr(obj, "__module__", None)
            qualname = getattr(obj, "__qualname__", None)
            if isinstance(home, str) and isinstance(qualname, str):
                entry.aliases.add(f"{home}.{qualname}")
            entry.aliases.discard(canonical)
            entries.append(entry)
            if key is not None:
                by_identity[(key, name)] = entry
    return entries


def _entry_rst(entry: Entry) -> str:
    options = {
        "automodule": [] if hasattr(entry.obj, "__all__") else ["   :members:"],
        "autoclass": ["   :members:", "   :show-inheritance:"],
        "autoexception": ["   :members:", "   :show-inheritance:"],
        "autofunction": [],
        "autodata": ["   :annotation:"],
    }[entry.directive]
    lines = [f".. {entry.directive}:: {entry.canonical}", *options, ""]
    others = sorted(a for a in entry.aliases if not a.startswith(f"{entry.canonical}."))
    exported = [a for a in others if a.count(".") <= 2 and not a.endswith(entry.canonical)]
    if exported:
        lines += ["   Also exported as " + ", ".join(f"``{a}``" for a in exported) + ".", ""]
    return "\n".join(lines)


def write_pages(entries: list[Entry], out: Path) -> None:
    """Write ``api/index.rst`` and one page per area into ``out``, only when changed."""
    out.mkdir(parents=True, exist_ok=True)
    pages: dict[str, str] = {}
    by_area: dict[str, list[Entry]] = {}
    for entry in entries:
        by_area.setdefault(entry.area, []).append(entry)
    for area, members in sorted(by_area.items()):
        title = AREA_TITLES.get(area, f"setpoint.{area}")
        body = [title, "=" * len(title), ""]
        body += [_entry_rst(e) for e in sorted(members, key=lambda e: e.canonical.lower())]
        pages[f"{area}.rst"] = "\n".join(body)
    rows: list[tuple[str, str]] = []
    for entry in entries:
        role = "py:mod" if entry.directive == "automodule" else "py:obj"
        names = {entry.canonical} | {
            a for a in entry.aliases if a.count(".") <= 2 and a.startswith(f"{TOP}.")
        }
        rows += [(name, f":{role}:`{name} <{entry.canonical}>`") for name in names]
    title = "API reference"
    index = [
        title,
        "=" * len(title),
        "",
        "Generated at build time from ``setpoint.__all__``, ``setpoint.testing.__all__``",
        "and the ``__all__`` of each subpackage. Import the top-level names as",
        "``import setpoint as sp``; the subpackages hold the rest.",
        "",
        ".. toctree::",
        "   :maxdepth: 1",
        "",
        *[f"   {area}" for area in sorted(by_area)],
        "",
        "Every public name",
        "-----------------",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "",
        "   * - name",
        "     - documented at",
    ]
    for name, link in sorted(set(rows), key=lambda r: r[0].lower()):
        index += [f"   * - ``{name}``", f"     - {link}"]
    pages["index.rst"] = "\n".join(index) + "\n"
    for name, text in pages.items():
        path = out / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    for stale in out.glob("*.rst"):
        if stale.name not in pages:
            stale.unlink()


_ALIASES: dict[str, str] = {}
_BY_SUFFIX: dict[str, set[str]] = {}
_AREAS: dict[str, str] = {}
# Names outside setpoint that annotations and docstrings spell bare; rendered as text.
_TEXT_ONLY = frozenset(dir(builtins)) | {
    "Any",
    "Self",
    "Callable",
    "Awaitable",
    "Iterable",
    "datetime",
    "timedelta",
    "Path",
}


def _module_aliases(entries: list[Entry]) -> None:
    """Map every ``<setpoint module>.<attribute>`` that holds a documented object to its entry."""
    by_identity = {id(e.obj): e for e in entries if _identity(e.obj) is not None}
    package = importlib.import_module(TOP)
    for info in pkgutil.walk_packages(package.__path__, f"{TOP}."):
        if _excluded(info.name) or info.name.endswith(".__main__"):
            continue
        module = importlib.import_module(info.name)
        _AREAS[info.name] = _area(module, info.name)
        for attr, value in vars(module).items():
            entry = by_identity.get(id(value))
            if entry is not None and not attr.startswith("__"):
                entry.aliases.add(f"{info.name}.{attr}")


_ENTRIES: list[Entry] = []


def _generate(app: Sphinx) -> None:
    entries = collect()
    _ENTRIES[:] = entries
    _module_aliases(entries)
    _ALIASES.clear()
    _BY_SUFFIX.clear()
    # An entry named as its object is named (setpoint.controller.Builder) is documented in
    # full; one under another name (setpoint.ControllerBuilder) shows "alias of". Aliases
    # go to the full one.
    for entry in sorted(entries, key=lambda e: not _own_name(e)):
        for alias in {*entry.aliases, entry.canonical}:
            if alias != entry.canonical:
                _ALIASES.setdefault(alias, entry.canonical)
            parts = alias.split(".")
            if parts[-1] != entry.canonical.rsplit(".", 1)[-1]:
                continue  # another name for it (Request for ObjectKey): not a short form
            for n in (1, 2):
                if len(parts) > n:
                    _BY_SUFFIX.setdefault(".".join(parts[-n:]), set()).add(entry.canonical)
    write_pages(entries, Path(app.srcdir) / "api")


def _own_name(entry: Entry) -> bool:
    return entry.canonical.rsplit(".", 1)[-1] == getattr(entry.obj, "__name__", None)


def _imported_names(module: ModuleType) -> dict[str, str]:
    """Names a module imports (``TYPE_CHECKING`` blocks included) and the module of each."""
    cached = _IMPORTS.get(module.__name__)
    if cached is not None:
        return cached
    found: dict[str, str] = {}
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        tree = ast.Module(body=[], type_ignores=[])
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = node.module
    _IMPORTS[module.__name__] = found
    return found


_IMPORTS: dict[str, dict[str, str]] = {}


def _canonical(target: str) -> str | None:
    """The canonical name ``target`` means, or ``None`` when no alias explains it."""
    if target in _ALIASES:
        return _ALIASES[target]
    head, _, member = target.rpartition(".")
    if head in _ALIASES:  # a member spelled through an alias: setpoint.client.Client.get
        return f"{_ALIASES[head]}.{member}"
    for key, rest in ((target, ""), (head, member)):
        short = ".".join(key.split(".")[-2:]) if key.count(".") >= 1 else key
        for candidate in (key, short):
            found = _BY_SUFFIX.get(candidate, set())
            if len(found) == 1:  # a short name (Client.get, Invalid) with one meaning
                (canonical,) = found
                return f"{canonical}.{rest}" if rest else canonical
    return None


def resolve_alias(
    app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.TextElement
) -> nodes.Element | None:
    """Resolve a Python reference spelled through an alias to the canonical entry.

    A module reference (``:mod:`setpoint.client.patch```) goes to the reference page of
    its area. Builtins, typing names and type variables render as plain text. Anything
    else that no alias explains stays unresolved (and fails the strict build).
    """
    if node.get("refdomain") != "py":
        return None
    target = str(node.get("reftarget", "")).lstrip("~.")
    if target in _TEXT_ONLY or "[" in target:  # a builtin, or a fragment of a generic
        return contnode
    if node.get("reftype") == "mod" and target in _AREAS:
        uri = app.builder.get_relative_uri(node["refdoc"], f"api/{_AREAS[target]}")
        reference = nodes.reference("", "", internal=True, refuri=uri)
        reference += contnode
        return reference
    if " / " in target:  # "Conflict / Invalid: ..." in an Errors section: link each
        parts = [p.strip() for p in target.split(" / ")]
        linked = []
        for part in parts:
            single = node.deepcopy()
            single["reftarget"] = part
            text = nodes.literal(part, part) if isinstance(contnode, nodes.literal) else None
            resolved = resolve_alias(app, env, single, text or nodes.Text(part))
            if resolved is None:
                found = env.get_domain("py").resolve_xref(
                    env,
                    node["refdoc"],
                    app.builder,
                    node["reftype"],
                    part,
                    single,
                    text or nodes.Text(part),
                )
                if found is None:
                    return None
                resolved = found
            linked.append(resolved)
        joined = nodes.inline()
        for index, piece in enumerate(linked):
            if index:
                joined += nodes.Text(" / ")
            joined += piece
        return joined
    canonical = _canonical(target)
    if canonical is None:
        return contnode if _not_ours(target, node) else None
    domain = env.get_domain("py")
    for reftype in (node["reftype"], "obj"):
        retyped = node.deepcopy()
        retyped["reftarget"] = canonical
        resolved = domain.resolve_xref(
            env, node["refdoc"], app.builder, reftype, canonical, retyped, contnode
        )
        if resolved is not None:
            return resolved
    return None


def _lookup(target: str, node: pending_xref) -> Any:
    """The object ``target`` names, seen from the module the reference was written in."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        if obj is not None:
            return obj
    # A bare name in a signature: look in the module the documented object comes from.
    scopes: list[Any] = []
    module_name, class_name = node.get("py:module"), node.get("py:class")
    if not isinstance(module_name, str):  # in a signature: the signature names the object
        signature = node.parent
        while signature is not None and not isinstance(signature, addnodes.desc_signature):
            signature = signature.parent
        if signature is not None:
            module_name = signature.get("module")
            class_name = signature.get("class") or None
    if isinstance(module_name, str) and module_name:
        scope: Any = importlib.import_module(str(module_name))
        scopes.append(scope)
        for attr in str(class_name or "").split(".") if class_name else []:
            scope = getattr(scope, attr, None)
        home = getattr(scope, "__module__", None)
        if isinstance(home, str):
            scopes.append(importlib.import_module(home))
    for scope in scopes:
        obj = scope
        for attr in parts:
            obj = getattr(obj, attr, None)
        if obj is not None:
            return obj
    for scope in scopes:  # imported for annotations only (under TYPE_CHECKING)
        source = _imported_names(scope).get(parts[0]) if inspect.ismodule(scope) else None
        if source is not None:
            return _Imported(source)
    return None


class _Imported:
    """Stands for a name imported only for type checking: it is known only by its module."""

    def __init__(self, module: str) -> None:
        self.__module__ = module


def _not_ours(target: str, node: pending_xref) -> bool:
    """Whether ``target`` is outside setpoint's API: another package, private, or a TypeVar.

    Such names in signatures render as text. A public setpoint object that no surface
    documents is not excused: it fails the build until a module's ``__all__`` has it.
    """
    obj = _lookup(target, node)
    if obj is None:
        return False
    if isinstance(obj, TypeVar):
        return True
    home = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None)
    if not isinstance(home, str) or not (home == TOP or home.startswith(f"{TOP}.")):
        return True
    name = getattr(obj, "__name__", target.rsplit(".", 1)[-1])
    return str(name).startswith("_") or any(p.startswith("_") for p in home.split("."))


_ATTRIBUTE_KINDS = frozenset({"attribute", "data", "property"})


def _no_type_docstrings(app: Sphinx, what: str, name: str, obj: Any, *rest: Any) -> None:
    """Drop the docstring a data object inherits from its type (``dict``'s, for a mapping).

    It documents the builtin, not the constant, and is not written for this site.
    """
    lines: list[str] = rest[-1]
    if what in _ATTRIBUTE_KINDS and not inspect.isclass(obj):
        inherited = inspect.getdoc(type(obj))
        if inherited and "\n".join(lines).strip() == inspect.cleandoc(inherited).strip():
            lines[:] = []


def _napoleon_except_attributes(app: Sphinx) -> None:
    """Keep napoleon away from attribute docstrings.

    setpoint documents attributes with a sentence ("Most connections open at once: ...");
    napoleon would read everything before the first colon as the attribute's type.
    """
    from sphinx.ext import napoleon

    listeners = app.events.listeners["autodoc-process-docstring"]
    for listener in list(listeners):
        if listener.handler is napoleon._process_docstring:
            app.disconnect(listener.id)

            def process(app: Sphinx, what: str, *args: Any) -> None:
                if what not in _ATTRIBUTE_KINDS:
                    napoleon._process_docstring(app, what, *args)

            app.connect("autodoc-process-docstring", process)


def _check_every_name_documented(app: Sphinx, env: BuildEnvironment) -> None:
    """Fail the build when a public name got no entry (an autodoc import that failed, say).

    Every name of every surface must resolve to an object the Python domain knows, by its
    canonical name or through an alias, so the index's links all land.
    """
    domain = env.get_domain("py")
    known = {name for name, *_ in domain.get_objects()}
    for entry in _ENTRIES:
        if entry.canonical not in known:
            _logger.warning(
                "public name %s has no entry in the API reference",
                entry.canonical,
                type="setpoint",
                subtype="api",
            )


_logger = logging.getLogger(__name__)


class RepositoryLinks(SphinxPostTransform):
    """Links from a guide to a file of the repository outside ``docs/`` become its path.

    The site serves ``docs/`` only; on GitHub the same Markdown link opens the file. A
    link whose file does not exist is left alone, so MyST reports it and the build fails.
    """

    default_priority = 8  # before MyST resolves (and reports) document links

    def run(self, **kwargs: Any) -> None:
        """Replace each such reference with the file's repository path as code."""
        srcdir = Path(self.app.srcdir).resolve()
        root = srcdir.parent
        for node in list(self.document.findall(pending_xref)):
            if node.get("reftype") != "myst" or node.get("refdomain") != "doc":
                continue
            target = Path(str(node["reftarget"]))
            if not target.is_absolute() or target.resolve().is_relative_to(srcdir):
                continue
            candidates = [target.with_suffix(s) for s in (".md", ".rst", "")] + [target]
            found = next((c for c in candidates if c.exists()), None)
            if found is None or not found.resolve().is_relative_to(root):
                continue
            shown = found.resolve().relative_to(root).as_posix()
            node.replace_self(nodes.literal(shown, shown))


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the generator and the alias resolver."""
    app.setup_extension("sphinx.ext.napoleon")
    app.connect("builder-inited", _napoleon_except_attributes)
    app.connect("builder-inited", _generate)
    app.connect("missing-reference", resolve_alias)
    app.connect("autodoc-process-bases", _drop_private_bases)
    app.connect("autodoc-process-docstring", _no_type_docstrings)
    app.add_post_transform(RepositoryLinks)
    app.connect("env-check-consistency", _check_every_name_documented)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
