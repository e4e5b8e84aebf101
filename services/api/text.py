"""Checks of text in request bodies that the types alone cannot express.

PostgreSQL text cannot hold NUL (U+0000), and nothing a client sends has a use for it: a
request body with a NUL anywhere in its strings is refused with a 400 naming the field.
"""

from __future__ import annotations

import msgspec

from agency.contracts.limits import has_nul


def refuse_nul(struct: msgspec.Struct) -> None:
    """Raise `ValueError` (a 400 from the decoder) when a field of `struct` holds a NUL.

    Lists and dicts (keys too) and nested structs are searched.
    """
    encoded = struct.__struct_encode_fields__
    for name, wire_name in zip(struct.__struct_fields__, encoded, strict=True):
        if has_nul(getattr(struct, name)):
            raise ValueError(
                f"`{wire_name}` contains a NUL character (\\u0000), which cannot be stored"
            )
