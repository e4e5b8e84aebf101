"""`${ENV:NAME}` references in the header and env values an operator gives a connection
(an MCP server's, a remote agent's): the log keeps the reference, never the secret; the
process that connects reads `NAME` from its own environment."""

from __future__ import annotations

import re
from collections.abc import Mapping

_REFERENCE = re.compile(r"\$\{ENV:([A-Za-z_][A-Za-z0-9_]*)\}")


class UnsetReference(Exception):
    """A value references a variable this process's environment does not set."""

    def __init__(self, what: str, key: str, variable: str) -> None:
        self.key = key
        self.variable = variable
        super().__init__(
            f"{what} {key!r} references ${{ENV:{variable}}}, which is not set in this "
            "service's environment"
        )


def resolved(values: Mapping[str, str], what: str, environ: Mapping[str, str]) -> dict[str, str]:
    """`values` with every reference replaced by its variable's value in `environ`;
    `UnsetReference` names the `what` (`header`, `env`), the key and the variable."""

    def value_of(key: str, template: str) -> str:
        def substitute(match: re.Match[str]) -> str:
            variable = match.group(1)
            if variable not in environ:
                raise UnsetReference(what, key, variable)
            return environ[variable]

        return _REFERENCE.sub(substitute, template)

    return {key: value_of(key, template) for key, template in values.items()}
