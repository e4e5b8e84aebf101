"""Request bodies in the OpenAPI document exactly as the API reads them.

litestar's schema of a msgspec struct drops the constraints of list items and map keys and
values (`hooks: list[HookId]` came out as a list of any strings), so the document allowed
bodies the API refuses. Here each body struct (and every struct inside one) is described
by msgspec's own JSON Schema of it, the one its decoder enforces, under the component name
litestar gave it, with the rules across fields its `__json_schema_extra__` states. One rule
no type states is added: text holds no NUL (`\\u0000`), which PostgreSQL cannot store and
every body refuses (`services/api/text.py`): each string gets a pattern saying so, each
map's keys too, and a value of any JSON (`config.extra`, tool call arguments) is a
`NulFreeJson`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from litestar.openapi.spec import Reference, Schema
from litestar.openapi.spec.enums import OpenAPIType

with warnings.catch_warnings():
    # Python's own regex parser, public under these names until 3.13 (where it stays as
    # `re._parser`); only read here, to see which patterns already leave NUL out.
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as sre
    import sre_parse

REF = "#/components/schemas/{name}"
EXTRA = "__json_schema_extra__"
NUL_FREE = "^[^\\u0000]*$"
# A file path: no NUL, and more than blanks (contracts.limits.path_problem).
NUL_FREE_PATH = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"
JSON_VALUE = "NulFreeJson"
_ANY_JSON: dict[str, Any] = {
    "description": "Any JSON value whose text (strings and keys) holds no NUL.",
    "anyOf": [
        {"type": "string", "pattern": NUL_FREE},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": {"$ref": REF.format(name=JSON_VALUE)}},
        {
            "type": "object",
            "propertyNames": {"pattern": NUL_FREE},
            "additionalProperties": {"$ref": REF.format(name=JSON_VALUE)},
        },
    ],
}
# Keywords that say nothing of a value's shape: a schema of these only admits any JSON.
_ANNOTATIONS = frozenset({"title", "description", "default", "examples"})


def nul_free(schema: Any) -> Any:
    """The schema with the NUL rule added to every string, map key and untyped value."""
    if isinstance(schema, list):
        return [nul_free(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.keys() <= _ANNOTATIONS:
        # Any JSON value (msgspec's `Any`).
        return {**schema, "$ref": REF.format(name=JSON_VALUE)}
    out = {key: _nested(key, value) for key, value in schema.items()}
    if out.get("type") == "string" and "enum" not in out and "format" not in out:
        if "pattern" not in out:
            out["pattern"] = NUL_FREE
        elif admits_nul(out["pattern"]):
            out["allOf"] = [*out.get("allOf", []), {"pattern": NUL_FREE}]
    if out.get("type") == "object" and not {"properties", "additionalProperties"} & out.keys():
        # A map of any values (`dict[str, Any]`).
        out["additionalProperties"] = {"$ref": REF.format(name=JSON_VALUE)}
    if out.get("type") == "object" and out.get("additionalProperties", False) is not False:
        names = dict(out.get("propertyNames", {}))
        if "pattern" in names:
            if admits_nul(names["pattern"]):
                names["allOf"] = [*names.get("allOf", []), {"pattern": NUL_FREE}]
        else:
            names["pattern"] = NUL_FREE
        out["propertyNames"] = names
    return out


def admits_nul(pattern: str) -> bool:
    """Whether a string holding NUL can match `pattern`: False only for a pattern anchored
    at both ends whose every character class leaves NUL out (`^[A-Za-z0-9_-]+$`), where a
    second pattern saying the same would only make values harder to draw."""
    try:
        parsed: list[Any] = sre_parse.parse(pattern).data
    except (sre.error, RecursionError):
        return True
    begin, end = (sre.AT, sre.AT_BEGINNING), (sre.AT, sre.AT_END)
    if len(parsed) < 2 or parsed[0] != begin or parsed[-1] != end:
        return True
    return _consumes_nul(parsed[1:-1])


def _consumes_nul(items: Any) -> bool:
    for op, arg in items:
        if op == sre.LITERAL:
            if arg == 0:
                return True
        elif op == sre.NOT_LITERAL:
            if arg != 0:
                return True
        elif op == sre.IN:
            if _class_has_nul(arg):
                return True
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            if _consumes_nul(arg[2]):
                return True
        elif op == sre.SUBPATTERN:
            if _consumes_nul(arg[3]):
                return True
        elif op == sre.BRANCH:
            if any(_consumes_nul(branch) for branch in arg[1]):
                return True
        else:  # any character, a negated literal, a back reference, an assertion, …
            return True
    return False


# Classes that hold NUL: everything but digits, word characters or blanks.
_NUL_CATEGORIES = frozenset({sre.CATEGORY_NOT_DIGIT, sre.CATEGORY_NOT_WORD, sre.CATEGORY_NOT_SPACE})


def _class_has_nul(items: Any) -> bool:
    negated, hit = False, False
    for op, arg in items:
        if op == sre.NEGATE:
            negated = True
        elif op == sre.LITERAL:
            hit = hit or arg == 0
        elif op == sre.RANGE:
            hit = hit or arg[0] == 0
        elif op == sre.CATEGORY:
            hit = hit or arg in _NUL_CATEGORIES
        else:
            return True
    return hit != negated


def _nested(key: str, value: Any) -> Any:
    if key in ("properties", "patternProperties", "$defs"):
        return {name: nul_free(item) for name, item in value.items()}
    if key in ("items", "additionalProperties", "anyOf", "allOf", "oneOf", "prefixItems"):
        return nul_free(value)
    return value


def body_components(classes: Iterable[type], names: Mapping[str, str]) -> dict[str, Schema]:
    """msgspec's schemas of `classes` and the structs inside them, NUL-free, keyed by the
    component names of `names` (msgspec's name → the document's; others keep theirs)."""
    classes = list(classes)
    _, components = msgspec.json.schema_components(classes, ref_template=REF)
    for cls in classes:
        # A rule across fields that no field's type states, in JSON Schema (a ClassVar).
        extra = getattr(cls, EXTRA, None)
        if extra and cls.__name__ in components:
            schema = components[cls.__name__]
            properties = {**schema.get("properties", {}), **extra.get("properties", {})}
            components[cls.__name__] = {**schema, **extra, "properties": properties}
    components = {name: nul_free(schema) for name, schema in components.items()}
    components[JSON_VALUE] = _ANY_JSON
    renamed = {REF.format(name=old): REF.format(name=new) for old, new in names.items()}
    out: dict[str, Schema] = {}
    for name, schema in components.items():
        converted = to_schema(schema, renamed)
        out[names.get(name, name)] = (
            converted if isinstance(converted, Schema) else Schema(all_of=[converted])
        )
    return out


_KEYWORDS = {
    "$ref": "ref",
    "allOf": "all_of",
    "anyOf": "any_of",
    "oneOf": "one_of",
    "not": "schema_not",
    "prefixItems": "prefix_items",
    "patternProperties": "pattern_properties",
    "additionalProperties": "additional_properties",
    "propertyNames": "property_names",
    "maxLength": "max_length",
    "minLength": "min_length",
    "maxItems": "max_items",
    "minItems": "min_items",
    "uniqueItems": "unique_items",
    "maxProperties": "max_properties",
    "minProperties": "min_properties",
    "exclusiveMaximum": "exclusive_maximum",
    "exclusiveMinimum": "exclusive_minimum",
    "multipleOf": "multiple_of",
    "contentEncoding": "content_encoding",
    "contentMediaType": "content_media_type",
}
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties"})
_SCHEMA_VALUES = frozenset({"items", "additionalProperties", "propertyNames", "not"})


def to_schema(value: dict[str, Any], refs: Mapping[str, str]) -> Schema | Reference:
    """A JSON Schema dict as litestar's `Schema`, its references renamed by `refs`."""
    if "$ref" in value and len(value) == 1:
        return Reference(ref=refs.get(value["$ref"], value["$ref"]))
    fields: dict[str, Any] = {}
    for key, item in value.items():
        if key == "$ref":
            # A reference with siblings (a description, a default): the same, as allOf.
            fields["all_of"] = [Reference(ref=refs.get(item, item))]
        elif key in _SCHEMA_LISTS:
            fields[_KEYWORDS[key]] = [to_schema(i, refs) for i in item]
        elif key in _SCHEMA_MAPS:
            fields[_KEYWORDS.get(key, key)] = {k: to_schema(i, refs) for k, i in item.items()}
        elif key in _SCHEMA_VALUES and isinstance(item, dict):
            fields[_KEYWORDS.get(key, key)] = to_schema(item, refs)
        elif key == "type":
            fields["type"] = (
                [OpenAPIType(t) for t in item] if isinstance(item, list) else OpenAPIType(item)
            )
        else:
            fields[_KEYWORDS.get(key, key)] = item
    return Schema(**fields)


# The contract's MCP server, as a tenant may name one (a workflow definition's members, in
# the contract's snake_case): `operator_only` refuses a stdio server and a header naming the
# environment, so no `command` (and then no `env`, the contract's own rule) and no
# `${ENV:…}` in a header. The blueprint bodies leave those fields out instead.
TENANT_SERVER = "McpServer"
_HEADER_VALUE = r"^(?![\s\S]*\$\{ENV:)[^\u0000]*$"


def state_tenant_servers(components: Mapping[str, Schema | Reference]) -> None:
    """The contract's MCP server component with the rules a tenant's servers are held to."""
    server = components.get(TENANT_SERVER)
    if not isinstance(server, Schema) or server.properties is None:
        return
    server.properties["command"] = Schema(type=OpenAPIType.ARRAY, max_items=0, default=[])
    headers = server.properties.get("headers")
    if isinstance(headers, Schema):
        headers.additional_properties = Schema(type=OpenAPIType.STRING, pattern=_HEADER_VALUE)
