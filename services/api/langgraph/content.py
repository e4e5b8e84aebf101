"""A LangChain message's content beside plain text: its parts, text and images, read into
our `ContentPart`s (kept on the log as the client wrote them) and written back in the
client's form. Images reach the model as OpenAI's `image_url` parts (`services/llm/port`).

Read: `{"type": "text", "text"}`, OpenAI's `{"type": "image_url", "image_url": {"url",
"detail"?}}` (or the URL as a string), and LangChain's `{"type": "image", "url"}`,
`{"type": "image", "base64", "mime_type"}` and `{"type": "image", "source_type": "base64"
| "url", "data" | "url", "mime_type"}`. An image is an `http(s)` URL or inline data (a
`data:image/…;base64,` URL, or base64 with an `image/…` MIME type); the inline images of one
request hold `MAX_INLINE_IMAGE_CHARS` characters at most (the request body itself is
bounded too: 413)."""

from __future__ import annotations

import re
from typing import Any

from litestar.exceptions import ValidationException

from agency.contracts.events import ContentPart

# Every event stays well under the broker's message size: a request's input is carried by
# the command, the run's acceptance and each message's event.
MAX_INLINE_IMAGE_CHARS = 512 * 1024
_DATA_URL = re.compile(r"data:image/[a-z0-9.+-]+;base64,[A-Za-z0-9+/=\s]+", re.IGNORECASE)
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
_MIME = re.compile(r"image/[a-z0-9.+-]+", re.IGNORECASE)
_SHAPES = (
    "content parts are {type: text, text}, {type: image_url, image_url: {url}} or "
    "{type: image, url | base64 + mime_type}"
)


def _url(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationException(f"{where}: an image needs a URL ({_SHAPES})")
    if value.startswith(("https://", "http://")):
        if len(value) > 8192:
            raise ValidationException(f"{where}: an image URL has 8192 characters at most")
        return value
    if value.startswith("data:") and _DATA_URL.fullmatch(value):
        return value
    raise ValidationException(
        f"{where}: image URL {value[:40]!r}… is neither http(s) nor a data:image/…;base64, URL"
    )


def _inline(value: Any, mime_type: Any, where: str) -> str:
    if not isinstance(value, str) or not value or not _BASE64.fullmatch(value):
        raise ValidationException(f"{where}: inline image data is base64 text")
    if not isinstance(mime_type, str) or not _MIME.fullmatch(mime_type):
        raise ValidationException(f"{where}: an inline image names its mime_type (image/…)")
    return value


def _text_of(part: dict[str, Any], where: str) -> ContentPart:
    text = part.get("text", "")
    if not isinstance(text, str):
        raise ValidationException(f"{where}: a text part's `text` is a string")
    return ContentPart(type="text", text=text)


def _image_url(part: dict[str, Any], where: str) -> ContentPart:
    image = part.get("image_url")
    if isinstance(image, str):
        return ContentPart(type="image_url", url=_url(image, where))
    if not isinstance(image, dict):
        raise ValidationException(f"{where}: {_SHAPES}")
    detail = image.get("detail") or ""
    if detail not in ("", "auto", "low", "high"):
        raise ValidationException(f"{where}: image detail is auto, low or high")
    return ContentPart(type="image_url", url=_url(image.get("url"), where), detail=detail)


def _image(part: dict[str, Any], where: str) -> ContentPart:
    source = part.get("source_type") or ""
    if source not in ("", "url", "base64"):
        raise ValidationException(
            f"{where}: image source_type {str(source)[:20]!r} is url or base64"
        )
    mime = part.get("mime_type") or ""
    if source == "base64":
        data = _inline(part.get("data"), mime, where)
        return ContentPart(type="image", source_type=source, data=data, mime_type=mime)
    if part.get("base64") is not None:
        inline = _inline(part.get("base64"), mime, where)
        return ContentPart(type="image", base64=inline, mime_type=mime)
    url = _url(part.get("url"), where)
    return ContentPart(type="image", source_type=source, url=url, mime_type=mime)


def parts_of(content: list[Any]) -> tuple[ContentPart, ...]:
    """A message's content given as a list of parts (a bare string is a text part)."""
    parts: list[ContentPart] = []
    for i, part in enumerate(content):
        where = f"content part {i}"
        if isinstance(part, str):
            parts.append(ContentPart(type="text", text=part))
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        match kind:
            case "text":
                parts.append(_text_of(part, where))
            case "image_url":
                parts.append(_image_url(part, where))
            case "image":
                parts.append(_image(part, where))
            case _:
                raise ValidationException(f"{where} of type {str(kind)[:40]!r}: {_SHAPES}")
    return tuple(parts)


def inline_chars(parts: tuple[ContentPart, ...]) -> int:
    """How many characters of inline image data the parts hold."""
    return sum(
        len(p.base64) + len(p.data) + (len(p.url) if p.url.startswith("data:") else 0)
        for p in parts
    )


def check_inline_size(total: int) -> None:
    if total > MAX_INLINE_IMAGE_CHARS:
        raise ValidationException(
            f"the input's inline images hold {total} characters, more than "
            f"{MAX_INLINE_IMAGE_CHARS}: send a smaller image, or an https URL to it"
        )


def has_images(parts: tuple[ContentPart, ...]) -> bool:
    return any(p.type != "text" for p in parts)


def text_of(parts: tuple[ContentPart, ...]) -> str:
    return "".join(p.text for p in parts if p.type == "text")


def content_dict(part: ContentPart) -> dict[str, Any]:
    """A part as the client wrote it."""
    match part.type:
        case "text":
            return {"type": "text", "text": part.text}
        case "image_url":
            image = {"url": part.url} | ({"detail": part.detail} if part.detail else {})
            return {"type": "image_url", "image_url": image}
    fields = {
        "source_type": part.source_type,
        "url": part.url,
        "base64": part.base64,
        "data": part.data,
        "mime_type": part.mime_type,
    }
    return {"type": "image", **{k: v for k, v in fields.items() if v}}
