"""Test an app's tools, middleware and blueprints in plain pytest: no NATS, no PostgreSQL,
no network, no model (`docs/testing-apps.md`).

    from agency.testing import AgentHarness, ScriptedModel, call, reply, run_tool
"""

from agency.services.testing import *  # noqa: F403 (the kit's public names, each listed in its __all__)
from agency.services.testing import __all__ as __all__
