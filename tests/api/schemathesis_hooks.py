"""schemathesis hooks for tests/api/test_openapi_conformance.py (loaded by its CLI through
`SCHEMATHESIS_HOOKS`; the test passes the server and credentials in the environment).

- Credentials: admin routes get the admin secret, every other route a key of the test's
  tenant. The fuzzer may well rotate or revoke that very key (it is listed by `GET /keys`
  and its id is in the key): the answer is then 401, schemathesis drops the cached key and
  the next request gets a fresh one, issued by the admin.
- `/run` and `/serve` wait up to `timeoutSeconds` (300 by default) for the agents to
  answer, and no model runs here: a valid body waits at most 1 s instead, so the run ends
  as `timeout` and its answer is checked in full. Only valid values are lowered.
"""

from __future__ import annotations

import os
import re
from typing import Any

import httpx
import schemathesis

ADMIN_ROUTES = re.compile(r"^/(tenants|dlq|metrics)(/|$)")
RUN_ROUTES = frozenset({"/run", "/serve"})
RUN_WAIT = 1.0


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
        key: str = response.json()["apiKey"]
        return key

    def set(self, case: Any, data: str, _: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schemathesis.hook
def before_call(context: Any, case: Any, **kwargs: Any) -> None:
    if case.operation.path not in RUN_ROUTES or not isinstance(case.body, dict):
        return
    wait = case.body.get("timeoutSeconds", RUN_WAIT)
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 < wait <= 3600:
        case.body["timeoutSeconds"] = min(wait, RUN_WAIT)
