"""A typed Python client for the HTTP API, async and sync.

```python
from agency.services.client import AsyncAgencyClient

async with AsyncAgencyClient("http://127.0.0.1:8000", api_key) as client:
    agency = await client.create_agency("support")
    thread = await client.create_thread(agency.id, "assistant")
    run = await client.invoke(agency.id, thread.id, "hello")
    async for event in client.follow(agency.id, thread.id, run.run_id):
        print(event.seq, event.type, event.data)
```
"""

from agency.services.client.aio import AsyncAgencyClient
from agency.services.client.calls import ApiError
from agency.services.client.sync import AgencyClient

__all__ = ["AgencyClient", "ApiError", "AsyncAgencyClient"]
