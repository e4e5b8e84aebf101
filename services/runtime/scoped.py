"""Scoped variables of a subagent spawn (`immediate.scopedEnv` of its entry).

A child of an entry naming `scopedEnv` needs each of those variables in its scope. Each
value comes from the runtime's environment (read at the decision, like `optional` flags:
set them alike on every runtime worker) or, failing that, from the values provided for
this thread through `POST /threads/{t}/variables/{r}`. The values travel to the child
sealed (`services/common/sealing.py`) in `subagent.requested` and its `thread.created`,
out of every model's sight: they are neither arguments of the call nor part of any
message. A variable unset or empty in both places is missing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from services.runtime.state import ThreadState


def scoped_values(
    state: ThreadState, names: tuple[str, ...], env: Mapping[str, str] | None = None
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The values found for `names`, and the names found nowhere, in order."""
    env = os.environ if env is None else env
    provided: dict[str, str] | None = None  # opened only when the environment lacks one
    values: dict[str, str] = {}
    missing: list[str] = []
    for name in names:
        value = env.get(name, "")
        if not value:
            provided = state.provided_env() if provided is None else provided
            value = provided.get(name, "")
        if value:
            values[name] = value
        else:
            missing.append(name)
    return values, tuple(missing)
