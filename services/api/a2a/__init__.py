"""The A2A protocol (v1.0): each blueprint of an agency is an agent, its threads are
contexts and its runs tasks (`docs/protocols.md`)."""
