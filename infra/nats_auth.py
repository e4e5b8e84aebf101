"""Who may connect to NATS and what each may do: the services' users and tenants' users.

Users and passwords live in `auth.json` next to the server's store (mode 0600); the server
reads them from `auth.conf`, rendered from that file, and reloads it on SIGHUP, so a
tenant's credentials are issued while everything runs.

- `admin`: everything; provisioning, operators' commands, tests.
- one user per service, allowed only the subjects and JetStream API calls it needs: the
  writers (registry, runtime, tools, subagents, api) publish events and commands of every
  tenant; the projector only reads. No service may create, edit, purge or delete a stream
  (the runtime may create its leases bucket; the API may drop a dead letter).
- one user per tenant (`tenant_<t>`), for the tenant's own services: publish its commands
  (`tenant.<t>.cmd.>`), read its events (`tenant.<t>.evt.>`) live or through a consumer
  whose filter is its own subjects, replies only on its private inbox prefix
  (`_INBOX_<t>`). It can never publish an event, reach another tenant's subjects or inbox,
  or touch a stream's configuration or contents.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError

from contracts.ids import validate_token
from contracts.subjects import DEAD_LETTER_STREAM, EVENTS_STREAM
from infra.jetstream.consumers import ALL_DURABLES
from infra.jetstream.leases import LEASES_BUCKET

ADMIN = "admin"
SERVICE_ROLES = ("registry", "runtime", "tools", "subagents", "workflows", "projector", "api")
AUTH_FILE = "auth.json"
AUTH_CONF = "auth.conf"
PID_FILE = "nats-server.pid"

# Reading: stream and consumer information, single messages, consumers and their acks.
_READ_API = [
    "$JS.API.INFO",
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.MSG.GET.*",
    "$JS.API.DIRECT.GET.>",
    "$JS.API.CONSUMER.>",
    "$JS.ACK.>",
    "$JS.FC.>",
]
_WRITE = ["tenant.*.evt.>", "tenant.*.cmd.>", "dlq.>"]


class Permission(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


class Permissions(msgspec.Struct, frozen=True, kw_only=True):
    publish: Permission
    subscribe: Permission


class NatsUser(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    user: str
    password: str
    role: str
    tenant: str | None = None


class AuthState(msgspec.Struct, kw_only=True):
    users: dict[str, NatsUser] = {}


class TenantCredentials(msgspec.Struct, frozen=True, kw_only=True):
    tenant_id: str
    user: str
    password: str
    inbox_prefix: str
    commands: str
    events: str


def inbox_prefix(tenant: str) -> str:
    return f"_INBOX_{tenant}"


def service_permissions(role: str) -> Permissions:
    if role == "projector":
        # Reads the log and writes PostgreSQL; what it cannot project is dead-lettered.
        publish = Permission(allow=(*_READ_API, "dlq.>"))
    else:
        allow = [*_WRITE, *_READ_API]
        if role == "runtime":
            allow += [f"$KV.{LEASES_BUCKET}.>", f"$JS.API.STREAM.CREATE.KV_{LEASES_BUCKET}"]
        if role == "api":
            allow.append(f"$JS.API.STREAM.MSG.DELETE.{DEAD_LETTER_STREAM}")
        publish = Permission(allow=tuple(allow))
    subscribe = Permission(allow=("_INBOX.>", "tenant.*.evt.>", f"$KV.{LEASES_BUCKET}.>"))
    return Permissions(publish=publish, subscribe=subscribe)


def tenant_permissions(tenant: str) -> Permissions:
    t = validate_token("tenant id", tenant)
    consumers = f"$JS.API.CONSUMER.CREATE.{EVENTS_STREAM}"
    return Permissions(
        publish=Permission(
            allow=(
                f"tenant.{t}.cmd.>",
                f"{consumers}.*.tenant.{t}.evt.>",
                f"$JS.API.DIRECT.GET.{EVENTS_STREAM}.tenant.{t}.evt.>",
            ),
            # A consumer is named freely; never one of ours, whose filter it would change.
            deny=tuple(f"{consumers}.{d.name}.>" for d in ALL_DURABLES),
        ),
        subscribe=Permission(allow=(f"tenant.{t}.evt.>", f"{inbox_prefix(t)}.>")),
    )


def with_credentials(url: str, user: str, password: str) -> str:
    """Every URL of a comma-separated list with the user and password in it."""
    out = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        host = parts.hostname or ""
        netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
        if parts.port:
            netloc += f":{parts.port}"
        out.append(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
    return ",".join(out)


def without_credentials(url: str) -> str:
    """The URL as it may be shown: no user or password."""
    out = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        out.append(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
    return ",".join(out)


class NatsAuth:
    """The users of one embedded server, kept in `directory` (its store directory)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.absolute()

    @property
    def state_path(self) -> Path:
        return self.directory / AUTH_FILE

    @property
    def conf_path(self) -> Path:
        return self.directory / AUTH_CONF

    @property
    def pid_path(self) -> Path:
        return self.directory / PID_FILE

    def ensure(self) -> AuthState:
        """The admin and service users exist (created on first use); auth.conf is current."""
        with self._locked() as state:
            for role in (ADMIN, *SERVICE_ROLES):
                if role not in state.users:
                    state.users[role] = NatsUser(user=role, password=_password(), role=role)
            return state

    def user(self, role: str) -> NatsUser:
        state = self._read()
        if role not in state.users:
            raise KeyError(f"no NATS user {role!r} in {self.state_path}")
        return state.users[role]

    def url(self, base_url: str, role: str = ADMIN) -> str:
        user = self.user(role)
        return with_credentials(base_url, user.user, user.password)

    def issue_tenant(self, tenant: str) -> TenantCredentials:
        """A new password for the tenant's user (the old one stops working at the reload)."""
        t = validate_token("tenant id", tenant)
        name = f"tenant_{t}"
        password = _password()
        with self._locked() as state:
            state.users[name] = NatsUser(user=name, password=password, role="tenant", tenant=t)
        return TenantCredentials(
            tenant_id=t,
            user=name,
            password=password,
            inbox_prefix=inbox_prefix(t),
            commands=f"tenant.{t}.cmd.>",
            events=f"tenant.{t}.evt.>",
        )

    def reload_server(self) -> None:
        """Tell the running server to read auth.conf again (SIGHUP)."""
        try:
            pid = int(self.pid_path.read_text().strip())
        except (OSError, ValueError) as e:
            raise RuntimeError(f"no running nats-server found ({self.pid_path}: {e})") from e
        os.kill(pid, signal.SIGHUP)

    def render(self, state: AuthState) -> str:
        users = []
        for user in state.users.values():
            entry: dict[str, object] = {"user": user.user, "password": user.password}
            if user.role in SERVICE_ROLES:
                entry["permissions"] = msgspec.to_builtins(service_permissions(user.role))
            elif user.role == "tenant" and user.tenant:
                entry["permissions"] = msgspec.to_builtins(tenant_permissions(user.tenant))
            users.append(entry)
        # JSON is valid nats-server configuration syntax and quotes every value safely.
        return "authorization " + json.dumps({"users": users}, indent=2) + "\n"

    def _read(self) -> AuthState:
        try:
            return msgspec.json.decode(self.state_path.read_bytes(), type=AuthState)
        except FileNotFoundError:
            return AuthState()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[AuthState]:
        """Read, change and write the users under an exclusive lock (several processes)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        lock_path = self.directory / "auth.lock"
        with open(lock_path, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._read()
            yield state
            _write_private(self.state_path, msgspec.json.format(msgspec.json.encode(state)))
            _write_private(self.conf_path, self.render(state).encode())


def _password() -> str:
    return secrets.token_urlsafe(24)


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o600)
    tmp.replace(path)


class IssuedCredentials(msgspec.Struct, frozen=True, kw_only=True):
    servers: str
    credentials: TenantCredentials


class CredentialIssuer:
    """Issues a tenant's credentials on a server whose users Agency manages (embedded)."""

    def __init__(self, auth: NatsAuth, servers: str, *, timeout: float = 30.0) -> None:
        self.auth = auth
        self.servers = without_credentials(servers)
        self._timeout = timeout

    async def issue(self, tenant: str) -> IssuedCredentials:
        """New credentials, usable when this returns (the server has reloaded them)."""
        credentials = self.auth.issue_tenant(tenant)
        self.auth.reload_server()

        async def quiet(_: Exception) -> None:
            return None

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        while True:
            nc = NATS()
            try:
                await nc.connect(
                    servers=self.servers.split(","),
                    user=credentials.user,
                    password=credentials.password,
                    inbox_prefix=credentials.inbox_prefix,
                    allow_reconnect=False,
                    connect_timeout=2,
                    error_cb=quiet,
                )
            except (NatsError, OSError, TimeoutError):
                await nc.close()  # a refused attempt leaves a transport to close
                if loop.time() > deadline:
                    raise RuntimeError(
                        f"the NATS server did not accept the new credentials of {tenant} "
                        f"within {self._timeout:.0f} s"
                    ) from None
                await asyncio.sleep(0.05)
                continue
            await nc.close()
            return IssuedCredentials(servers=self.servers, credentials=credentials)


def role_url(nats_url: str, auth_dir: str | None, role: str) -> str:
    """The URL a service of `role` connects with: its own user where Agency manages the
    users (`auth_dir`), else `nats_url` as given (an external server's own credentials)."""
    if not auth_dir:
        return nats_url
    return NatsAuth(Path(auth_dir)).url(without_credentials(nats_url), role)
