"""A typed Python client of the HTTP API, async and sync (`docs/clients.md`).

from agency.client import AsyncAgencyClient
"""

from agency.services.client import AgencyClient, ApiError, AsyncAgencyClient

__all__ = ["AgencyClient", "ApiError", "AsyncAgencyClient"]
