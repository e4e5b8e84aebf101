"""schemathesis hooks for tests/api/test_openapi_conformance.py (loaded by its CLI through
`SCHEMATHESIS_HOOKS`; the test passes the server and credentials in the environment).

Credentials only: every case is sent as generated. Admin routes get the admin secret,
every other route a key of the tenant `agency up` made. The fuzzer may well rotate or
revoke that very key (it is listed by `GET /keys` and its id is in the key): the answer is
then 401, schemathesis drops the cached key and the next request gets a fresh one, issued
by the admin.
"""

from __future__ import annotations

import os
import re
from typing import Any

import httpx
import schemathesis

ADMIN_ROUTES = re.compile(r"^/(tenants|dlq|metrics)(/|$)")


def _admin_route(case: Any) -> bool:
    return bool(ADMIN_ROUTES.match(case.operation.path))


@schemathesis.auth(cache_by_key=lambda case, _: "admin" if _admin_route(case) else "tenant")
class Credentials:
    def __init__(self) -> None:
        self.url = os.environ["AGENCY_TEST_URL"]
        self.admin = os.environ["AGENCY_TEST_ADMIN_SECRET"]
        self.tenant = os.environ["AGENCY_TEST_TENANT"]
        self.first_key: str | None = os.environ["AGENCY_TEST_KEY"]

    def get(self, case: Any, _: Any) -> str:
        if _admin_route(case):
            return self.admin
        if self.first_key is not None:
            key, self.first_key = self.first_key, None
            return key
        response = httpx.post(
            f"{self.url}/tenants/{self.tenant}/keys",
            json={"name": "schemathesis"},
            headers={"Authorization": f"Bearer {self.admin}"},
            timeout=15,
        )
        response.raise_for_status()
        issued: str = response.json()["apiKey"]
        return issued

    def set(self, case: Any, data: str, _: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}
