"""A2A v1.0 as the services share it: the protocol's messages on the wire (`wire.py`) and
a thread's runs read as the protocol's tasks (`tasks.py`), for the API's A2A routes and
the webhooks service's push notifications."""
