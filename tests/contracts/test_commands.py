from __future__ import annotations

import typing

import msgspec
import pytest

from agency.contracts.commands import AnyCommand, Command
from agency.contracts.ids import validate_token

COMMANDS = typing.get_args(AnyCommand)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.__name__)
def test_a_commands_service_and_verb_are_the_two_parts_of_its_type(
    command: type[Command],
) -> None:
    tag = command.__struct_config__.tag
    assert f"{command.service}.{command.verb}" == tag
    validate_token("service", command.service)
    validate_token("verb", command.verb)


def test_the_services_and_verbs_are_the_ones_the_subjects_always_had() -> None:
    assert sorted({c.service for c in COMMANDS}) == [
        "registry",
        "runtime",
        "subagents",
        "workflows",
    ]
    verbs = {c.__name__: c.verb for c in COMMANDS}
    assert verbs["CreateTenant"] == "create_tenant"
    assert verbs["CreateWorkflow"] == "create"
    assert verbs["WatchRun"] == "watch"


def test_a_command_class_without_a_service_and_verb_in_its_tag_says_so() -> None:
    class Loose(Command, frozen=True, kw_only=True, tag="loose"):
        pass

    with pytest.raises(TypeError, match=r"Loose has no tag of the form <service>\.<verb>"):
        _ = Loose.service
    assert msgspec.json.encode(Loose()) == b'{"type":"loose"}'
