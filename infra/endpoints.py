"""`DIR/endpoints.json`: how every command finds the running system."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from agency.contracts.errors import StructuredError

ENDPOINTS_FILE = "endpoints.json"
DEFAULT_DATA_DIR = ".agency"


class Endpoints(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Written by a running system, removed on a clean stop. Later services add fields."""

    pid: int
    nats_url: str
    database_url: str
    api_url: str | None = None
    tenant_id: str | None = None
    api_key: str | None = None
    admin_secret: str | None = None
    services: tuple[str, ...] = ()
    # Where the embedded NATS keeps its users (`infra/nats_auth.py`); `nats_url` then
    # carries the admin's credentials, and each service connects as its own user.
    nats_auth_dir: str | None = None
    extra: dict[str, Any] = {}


class EndpointsNotFound(StructuredError):
    path: Path
    message = (
        "no running system found: {path} does not exist; start one with "
        "`agency up --data-dir {path.parent}` (NATS and PostgreSQL alone: "
        "`agency infra up --data-dir {path.parent}`), or pass the --data-dir of one"
    )


def resolve_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    chosen = explicit or os.environ.get("AGENCY_DATA_DIR") or DEFAULT_DATA_DIR
    return Path(chosen).expanduser().resolve()


def endpoints_path(data_dir: Path) -> Path:
    return data_dir / ENDPOINTS_FILE


def write_endpoints(data_dir: Path, endpoints: Endpoints) -> Path:
    path = endpoints_path(data_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(endpoints)) + b"\n")
    tmp.chmod(0o600)  # it holds the admin secret and an API key
    tmp.replace(path)
    return path


def read_endpoints(data_dir: Path) -> Endpoints:
    path = endpoints_path(data_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise EndpointsNotFound(path) from None
    return msgspec.json.decode(data, type=Endpoints)


def remove_endpoints(data_dir: Path, pid: int) -> None:
    """Remove the file only if it is still ours (another system may have taken the dir)."""
    try:
        current = read_endpoints(data_dir)
    except (EndpointsNotFound, msgspec.DecodeError):
        return
    if current.pid == pid:
        endpoints_path(data_dir).unlink(missing_ok=True)
