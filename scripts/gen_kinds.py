#!/usr/bin/env python3
"""Generate the typed built-in kinds, ``setpoint.api.kinds.<group>_<version>``.

Two steps, so that the generated code can be checked without a control plane:

``--snapshot KUBECONFIG``
    Read the API server's OpenAPI v3 documents (``/openapi/v3/<group-version>``) for
    :data:`GROUP_VERSIONS` and write the part the generator uses (schemas reachable from
    those group-versions, the first paragraph of each description, and each kind's plural,
    scope, subresources, singular and short names from discovery) to :data:`SNAPSHOT`.
(no option)
    Write the modules under ``src/setpoint/api/kinds/`` from :data:`SNAPSHOT`.
``--check``
    Exit 1 when a checked-in module differs from what the snapshot generates (the unit test
    ``tests/unit/api/test_kinds_generated.py`` does the same).

Run ``setpoint controlplane up --name kinds``, then
``python scripts/gen_kinds.py --snapshot $KUBECONFIG && python scripts/gen_kinds.py``.
Decision record: docs/decisions/0032-typed-builtin-kinds.md.
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import subprocess
import sys
import tempfile
import textwrap
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "scripts" / "kinds_openapi.json"
"""The trimmed OpenAPI v3 snapshot the modules are generated from (checked in)."""
OUT = ROOT / "src" / "setpoint" / "api" / "kinds"

GROUP_VERSIONS = (
    "v1",
    "apps/v1",
    "batch/v1",
    "networking.k8s.io/v1",
    "rbac.authorization.k8s.io/v1",
    "policy/v1",
    "autoscaling/v2",
    "coordination.k8s.io/v1",
    "storage.k8s.io/v1",
)
"""The group-versions generated (issue 30's list)."""

# Schemas that are not structs: what each becomes in Python (names from _model.py).
SCALARS = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "Quantity",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "io.k8s.apimachinery.pkg.runtime.RawExtension": "RawExtension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": "FieldsV1",
}
# setpoint's own metadata models stand for the API's (one ObjectMeta for every typed object).
OWN = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": "ObjectMeta",
    "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference": "OwnerReference",
}
# meta/v1 types an operator never builds: list and status envelopes stay out.
SKIP_SUFFIXES = ("List",)
SKIP = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.StatusDetails",
    "io.k8s.apimachinery.pkg.apis.meta.v1.StatusCause",
    "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIResource",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Preconditions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
    "io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry",
}
_REF = re.compile(r"#/components/schemas/(.+)")
_KEEP = (
    "type",
    "format",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "allOf",
    "oneOf",
    "$ref",
    "x-kubernetes-group-version-kind",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
)


# --------------------------------------------------------------------------- snapshot


def _first_paragraph(text: str) -> str:
    return text.strip().split("\n\n", 1)[0].strip()


def _trim(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_trim(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    if "description" in schema:
        out["description"] = _first_paragraph(schema["description"])
    for key in _KEEP:
        if key in schema:
            value = schema[key]
            if key == "properties":
                out[key] = {name: _trim(prop) for name, prop in value.items()}
            elif key in ("items", "additionalProperties", "allOf", "oneOf"):
                out[key] = _trim(value)
            else:
                out[key] = value
    return out


def _refs(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref":
                match = _REF.match(value)
                if match:
                    yield match.group(1)
            else:
                yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def _package_of(group_version: str) -> str:
    group, _, version = group_version.rpartition("/")
    short = group.split(".", 1)[0] if group else "core"
    return f"io.k8s.api.{short}.{version}"


def _resources(resource_list: dict[str, Any]) -> dict[str, Any]:
    """Each kind's plural, scope, subresources, singular and short names, from discovery.

    ``resource_list`` is the group-version's ``APIResourceList`` (``/apis/apps/v1``), what
    the client's RESTMapper reads too.
    """
    found: dict[str, Any] = {}
    subresources: dict[str, list[str]] = {}
    for resource in resource_list.get("resources", []):
        plural, _, sub = str(resource["name"]).partition("/")
        if sub:
            subresources.setdefault(plural, []).append(sub)
            continue
        found[resource["kind"]] = {
            "plural": plural,
            "namespaced": bool(resource["namespaced"]),
            "singular": resource.get("singularName") or resource["kind"].lower(),
            "short_names": list(resource.get("shortNames") or []),
        }
    for info in found.values():
        info["subresources"] = sorted(subresources.get(info["plural"], []))
    return found


def snapshot(kubeconfig: str) -> dict[str, Any]:
    """Read the OpenAPI v3 documents from the server ``kubeconfig`` points at."""
    sys.path.insert(0, str(ROOT / "src"))
    import asyncio

    from setpoint.client import Client

    async def fetch() -> tuple[str, dict[str, Any], dict[str, Any]]:
        async with Client.from_kubeconfig(kubeconfig) as client:
            version = (await client.transport.request("GET", "/version")).body
            docs, lists = {}, {}
            for gv in GROUP_VERSIONS:
                path = "/api/v1" if gv == "v1" else f"/apis/{gv}"
                docs[gv] = (await client.transport.request("GET", f"/openapi/v3{path}")).body
                lists[gv] = (await client.transport.request("GET", path)).body
            return str(version["gitVersion"]), docs, lists

    release, docs, lists = asyncio.run(fetch())
    schemas: dict[str, Any] = {}
    resources: dict[str, Any] = {}
    for gv, doc in docs.items():
        for name, schema in doc["components"]["schemas"].items():
            schemas.setdefault(name, schema)
        resources[gv] = _resources(lists[gv])
    wanted = {_package_of(gv) for gv in GROUP_VERSIONS}
    todo = [n for n in schemas if n.rsplit(".", 1)[0] in wanted and _wanted(n)]
    keep: set[str] = set()
    while todo:
        name = todo.pop()
        if name in keep or not _wanted(name):
            continue
        keep.add(name)
        todo.extend(_refs(schemas[name]))
    return {
        "release": release,
        "group_versions": list(GROUP_VERSIONS),
        "resources": resources,
        "schemas": {name: _trim(schemas[name]) for name in sorted(keep)},
    }


def _wanted(name: str) -> bool:
    return name not in SKIP and not name.endswith(SKIP_SUFFIXES)


# --------------------------------------------------------------------------- generation


def module_of(name: str) -> str:
    """``io.k8s.api.apps.v1.Deployment`` -> ``apps_v1``; meta/v1 -> ``meta_v1``."""
    package = name.rsplit(".", 1)[0]
    if package.startswith("io.k8s.apimachinery.pkg.apis.meta."):
        return "meta_" + package.rsplit(".", 1)[1]
    parts = package.split(".")
    return f"{parts[3]}_{parts[4]}"


_WORDS = re.compile(r"[A-Z]{2,}s?(?=[A-Z]|[0-9]|$)|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+")
_RESERVED = {"schema", "json", "copy", "dict", "construct", "validate", "fields", "gvk"}


def python_name(json_name: str) -> str:
    """A snake_case attribute for a JSON field name (``podIPs`` -> ``pod_ips``)."""
    words = _WORDS.findall(json_name.replace("-", "_").replace("$", ""))
    name = "_".join(w.lower() for w in words) or "field"
    if keyword.iskeyword(name) or name in _RESERVED or name.startswith("model_"):
        name += "_"
    return name


def _camel(python: str) -> str:
    stem = python[:-1] if python.endswith("_") else python
    head, *rest = stem.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _ascii(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"')
    text = text.replace("\u201d", '"').replace("\u2014", "-").replace("\u2013", "-")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return text.replace('"""', "'''").replace("\t", " ")


def _docstring(text: str, indent: str, fallback: str) -> list[str]:
    text = " ".join(_ascii(text).split()).rstrip(":") or fallback
    if text.endswith('"'):
        text += " "
    prefix = 'r"""' if "\\" in text else '"""'
    width = 100 - len(indent)
    sentences = re.split(r"(?<=\.)\s+(?=[A-Z])", text, maxsplit=1)
    summary = sentences[0].rstrip()
    if not summary.endswith((".", "?", "!")):
        summary += "."
    rest = sentences[1] if len(sentences) > 1 else ""
    if " " not in rest:  # a dangling "Example" (whose example the API leaves out)
        rest = ""
    summary_lines = textwrap.wrap(
        summary, width - 6, break_long_words=False, break_on_hyphens=False
    )
    if len(summary_lines) == 1 and not rest:
        return [f"{indent}{prefix}{summary_lines[0]}" + '"""']
    if len(summary_lines) > 1:
        # A summary is one line: keep its first line and move the rest to the body.
        words = summary.split(" ")
        first = ""
        while words and len(first) + len(words[0]) + 1 <= width - 10:
            first = f"{first} {words.pop(0)}".strip()
        rest = " ".join(words) + (" " + rest if rest else "")
        summary_lines = [first.rstrip(".,;:") + "..."]
    lines = [f"{indent}{prefix}{summary_lines[0]}", ""]
    lines += [
        f"{indent}{line}"
        for line in textwrap.wrap(rest, width, break_long_words=False, break_on_hyphens=False)
    ]
    lines.append(f'{indent}"""')
    return lines


class Generator:
    """Turns the snapshot's schemas into one Python module per API package."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.schemas: dict[str, Any] = data["schemas"]
        self.kinds: dict[str, tuple[str, str, str, dict[str, Any] | None]] = {}
        for name, schema in self.schemas.items():
            for gvk in schema.get("x-kubernetes-group-version-kind", []):
                gv = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
                if module_of(name) == _module_of_gv(gv) and gvk["kind"] == name.rsplit(".")[-1]:
                    info = data["resources"].get(gv, {}).get(gvk["kind"])
                    self.kinds[name] = (gvk["group"], gvk["version"], gvk["kind"], info)

    def modules(self) -> dict[str, str]:
        """Every generated file's source, by path under ``OUT`` (``core_v1/_pod_spec.py``).

        One package per group-version; in it one private module per class, and an
        ``__init__`` that imports a class's module when the class is first used (so
        ``core_v1.Namespace`` loads four classes, not the two hundred of core/v1).
        """
        by_module: dict[str, list[str]] = {}
        for name in self.schemas:
            if name in SCALARS or name in OWN:
                continue
            by_module.setdefault(module_of(name), []).append(name)
        out: dict[str, str] = {}
        for module, names in sorted(by_module.items()):
            out[f"{module}/__init__.py"] = self.facade(module, names)
            for name in names:
                out[f"{module}/_{_file_of(name)}.py"] = self.class_module(module, name)
        return out

    def facade(self, module: str, names: list[str]) -> str:
        """The package ``__init__``: the lazy table of its classes, typed for mypy."""
        classes = sorted((n.rsplit(".", 1)[1], _file_of(n)) for n in names)
        lines = [
            f'"""The typed models of the {_title(module)} API (generated; do not edit).',
            "",
            "Each class is imported from its own module when first used. Generated by",
            "scripts/gen_kinds.py from the OpenAPI v3 documents of Kubernetes "
            f"{self.data['release']};",
            "decision record: docs/decisions/0032-typed-builtin-kinds.md.",
            '"""',
            "",
            "from typing import TYPE_CHECKING",
            "",
            "from setpoint._lazy import lazy_module",
            "",
            "if TYPE_CHECKING:",
        ]
        lines += [f"    from ._{file} import {cls}" for cls, file in sorted(classes, key=_by_file)]
        lines += ["", "__all__ = ["]
        lines += [f'    "{cls}",' for cls, _ in classes]
        lines += ["]", "", "_FILES = {"]
        entries = [f'    "{cls}": "_{file}",' for cls, file in classes]
        lines += [e if len(e) <= 100 else f"{e}  # noqa: E501 (a name)" for e in entries]
        lines += [
            "}",
            '"""The module of each class, in this package."""',
            "",
            '_EXPORTS = {cls: f"{__name__}.{file}" for cls, file in _FILES.items()}',
            "__getattr__, __dir__ = lazy_module(__name__, globals(), _EXPORTS)",
        ]
        return "\n".join(lines) + "\n"

    def type_of(self, schema: dict[str, Any], here: str, imports: set[str]) -> str:
        """The annotation for a property's schema, as written in module ``here``."""
        if "allOf" in schema and len(schema["allOf"]) == 1:
            return self.type_of(schema["allOf"][0], here, imports)
        if "$ref" in schema:
            target = _REF.match(schema["$ref"]).group(1)  # type: ignore[union-attr]
            if target in SCALARS:
                imports.add(f"_model.{SCALARS[target]}")
                return SCALARS[target]
            if target in OWN:
                imports.add(f"_model.{OWN[target]}")
                return OWN[target]
            if target not in self.schemas:  # left out of the snapshot (SKIP): plain JSON
                imports.add("typing.Any")
                return "dict[str, Any]"
            cls = target.rsplit(".", 1)[1]
            if target == self.current:
                return f'"{cls}"'  # a class that contains itself
            local = self.refs.get(target)
            if local is None:
                taken = set(self.refs.values()) | {self.current.rsplit(".", 1)[1]}
                local = cls if cls not in taken else f"{module_of(target)}_{cls}"
                self.refs[target] = local
            return local
        kind = schema.get("type")
        if kind == "string":
            return "str"
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "boolean":
            return "bool"
        if kind == "array":
            return f"list[{self.type_of(schema.get('items', {}), here, imports)}]"
        if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
            value = self.type_of(schema["additionalProperties"], here, imports)
            return f"dict[str, {value}]"
        if kind == "object":
            imports.add("typing.Any")
            return "dict[str, Any]"
        imports.add("typing.Any")
        return "Any"

    def class_module(self, module: str, name: str) -> str:
        """The source of the module of one class (``core_v1/_pod_spec.py``)."""
        imports: set[str] = set()
        self.refs: dict[str, str] = {}
        schema = self.schemas[name]
        cls = name.rsplit(".", 1)[1]
        self.current = name
        kind = self.kinds.get(name)
        base = "KindObject" if kind else "KindModel"
        imports.add(f"_model.{base}")
        body = ["", "", f"class {cls}({base}):"]
        body += _docstring(schema.get("description", ""), "    ", f"The {cls} type.")
        properties = dict(schema.get("properties", {}))
        if kind:
            group, version, kind_name, info = kind
            for skipped in ("apiVersion", "kind", "metadata"):
                properties.pop(skipped, None)
            imports.add("typing.ClassVar")
            imports.add("_model.GroupVersionKind")
            body += [
                "",
                "    gvk: ClassVar[GroupVersionKind] = GroupVersionKind("
                f"{group!r}, {version!r}, {kind_name!r})",
            ]
            if info:
                imports.add("_model.ResourceInfo")
                subs = ", ".join(repr(s) for s in info["subresources"])
                subresources = f"frozenset({{{subs}}})" if subs else "frozenset()"
                short = "".join(f"{n!r}, " for n in info["short_names"])
                short_names = f", short_names=({short.rstrip(' ')})" if short else ""
                body += [
                    "    resource: ClassVar[ResourceInfo | None] = ResourceInfo(",
                    f"        gvk, {info['plural']!r}, {info['namespaced']!r}, "
                    f"{subresources}, {info['singular']!r}{short_names}",
                    "    )",
                ]
        required = set(schema.get("required", ()))
        seen: set[str] = set()
        for json_name, prop in properties.items():
            attr = python_name(json_name)
            while attr in seen:
                attr += "_"
            seen.add(attr)
            annotation = self.type_of(prop, module, imports)
            alias = "" if attr == json_name else f'alias="{json_name}"'
            if alias:
                imports.add("pydantic.Field")
            if json_name in required:
                value = f" = Field({alias})" if alias else ""
                body.append(f"    {attr}: {annotation}{value}")
            else:
                value = f"Field(default=None, {alias})" if alias else "None"
                body.append(f"    {attr}: {annotation} | None = {value}")
            body += _docstring(prop.get("description", ""), "    ", f"{json_name}.")
        if not properties and not kind:
            body.append("")
        head = [
            f'"""The {_title(module)} ``{cls}`` model.',
            "",
            "Generated by scripts/gen_kinds.py; do not edit.",
            '"""',
            "",
        ]
        stdlib = sorted(i for i in imports if i.startswith("typing."))
        if stdlib:
            names_ = ", ".join(i.split(".", 1)[1] for i in stdlib)
            head.append(f"from typing import {names_}")
            head.append("")
        if "pydantic.Field" in imports:
            head.append("from pydantic import Field")
            head.append("")
        model = sorted(i.split(".", 1)[1] for i in imports if i.startswith("_model."))
        head.append(f"from setpoint.api.kinds._model import {', '.join(model)}")
        for target, local in sorted(self.refs.items(), key=lambda item: _import_key(item[0])):
            ref_cls = target.rsplit(".", 1)[1]
            path = f"setpoint.api.kinds.{module_of(target)}._{_file_of(target)}"
            alias_ = "" if local == ref_cls else f" as {local}"
            head.append(f"from {path} import {ref_cls}{alias_}")
        head += ["", f'__all__ = ["{cls}"]']
        return "\n".join(head + body) + "\n"


def _by_file(item: tuple[str, str]) -> str:
    return item[1]


def _file_of(name: str) -> str:
    """The module of a class: ``io.k8s.api.core.v1.PodSpec`` -> ``pod_spec``."""
    return python_name(name.rsplit(".", 1)[1]).rstrip("_")


def _import_key(target: str) -> str:
    return f"setpoint.api.kinds.{module_of(target)}._{_file_of(target)}"


def _module_of_gv(gv: str) -> str:
    group, _, version = gv.rpartition("/")
    return f"{group.split('.', 1)[0] if group else 'core'}_{version}"


def _title(module: str) -> str:
    group, version = module.rsplit("_", 1)
    return f"{group}/{version}"


def generate(data: dict[str, Any]) -> dict[str, str]:
    """Every generated file's source, formatted by ruff, by path under ``OUT``."""
    sources = Generator(data).modules()
    with tempfile.TemporaryDirectory(prefix="gen-kinds-") as tmp:
        for path, source in sources.items():
            (Path(tmp) / path).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / path).write_text(source)
        ruff = Path(sys.executable).with_name("ruff")
        done = subprocess.run(
            [str(ruff), "format", "--quiet", "--config", str(ROOT / "pyproject.toml"), tmp],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise SystemExit(f"ruff format failed:\n{done.stdout}{done.stderr}")
        return {path: (Path(tmp) / path).read_text() for path in sources}


def generated_files() -> dict[str, str]:
    """The generated files checked in now, by path under ``OUT``: every group-version package."""
    return {
        str(path.relative_to(OUT)): path.read_text()
        for path in sorted(OUT.glob("*/*.py"))
        if path.parent.name != "__pycache__"
    }


def main() -> int:
    """Write the snapshot, write the modules, or check them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot", metavar="KUBECONFIG", help="read the OpenAPI documents")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args()
    if args.snapshot:
        data = snapshot(args.snapshot)
        SNAPSHOT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {SNAPSHOT.relative_to(ROOT)} ({len(data['schemas'])} schemas)")
        return 0
    data = json.loads(SNAPSHOT.read_text())
    modules = generate(data)
    present = generated_files()
    stale = sorted(n for n, src in modules.items() if present.get(n) != src)
    extra = sorted(set(present) - set(modules))
    if args.check:
        for name in stale:
            print(f"out of date: {OUT.relative_to(ROOT) / name} (run scripts/gen_kinds.py)")
        for name in extra:
            print(f"not generated: {OUT.relative_to(ROOT) / name} (run scripts/gen_kinds.py)")
        return 1 if stale or extra else 0
    for name in stale:
        (OUT / name).parent.mkdir(exist_ok=True)
        (OUT / name).write_text(modules[name])
        print(f"wrote {OUT.relative_to(ROOT) / name}")
    for name in extra:
        (OUT / name).unlink()
        print(f"removed {OUT.relative_to(ROOT) / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
