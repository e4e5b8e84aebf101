"""Which of the runtime's environment variables a blueprint may read.

A blueprint names variables (`optional` flags, `immediate.nameEnv` / `descriptionEnv` /
`scopedEnv`) whose values steer its subagents and reach its log (a name and a task are
model-visible; scoped values go to the child's middleware). A blueprint the operator
defines in code or in the `--blueprints` file reads the process's environment as it is. A
blueprint a tenant saved (over HTTP, NATS or a workflow) reads only what is its own: its
`env` map, the values posted for its thread, and the variables the operator exposes to
that tenant with `AGENCY_TENANT_ENV`:

    AGENCY_TENANT_ENV="FEATURE_X,FEATURE_Y,t_0a1b=ACME_REGION"

Items are separated by commas; `NAME` exposes a variable to every tenant, `TENANT=NAME` to
that tenant (its id) only. Any other variable reads as unset for a tenant's blueprint, so a
`scopedEnv` name it lacks is asked for (`subagent_env_required`), never taken from the
process. Where a blueprint comes from is decided by where the runtime found it (the
system's static blueprints, or the agency's saved ones in the log), never by its body.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping

import msgspec

from agency.contracts.events import BlueprintSpec
from agency.contracts.events.blueprint import SubagentEntry

VARIABLE = "AGENCY_TENANT_ENV"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TENANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class TenantEnvError(ValueError):
    """`AGENCY_TENANT_ENV` holds an item that is not `NAME` or `TENANT=NAME`."""

    def __init__(self, item: str) -> None:
        self.item = item
        super().__init__(
            f"{VARIABLE}: item {item[:80]!r} is neither a variable name (`NAME`, for every "
            "tenant) nor `TENANT=NAME` (for one tenant)"
        )


class TenantEnvSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The process variables the operator exposes to tenants' blueprints: `every_tenant`
    to all, `per_tenant` by tenant id."""

    every_tenant: frozenset[str] = frozenset()
    per_tenant: dict[str, frozenset[str]] = {}

    @classmethod
    def parse(cls, text: str) -> TenantEnvSettings:
        every: set[str] = set()
        per: dict[str, set[str]] = {}
        for raw in text.split(","):
            item = raw.strip()
            if not item:
                continue
            tenant, _, name = item.rpartition("=")
            tenant, name = tenant.strip(), name.strip()
            if not _NAME.match(name) or ("=" in item and not _TENANT.match(tenant)):
                raise TenantEnvError(item)
            if tenant:
                per.setdefault(tenant, set()).add(name)
            else:
                every.add(name)
        return cls(
            every_tenant=frozenset(every), per_tenant={t: frozenset(n) for t, n in per.items()}
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TenantEnvSettings:
        source = os.environ if environ is None else environ
        return cls.parse(source.get(VARIABLE, ""))

    @classmethod
    def current(cls) -> TenantEnvSettings:
        """The settings as the process's environment has them now (parsed once per value)."""
        return _parsed(os.environ.get(VARIABLE, ""))

    def exposed(self, tenant_id: str) -> frozenset[str]:
        """The process variables a blueprint of this tenant may read."""
        return self.every_tenant | self.per_tenant.get(tenant_id, frozenset())


@functools.lru_cache(maxsize=4)
def _parsed(text: str) -> TenantEnvSettings:
    return TenantEnvSettings.parse(text)


def referenced(blueprint: BlueprintSpec) -> tuple[str, ...]:
    """Every variable the blueprint's subagent entries name, in order, once each."""
    names: dict[str, None] = {}
    for entry in blueprint.config.subagents.subagents if blueprint.config.subagents else ():
        if not isinstance(entry, SubagentEntry):
            continue
        if entry.optional:
            names[entry.optional] = None
        settings = entry.immediate_config
        if settings is not None:
            for name in (settings.name_env, settings.description_env, *settings.scoped_env):
                if name:
                    names[name] = None
    return tuple(names)


def with_visible_env(
    blueprint: BlueprintSpec,
    visible: frozenset[str] | None,
    environ: Mapping[str, str] | None = None,
) -> BlueprintSpec:
    """The blueprint as the runtime decides with it: its `env` holding, for each variable
    it names, the process's value where `visible` lets it read one (None: all, for the
    operator's own blueprints), else its own default. The process's value wins, as it
    always has for the operator's blueprints."""
    environ = os.environ if environ is None else environ
    found = {
        name: environ[name]
        for name in referenced(blueprint)
        if name in environ and (visible is None or name in visible)
    }
    if not found:
        return blueprint
    return msgspec.structs.replace(blueprint, env={**blueprint.env, **found})
