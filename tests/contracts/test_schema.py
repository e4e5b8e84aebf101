"""The published JSON Schemas and AsyncAPI document describe the wire exactly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agency.contracts import schema
from agency.contracts.asyncapi import asyncapi_document
from agency.contracts.codec import COMMAND_TYPES, EVENT_TYPES, encode
from agency.contracts.commands import CommandEnvelope, InvokeThread
from agency.contracts.envelope import Envelope, utc_now
from agency.contracts.events import (
    ChatMessage,
    ModelCompleted,
    ParentRef,
    ThreadCreated,
    ToolCall,
    ToolStarted,
    Usage,
)
from agency.contracts.subjects import EVENT_TYPE_HEADER
from agency.infra.jetstream import deadletter
from agency.services.cli.main import main

# A small validator for the keywords msgspec emits (jsonschema is not a dependency). An
# unknown keyword fails the test, so a schema can never pass by being misunderstood.
_ANNOTATIONS = {"title", "description", "default", "format", "discriminator", "$schema", "$defs"}
_JSON_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _type_ok(expected: str, value: Any) -> bool:
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, _JSON_TYPES[expected])


def validate(instance: Any, node: dict[str, Any], root: dict[str, Any], at: str = "$") -> None:
    for key, rule in node.items():
        if key in _ANNOTATIONS:
            continue
        if key == "$ref":
            name = rule.removeprefix("#/$defs/")
            validate(instance, root["$defs"][name], root, at)
        elif key == "type":
            types = rule if isinstance(rule, list) else [rule]
            assert any(_type_ok(t, instance) for t in types), f"{at}: not {rule}: {instance!r}"
        elif key == "const":
            assert instance == rule, f"{at}: {instance!r} != {rule!r}"
        elif key == "enum":
            assert instance in rule, f"{at}: {instance!r} not in {rule}"
        elif key == "anyOf":
            assert any(_passes(instance, option, root, at) for option in rule), f"{at}: no match"
        elif key == "required":
            assert not set(rule) - set(instance), f"{at}: missing {set(rule) - set(instance)}"
        elif key == "properties":
            for name, sub in rule.items():
                if name in instance:
                    validate(instance[name], sub, root, f"{at}.{name}")
        elif key == "additionalProperties":
            extra = set(instance) - set(node.get("properties", {}))
            for name in extra:
                validate(instance[name], rule, root, f"{at}.{name}")
        elif key == "items":
            for i, item in enumerate(instance):
                validate(item, rule, root, f"{at}[{i}]")
        else:
            pytest.fail(f"{at}: the test validator does not know the keyword {key!r}")


def _passes(instance: Any, node: dict[str, Any], root: dict[str, Any], at: str) -> bool:
    try:
        validate(instance, node, root, at)
    except AssertionError:
        return False
    return True


def _envelope(payload: Any) -> Envelope:
    return Envelope(
        event_id="01J0000000000000000000000",
        tenant_id="acme",
        aggregate="thread",
        aggregate_id="th1",
        seq=3,
        ts=utc_now(),
        type=payload.__struct_config__.tag,
        version=type(payload).schema_version,
        agency_id="ag1",
        run_id="r1",
        trace={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        payload=payload,
    )


REAL_EVENTS = [
    ModelCompleted(
        run_id="r1",
        step=2,
        model="openai:gpt-4.1-mini",
        message=ChatMessage(
            role="assistant", content="", tool_calls=(ToolCall(id="c1", name="ls"),)
        ),
        usage=Usage(input_tokens=10, output_tokens=3),
        cost_usd=0.0012,
    ),
    ThreadCreated(agency_id="ag1", agent_type="coder", parent=ParentRef(thread_id="p", token="t")),
    ToolStarted(run_id="r1", tool_call_id="c1", tool_name="ls", arguments="{}"),
]


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), f"{ref} points outside the document"
    node: Any = document
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict), f"{ref}: {part!r} is not inside an object"
        assert part in node, f"{ref} does not resolve ({part!r} missing)"
        node = node[part]
    return node


def _channels_of(asyncapi: dict[str, Any], action: str) -> set[str]:
    operations = asyncapi["operations"].values()
    return {op["channel"]["$ref"] for op in operations if op["action"] == action}


@pytest.fixture(scope="module")
def asyncapi() -> dict[str, Any]:
    return asyncapi_document()


def test_every_event_and_command_type_has_a_schema_file(tmp_path: Path) -> None:
    written = schema.write_schemas(tmp_path)
    assert {p.name for p in (tmp_path / "events").iterdir()} == {f"{t}.json" for t in EVENT_TYPES}
    assert {p.name for p in (tmp_path / "commands").iterdir()} == {
        f"{t}.json" for t in COMMAND_TYPES
    }
    assert len(written) == len(EVENT_TYPES) + len(COMMAND_TYPES) + 1
    assert tmp_path / "asyncapi.json" in written


@pytest.mark.parametrize("payload", REAL_EVENTS, ids=lambda p: p.__struct_config__.tag)
def test_an_encoded_event_validates_against_its_schema(payload: Any) -> None:
    tag = payload.__struct_config__.tag
    document = schema.event_schemas()[tag]
    instance = json.loads(encode(_envelope(payload)))
    validate(instance, document, document)
    assert document["properties"]["type"]["const"] == tag
    assert document["properties"]["payload"]["$ref"] == f"#/$defs/{type(payload).__name__}"


def test_an_event_does_not_validate_against_another_types_schema() -> None:
    document = schema.event_schemas()["thread.created"]
    instance = json.loads(encode(_envelope(REAL_EVENTS[2])))
    with pytest.raises(AssertionError):
        validate(instance, document, document)


def test_an_encoded_command_validates_against_its_schema() -> None:
    command = InvokeThread(
        agency_id="ag1",
        thread_id="th1",
        run_id="r1",
        messages=(ChatMessage(role="user", content="hi"),),
        strategy="interrupt",
    )
    envelope = CommandEnvelope(
        command_id="c1",
        tenant_id="acme",
        idempotency_key="k1",
        ts=utc_now(),
        type="runtime.invoke",
        payload=command,
    )
    document = schema.command_schemas()["runtime.invoke"]
    validate(json.loads(encode(envelope)), document, document)


@pytest.mark.parametrize("kind", ["events", "commands"])
def test_json_schemas_stand_alone(kind: str) -> None:
    documents = schema.event_schemas() if kind == "events" else schema.command_schemas()
    for tag, document in documents.items():
        assert document["$schema"] == schema.JSON_SCHEMA_DIALECT
        for ref in _refs(document):
            _resolve(document, ref)
        assert set(document["$defs"]) == {r.removeprefix("#/$defs/") for r in _refs(document)}, (
            f"{tag}: unused or missing definitions"
        )


def test_asyncapi_document_is_version_3(asyncapi: dict[str, Any]) -> None:
    assert asyncapi["asyncapi"] == "3.0.0"
    assert asyncapi["info"]["title"] == "Agency"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", asyncapi["info"]["version"])
    server = asyncapi["servers"]["nats"]
    assert server["protocol"] == "nats"
    assert server["host"] == "{host}"
    assert server["variables"]["host"]["default"] == "localhost:4222"


def test_asyncapi_has_one_events_channel_per_aggregate_carrying_every_type(
    asyncapi: dict[str, Any],
) -> None:
    channel = asyncapi["channels"]["events"]
    assert channel["address"] == "tenant.{tenantId}.evt.{aggregate}.{aggregateId}"
    assert set(channel["messages"]) == {cls.__name__ for cls in EVENT_TYPES.values()}
    assert "#/channels/events" in _channels_of(asyncapi, "receive")
    headers = asyncapi["components"]["schemas"]["EventHeaders"]
    assert headers["required"] == [EVENT_TYPE_HEADER]
    note = asyncapi["channels"]["note_run_canceled"]
    assert note["address"] == "tenant.{tenantId}.note.run_canceled"


def test_asyncapi_has_a_send_channel_per_command_type(asyncapi: dict[str, Any]) -> None:
    sends = _channels_of(asyncapi, "send")
    addresses = {f"#/channels/{k}": c["address"] for k, c in asyncapi["channels"].items()}
    assert {addresses[ref] for ref in sends} == {
        f"tenant.{{tenantId}}.cmd.{cls.service}.{cls.verb}" for cls in COMMAND_TYPES.values()
    }


def test_asyncapi_messages_carry_the_narrowed_envelope(asyncapi: dict[str, Any]) -> None:
    schemas = asyncapi["components"]["schemas"]
    for tag, cls in {**EVENT_TYPES, **COMMAND_TYPES}.items():
        message = asyncapi["components"]["messages"][cls.__name__]
        assert message["name"] == tag
        payload = _resolve(asyncapi, message["payload"]["$ref"])
        assert payload["properties"]["type"]["const"] == tag
        assert payload["properties"]["payload"]["$ref"] == f"#/components/schemas/{cls.__name__}"
        assert "Nats-Msg-Id" in _resolve(asyncapi, message["headers"]["$ref"])["properties"]
    assert "discriminator" not in json.dumps(schemas), "AsyncAPI wants a string discriminator"


def test_every_asyncapi_ref_resolves(asyncapi: dict[str, Any]) -> None:
    refs = set(_refs(asyncapi))
    assert refs
    for ref in refs:
        _resolve(asyncapi, ref)


def test_every_address_parameter_is_described(asyncapi: dict[str, Any]) -> None:
    for channel_id, channel in asyncapi["channels"].items():
        names = set(re.findall(r"\{(\w+)\}", channel["address"]))
        assert names == set(channel.get("parameters", {})), channel_id
    tenant = asyncapi["components"]["parameters"]["tenantId"]
    assert tenant["x-pattern"] == "^[A-Za-z0-9_-]{1,64}$"


def test_dead_letter_channel_documents_the_headers_we_set(asyncapi: dict[str, Any]) -> None:
    channel = asyncapi["channels"]["dead_letters"]
    assert channel["address"] == "dlq.{stream}.{reason}"
    headers = asyncapi["components"]["schemas"]["DeadLetterHeaders"]["properties"]
    ours = {v for k, v in vars(deadletter).items() if k.endswith("_HEADER")}
    assert set(headers) == ours | {"Nats-Msg-Id"}


def test_cli_writes_the_files_and_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "schema"
    assert main(["contracts", "schema", "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    document = msgspec.json.decode((out / "asyncapi.json").read_bytes())
    assert document["asyncapi"] == "3.0.0"
    assert (out / "events" / "tool.started.json").is_file()
    assert (out / "commands" / "runtime.invoke.json").is_file()


def _snapshot(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*.json"))}


def test_output_is_byte_identical_across_runs(tmp_path: Path) -> None:
    """Also across processes: a different hash seed must not reorder anything."""
    schema.write_schemas(tmp_path / "a")
    script = (
        "import pathlib, sys; from contracts.schema import write_schemas; "
        "write_schemas(pathlib.Path(sys.argv[1]))"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "b")],
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    first, second = _snapshot(tmp_path / "a"), _snapshot(tmp_path / "b")
    assert first == second
    assert all(data.endswith(b"}\n") for data in first.values())
