"""The extension API of Agency: what an app imports to build its agent system (the
`agency` package's docstring shows one).

Everything an app needs is here: the builder (`AgentSystem`), tools (`tool`,
`define_tool`, their context and errors), middleware (its hooks, its context and the
read-only `ThreadView` of the thread it sees), blueprints and their config sections, code
agents and their context, and the errors each raises. The services run what an app builds;
an app never imports them. An app imports these names from `agency`, which loads each
from its module here on first use.
"""
