"""Portable archives of a thread (with its subagent tree), an agency or a tenant: the events
of the log as JSON Lines and each thread's files, in a tar.gz with a manifest; written from
one deployment's log and imported into another's."""
