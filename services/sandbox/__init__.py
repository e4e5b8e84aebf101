"""The worker side of isolated tools and isolated code agents: their protocols and the
runners started under bwrap.

Imported inside the sandbox, so nothing here may import more than msgspec and the tool or
agent API.
"""
