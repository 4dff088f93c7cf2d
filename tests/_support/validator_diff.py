"""Seeded generator of schemas and values for the validator's differential test (issue 31).

Each :class:`Case` is one field's schema (a property of ``spec``) and a few values for it.
The schemas use what the structural-schema rules allow: every type, nullable, enum,
bounds, lengths, patterns, formats (checked, stripped and unknown ones), allOf/anyOf/
oneOf/not branches, defaults (valid or not), x-kubernetes-int-or-string,
x-kubernetes-preserve-unknown-fields, embedded resources, maps, and set and map lists.
The values are drawn near the schema: at its bounds, from each format's tricky strings,
of the wrong type, null, with unknown fields. Same seed, same cases.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

FORMAT_SAMPLES: dict[str, list[str]] = {
    "byte": ["aGVsbG8=", "AAAA", "abc", "", "a+b/", "YQ", "YQ=="],
    "date": ["2024-02-29", "2023-02-29", "0000-01-01", "2024-1-1", "2024-12-31", ""],
    "date-time": [
        "2024-01-01T10:00:00Z",
        "2024-01-01t10:00:00.123+01:00",
        "2024-01-01T24:00:00Z",
        "2024-01-01T10:00:00",
        "2024-01-01 10:00:00Z",
        "2024-01-01T10:60:00Z",
    ],
    "duration": ["1h", "1h30m", "0", "1.5s", "-2m", "3 days", "1", "h", "5 fortnights", ""],
    "uuid": [
        "123e4567-e89b-12d3-a456-426614174000",
        "123E4567E89B12D3A456426614174000",
        "123e4567-e89b-12d3-a456-42661417400",
        "",
    ],
    "email": ["a@b.c", "Ann <ann@example.com>", "a", "a@", "a b@c.d", "a.@b.c", "a@[1.2.3.4]"],
    "hostname": ["example.com", "a", "-a.com", "a_b.com", "a.b", "xn--bcher-kva.ch", "ä.com"],
    "ipv4": ["10.0.0.1", "010.0.0.1", "256.1.1.1", "1.2.3", "::ffff:1.2.3.4", "1.2.3.4 "],
    "ipv6": ["::1", "fe80::1", "::ffff:1.2.3.4", "1:2:3:4:5:6:7:8", "1::2::3", "fe80::1%eth0"],
    "cidr": ["10.0.0.0/8", "10.0.0.1/32", "::/0", "10.0.0.0/33", "10.0.0.0", "10.0.0.0/08"],
    "mac": ["00:11:22:33:44:55", "00-11-22-33-44-55", "0011.2233.4455", "00:11:22:33:44", "0:1"],
    "uri": ["http://example.com/a?b#c", "/abs", "rel/path", "mailto:a@b", "http://[::1]:80/", ""],
    "k8s-short-name": ["abc", "a-b", "A", "-a", "a" * 64, ""],
    "k8s-long-name": ["a.b", "a..b", "Ab", "a" * 254],
    "bsonobjectid": ["0123456789abcdef01234567", "0123456789ABCDEF01234567", "xyz"],
    "hexcolor": ["#fff", "abcdef", "#ffff", "fff"],
    "password": ["anything"],
    "no-such-format": ["anything"],
    "int32": ["12"],
}
STRING_POOL = ["", "a", "ab", "abc", "xyz", "hello world", "é", "日本", "A1", "0", "a-b", "x\n"]
PATTERNS = ["^a", "b$", "^[a-z]+$", "[0-9]", "^.{2,3}$", "^(a|x)"]


@dataclass
class Case:
    """One field: its schema and the values an object sets it to."""

    schema: dict[str, Any]
    values: list[Any] = field(default_factory=list)


class Generator:
    """Draws :class:`Case` objects from a seeded ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def cases(self, count: int, values_per_case: int = 3) -> list[Case]:
        """``count`` cases, each with ``values_per_case`` values."""
        result = []
        for _ in range(count):
            schema = self.schema(depth=0)
            result.append(Case(schema, [self.value(schema) for _ in range(values_per_case)]))
        return result

    # ---------------------------------------------------------------- schemas

    def schema(self, depth: int) -> dict[str, Any]:
        """One structural schema node (recursing into objects and arrays)."""
        rng = self.rng
        kinds = ["string", "string", "integer", "number", "boolean", "int-or-string"]
        if depth < 2:
            kinds += ["object", "object", "array", "map", "preserve", "embedded", "set", "maplist"]
        kind = rng.choice(kinds)
        node: dict[str, Any] = getattr(self, f"_{kind.replace('-', '_')}")(depth)
        if kind not in ("embedded",) and rng.random() < 0.2:
            node["nullable"] = True
        if rng.random() < 0.35:
            self._junctors(node)
        if rng.random() < 0.3:
            node["default"] = self.value(node, near_default=True)
        return node

    def _string(self, depth: int) -> dict[str, Any]:
        rng = self.rng
        node: dict[str, Any] = {"type": "string"}
        if rng.random() < 0.45:
            node["format"] = rng.choice(sorted(FORMAT_SAMPLES))
        node.update(self._string_checks(0.25))
        return node

    def _string_checks(self, p: float) -> dict[str, Any]:
        rng = self.rng
        checks: dict[str, Any] = {}
        if rng.random() < p:
            checks["minLength"] = rng.randint(0, 3)
        if rng.random() < p:
            checks["maxLength"] = rng.randint(1, 5)
        if rng.random() < p:
            checks["pattern"] = rng.choice(PATTERNS)
        if rng.random() < p / 2:
            checks["enum"] = rng.sample(STRING_POOL, 3)
        if rng.random() < p / 2:
            checks["format"] = rng.choice(sorted(FORMAT_SAMPLES))
        return checks

    def _number_checks(self, integer: bool, p: float) -> dict[str, Any]:
        rng = self.rng
        checks: dict[str, Any] = {}
        bound = (lambda: rng.randint(-5, 10)) if integer else (lambda: rng.choice([-1.5, 0, 2.5]))
        if rng.random() < p:
            checks["minimum"] = bound()
            if rng.random() < 0.3:
                checks["exclusiveMinimum"] = True
        if rng.random() < p:
            checks["maximum"] = bound()
            if rng.random() < 0.3:
                checks["exclusiveMaximum"] = True
        if rng.random() < p / 2:
            checks["multipleOf"] = rng.choice([2, 3, 5] if integer else [0.5, 2, 0.1])
        if rng.random() < p / 4:
            checks["enum"] = [rng.randint(-2, 3) for _ in range(3)]
        if rng.random() < 0.05:  # bounds that do not fit the type
            checks[rng.choice(["maximum", "minimum"])] = rng.choice([1e20, 10.5, 2**40])
        return checks

    def _integer(self, depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "integer", **self._number_checks(True, 0.3)}
        if self.rng.random() < 0.3:
            node["format"] = self.rng.choice(["int32", "int64", "float", "uuid"])
        return node

    def _number(self, depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "number", **self._number_checks(False, 0.3)}
        if self.rng.random() < 0.3:
            node["format"] = self.rng.choice(["float", "double", "int32"])
        return node

    def _boolean(self, depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "boolean"}
        if self.rng.random() < 0.2:
            node["enum"] = [True]
        return node

    def _int_or_string(self, depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"x-kubernetes-int-or-string": True}
        if self.rng.random() < 0.3:
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if self.rng.random() < 0.15:
            node["enum"] = [1, "a", 65]
        if self.rng.random() < 0.15:
            node["format"] = self.rng.choice(sorted(FORMAT_SAMPLES))
        return node

    def _object(self, depth: int) -> dict[str, Any]:
        rng = self.rng
        props = {f"p{i}": self.schema(depth + 1) for i in range(rng.randint(1, 3))}
        node: dict[str, Any] = {"type": "object", "properties": props}
        if rng.random() < 0.3:
            node["required"] = rng.sample(sorted(props), 1)
        if rng.random() < 0.15:
            node["x-kubernetes-preserve-unknown-fields"] = True
        if rng.random() < 0.15:
            node["minProperties"] = 1
        if rng.random() < 0.1:
            node["x-kubernetes-map-type"] = rng.choice(["atomic", "granular"])
        return node

    def _map(self, depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "object", "additionalProperties": self.schema(depth + 1)}
        if self.rng.random() < 0.2:
            node["maxProperties"] = 2
        return node

    def _preserve(self, depth: int) -> dict[str, Any]:
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

    def _embedded(self, depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "object", "x-kubernetes-embedded-resource": True}
        if self.rng.random() < 0.5:
            node["x-kubernetes-preserve-unknown-fields"] = True
        else:
            node["properties"] = {"data": {"type": "string"}}
        return node

    def _array(self, depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "array", "items": self.schema(depth + 1)}
        if self.rng.random() < 0.3:
            node["maxItems"] = self.rng.randint(0, 2)
        if self.rng.random() < 0.2:
            node["minItems"] = 1
        return node

    def _set(self, depth: int) -> dict[str, Any]:
        item = self.rng.choice([{"type": "string"}, {"type": "integer"}])
        return {"type": "array", "x-kubernetes-list-type": "set", "items": item}

    def _maplist(self, depth: int) -> dict[str, Any]:
        return {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["k"],
            "items": {
                "type": "object",
                "required": ["k"],
                "properties": {"k": {"type": "string"}, "v": {"type": "integer", "default": 1}},
            },
        }

    def _junctors(self, node: dict[str, Any]) -> None:
        rng = self.rng
        for junctor in rng.sample(["allOf", "anyOf", "oneOf", "not"], rng.randint(1, 2)):
            if junctor == "not":
                node["not"] = self._branch(node)
            elif junctor == "anyOf" and "anyOf" in node:
                continue
            else:
                node[junctor] = [self._branch(node) for _ in range(rng.randint(1, 3))]

    def _branch(self, node: dict[str, Any]) -> dict[str, Any]:
        """A value-validation-only branch fitting ``node`` (structural rules)."""
        rng = self.rng
        kind = node.get("type")
        if kind == "string" or node.get("x-kubernetes-int-or-string"):
            branch = self._string_checks(0.5)
        elif kind in ("integer", "number"):
            branch = self._number_checks(kind == "integer", 0.5)
        elif kind == "object" and node.get("properties"):
            names = sorted(node["properties"])
            branch = {"required": rng.sample(names, 1)}
            if rng.random() < 0.4:
                name = rng.choice(names)
                sub = node["properties"][name]
                branch["properties"] = {name: self._branch(sub)}
        elif kind == "array":
            branch = {"maxItems": rng.randint(0, 2)} if rng.random() < 0.5 else {"minItems": 1}
        elif kind == "object":
            branch = {"minProperties": rng.randint(0, 2)}
        else:
            branch = {"enum": [True]} if kind == "boolean" else {}
        if not branch:
            branch = {"maxLength": 2} if rng.random() < 0.5 else {"minimum": 0}
        return branch

    # ---------------------------------------------------------------- values

    def value(self, node: dict[str, Any], *, near_default: bool = False, depth: int = 0) -> Any:
        """A value for ``node``: usually of its type and near its limits, sometimes not."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.06:
            return None
        if roll < 0.12 and not near_default:
            return rng.choice(["x", 7, 1.5, True, [], {}])
        if node.get("x-kubernetes-int-or-string"):
            return rng.choice([rng.randint(-3, 10), rng.choice(STRING_POOL)])
        kind = node.get("type")
        if kind == "string":
            pool = list(STRING_POOL)
            fmt = node.get("format")
            if fmt in FORMAT_SAMPLES:
                pool += FORMAT_SAMPLES[fmt] * 3
            enum = node.get("enum")
            if enum:
                pool += enum * 2
            return rng.choice(pool)
        if kind == "integer":
            return rng.choice(
                [
                    rng.randint(-6, 11),
                    float(rng.randint(-3, 3)),  # 2.0: an integer to the server
                    2**31,
                    -(2**31) - 1,
                    2**31 - 1,
                    2**63 - 1,
                    *(node.get("enum") or []),
                ]
            )
        if kind == "number":
            return rng.choice(
                [rng.randint(-3, 3), rng.choice([-1.5, 0.5, 2.5, 0.1, 0.3, -0.2, 3.5e38, 2.0])]
            )
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "array":
            items = node["items"]
            count = rng.randint(0, 3)
            values = [
                self.value(items, near_default=near_default, depth=depth + 1) for _ in range(count)
            ]
            if node.get("x-kubernetes-list-type") == "set" and values and rng.random() < 0.3:
                values.append(values[0])
            return values
        if kind == "object":
            return self._object_value(node, near_default=near_default, depth=depth)
        return rng.choice(STRING_POOL)

    def _object_value(self, node: dict[str, Any], *, near_default: bool, depth: int) -> Any:
        rng = self.rng
        result: dict[str, Any] = {}
        if node.get("x-kubernetes-embedded-resource"):
            if rng.random() < 0.8:
                result.update(apiVersion="v1", kind="ConfigMap")
            if rng.random() < 0.5:
                result["metadata"] = {"name": rng.choice(["a", "B_"])}
        props = node.get("properties") or {}
        for name, sub in props.items():
            if rng.random() < 0.6:
                result[name] = self.value(sub, near_default=near_default, depth=depth + 1)
        additional = node.get("additionalProperties")
        if isinstance(additional, dict):
            for i in range(rng.randint(0, 3)):
                result[f"k{i}"] = self.value(additional, near_default=near_default, depth=depth + 1)
        elif node.get("x-kubernetes-preserve-unknown-fields") and rng.random() < 0.3:
            result["free"] = rng.choice([None, 1, "s", [1, None], {"n": None}])
        if rng.random() < 0.25 and not near_default:
            result["unknown"] = rng.choice(["u", 1, {"x": 1}])
        return result


class TypeCases:
    """Python model types declaring constraints (issue 31), drawn from a seed, as cases.

    Each type is an ``sp.Model`` built with ``pydantic.create_model``: optional fields of
    several types (snake_case names, so JSON names differ), some with field-level
    ``one_of``/``any_of``/``all_of``/``not_`` constraints or formats, and one or two
    class-level constraints (``exactly_one_of``, ``at_most_one_of``, or a
    :class:`setpoint.Constraint` with required fields, nested properties and junctors).
    The case's schema is what ``setpoint generate crd`` makes of the type; its values
    set random subsets of the fields, plus :class:`Generator`'s values for the schema.
    """

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.values = Generator(seed)
        self.seed = seed

    def cases(self, count: int, values_per_case: int = 6) -> list[Case]:
        """``count`` cases: a generated type's schema and ``values_per_case`` values."""
        from setpoint.crd.schema import model_schema

        result = []
        for i in range(count):
            cls = self.model(f"Generated{self.seed}x{i}")
            built = model_schema(cls)
            assert not built.errors, [str(e) for e in built.errors]
            node = built.schema
            values = [self.presence_value(node) for _ in range(values_per_case - 2)]
            values += [self.values.value(node) for _ in range(2)]
            result.append(Case(node, values))
        return result

    def presence_value(self, node: dict[str, Any]) -> dict[str, Any]:
        """An object setting a random subset of ``node``'s fields, each to a drawn value."""
        rng = self.rng
        props = node.get("properties") or {}
        chosen = [n for n in sorted(props) if rng.random() < 0.45]
        return {n: self.values.value(props[n]) for n in chosen}

    def model(self, name: str) -> type[Any]:
        """One generated model class (with a nested model field half the time)."""
        import pydantic

        import setpoint as sp

        rng = self.rng
        names = [f"f_{chr(97 + j)}_x" for j in range(rng.randint(2, 5))]
        fields: dict[str, Any] = {}
        for field_name in names:
            fields[field_name] = self._field()
        if rng.random() < 0.5:
            inner: type[Any] = pydantic.create_model(
                f"{name}Inner",
                __base__=sp.Model,
                a_one=(int | None, sp.field(default=None)),
                b_two=(str | None, sp.field(default=None)),
            )
            if rng.random() < 0.5:
                sp.exactly_one_of("a_one", "b_two")(inner)  # decorates in place
            fields["nested_x"] = (inner | None, sp.field(default=None))
            names.append("nested_x")
        built: type[Any] = pydantic.create_model(name, __base__=sp.Model, **fields)
        for _ in range(rng.randint(1, 2)):
            self._model_constraint(names)(built)  # decorates in place
        return built

    def _field(self) -> tuple[Any, Any]:
        import setpoint as sp

        rng = self.rng
        kind = rng.choice(["str", "str", "int", "bool", "list"])
        junctor: dict[str, Any] = {}
        if kind == "str":
            roll = rng.random()
            if roll < 0.3:
                junctor["one_of"] = [sp.Constraint(format="ipv4"), sp.Constraint(format="ipv6")]
            elif roll < 0.5:
                junctor["any_of"] = [sp.Constraint(pattern="^a"), sp.Constraint(max_length=2)]
            elif roll < 0.65:
                junctor["not_"] = sp.Constraint(enum=("x", "xyz"))
            elif roll < 0.8:
                junctor["format"] = rng.choice(["date", "duration", "hostname", "cidr"])
            return (str | None, sp.field(default=None, **junctor))
        if kind == "int":
            if rng.random() < 0.6:
                junctor["any_of"] = [sp.Constraint(maximum=2), sp.Constraint(minimum=8)]
            if rng.random() < 0.3:
                junctor["all_of"] = [sp.Constraint(format="int32"), sp.Constraint(multiple_of=2)]
            return (int | None, sp.field(default=None, **junctor))
        if kind == "bool":
            return (bool | None, sp.field(default=None))
        if rng.random() < 0.6:
            junctor["not_"] = sp.Constraint(max_items=0)
        if rng.random() < 0.4:
            junctor["all_of"] = [sp.Constraint(items=sp.Constraint(min_length=2))]
        return (list[str] | None, sp.field(default=None, **junctor))

    def _model_constraint(self, names: list[str]) -> Any:
        import setpoint as sp

        rng = self.rng
        roll = rng.random()
        picked = rng.sample(names, min(len(names), rng.randint(2, 3)))
        if roll < 0.3:
            return sp.exactly_one_of(*picked)
        if roll < 0.55:
            return sp.at_most_one_of(*picked)
        if roll < 0.75:
            return sp.Constraint(
                any_of=[sp.Constraint(required=[picked[0]]), sp.Constraint(required=picked[1:])]
            )
        if roll < 0.85:
            return sp.Constraint(
                all_of=[sp.Constraint(min_properties=1)], not_=sp.Constraint(required=picked)
            )
        if "nested_x" in names and roll < 0.95:
            # A constraint on a nested model's fields, by their Python names.
            return sp.Constraint(properties={"nested_x": sp.at_most_one_of("a_one", "b_two")})
        return sp.Constraint(min_properties=1, max_properties=3)
