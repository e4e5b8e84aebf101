"""The worker side of isolated tools: the call protocol and the runner started under bwrap.

Imported inside the sandbox, so nothing here may import more than msgspec and the tool API.
"""
