"""Cross-origin requests: the operator's setting parsed, and an API that allows no origin
refusing a preflight with the reason instead of asking it for a key."""

from __future__ import annotations

import httpx
import pytest

from agency.services.api.cors import CorsSettingError, CorsSettings


def test_the_setting_names_origins_local_pages_or_any() -> None:
    settings = CorsSettings.parse(" https://App.example/ , local ")
    assert settings.allows("https://app.example")
    assert settings.allows("http://localhost:5173") and settings.allows("http://127.0.0.1")
    assert settings.allows("http://[::1]:3000")
    assert not settings.allows("https://other.example")
    assert not settings.allows("http://localhost.evil.example")
    assert CorsSettings.parse("*").allows("https://anything.example")
    assert not CorsSettings.parse("").enabled


def test_a_setting_that_is_not_an_origin_is_refused_with_its_name() -> None:
    with pytest.raises(CorsSettingError, match=r"AGENCY_CORS_ORIGINS: 'app\.example'"):
        CorsSettings.parse("app.example")


async def test_with_no_origin_allowed_a_preflight_is_refused_saying_why(
    client: httpx.AsyncClient,
) -> None:
    r = await client.options(
        "/langgraph/threads/search",
        headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"},
    )
    assert r.status_code == 403
    assert "AGENCY_CORS_ORIGINS" in r.json()["error"]
    assert "access-control-allow-origin" not in r.headers
    plain = await client.get("/healthz", headers={"Origin": "http://localhost:3000"})
    assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers
