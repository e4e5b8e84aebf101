"""Who may connect to NATS and what each may do: one account for Agency, one per tenant.

Users and passwords live in `auth.json` next to the server's store (mode 0600); the server
reads them from `auth.conf`, rendered from that file, and reloads it on SIGHUP, so a
tenant's credentials are issued while everything runs.

Accounts are the broker's own wall between subject spaces (docs/security.md):

- `AGENCY` holds the streams (JetStream is enabled there only), the admin and one user per
  service, each allowed only the subjects and JetStream API calls it needs.
- `tenant_<t>`, one per tenant, holds the tenant's user. Nothing of `AGENCY` is visible in
  it except what `AGENCY` exports to that one account and it imports:
  - its events, live (`tenant.<t>.evt.>`);
  - deliveries to its private inbox prefix (`_INBOX_<t>.>`), where its consumers push;
  - its commands: a publish on `tenant.<t>.cmd.>` reaches the gateway (`gw.<t>.cmd.>`),
    which stores it in the commands stream with a duplicate id in the tenant's own
    namespace and answers the JetStream acknowledgement;
  - the JetStream API under the prefix `agency.api`: consumer creation (through the
    gateway, which checks every field against the tenant) and direct gets of its own
    subjects.
  A tenant's user can reach nothing else: no stream, no other tenant's subject, no
  service's consumer, and no duplicate id but its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import msgspec
from nats.errors import Error as NatsError

from agency.contracts.ids import validate_token
from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream.natsclient import connect as nats_connect
from agency.infra.nats_accounts import (
    JS_API_PREFIX,
    AccountUser,
    event_streams,
    inbox_prefix,
    render,
    service_permissions,
    tenant_permissions,
)
from agency.infra.roles import SERVICE_ROLES as SERVICE_ROLES

ADMIN = "admin"
AUTH_FILE = "auth.json"
AUTH_CONF = "auth.conf"
PID_FILE = "nats-server.pid"


class NatsUser(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    user: str
    password: str
    role: str
    tenant: str | None = None


class AuthState(msgspec.Struct, kw_only=True, omit_defaults=True):
    users: dict[str, NatsUser] = {}
    # The events log's partitions: tenants' and the gateway's rules name each stream.
    event_partitions: int = 1


class TenantCredentials(msgspec.Struct, frozen=True, kw_only=True):
    tenant_id: str
    user: str
    password: str
    inbox_prefix: str
    commands: str
    events: str
    # The JetStream API prefix the tenant's client uses (`nc.jetstream(prefix=…)`).
    js_api_prefix: str = JS_API_PREFIX


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

    def ensure(self, event_partitions: int | None = None) -> AuthState:
        """The admin and service users exist (created on first use); auth.conf is current
        (for a log of `event_partitions` partitions, when given)."""
        with self._locked() as state:
            if event_partitions is not None:
                state.event_partitions = event_partitions
            for role in (ADMIN, *SERVICE_ROLES):
                if role not in state.users:
                    state.users[role] = NatsUser(user=role, password=_password(), role=role)
            return state

    def event_partitions(self) -> int:
        """The events log's partitions the users' rules name."""
        return self._read().event_partitions

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

    def remove_tenant(self, tenant: str) -> bool:
        """Remove the tenant's user (the tenant was deleted); False when it had none. Its
        connections are closed at the server's reload."""
        name = f"tenant_{validate_token('tenant id', tenant)}"
        with self._locked() as state:
            return state.users.pop(name, None) is not None

    def reload_server(self) -> None:
        """Tell every running server of these users to read auth.conf again (SIGHUP): the
        one whose store is this directory, or each node of a cluster kept below it."""
        paths = [self.pid_path] if self.pid_path.exists() else []
        paths += sorted(self.directory.glob(f"*/{PID_FILE}"))
        if not paths:
            raise RuntimeError(f"no running nats-server found ({self.pid_path})")
        for path in paths:
            try:
                os.kill(int(path.read_text().strip()), signal.SIGHUP)
            except (OSError, ValueError) as e:
                raise RuntimeError(f"cannot reload the nats-server of {path}: {e}") from e

    def render(self, state: AuthState) -> str:
        services: list[AccountUser] = []
        tenants: dict[str, AccountUser] = {}
        for user in state.users.values():
            if user.role == "tenant" and user.tenant:
                tenants[user.tenant] = AccountUser(
                    user=user.user,
                    password=user.password,
                    permissions=tenant_permissions(user.tenant, state.event_partitions),
                )
            elif user.role in SERVICE_ROLES:
                permissions = service_permissions(user.role, state.event_partitions)
                services.append(
                    AccountUser(user=user.user, password=user.password, permissions=permissions)
                )
            else:
                services.append(AccountUser(user=user.user, password=user.password))
        return render(services, tenants, state.event_partitions)

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
        """New credentials, usable when this returns: every server has reloaded them and
        the tenant's account answers through its imports."""
        credentials = self.auth.issue_tenant(tenant)
        self.auth.reload_server()
        deadline = asyncio.get_running_loop().time() + self._timeout
        for server in self.servers.split(","):
            await self._until_wired(server, credentials, deadline)
        return IssuedCredentials(servers=self.servers, credentials=credentials)

    def remove(self, tenant: str) -> bool:
        """Remove the tenant's user, if it has one, and have every server reload: its
        password stops working and its connections are closed."""
        removed = self.auth.remove_tenant(tenant)
        if removed:
            self.auth.reload_server()
        return removed

    async def _until_wired(
        self, server: str, credentials: TenantCredentials, deadline: float
    ) -> None:
        """Wait until `server` accepts the user and its account's imports answer. nats-server
        (2.14) wires the service imports of an account that a reload introduced only at the
        next reload: an account that connects but whose imports no one answers is given
        one more."""
        loop = asyncio.get_running_loop()
        stream = event_streams(self.auth.event_partitions())[0]
        while True:
            wired = await _imports_answer(server, credentials, stream)
            if wired:
                return
            if loop.time() > deadline:
                raise RuntimeError(
                    f"the NATS server {server} did not accept the new credentials of "
                    f"{credentials.tenant_id} within {self._timeout:.0f} s"
                )
            if wired is False:
                self.auth.reload_server()
            await asyncio.sleep(0.1)


async def _imports_answer(
    server: str, credentials: TenantCredentials, stream: str = EVENTS_STREAM
) -> bool | None:
    """None: the server refuses the user (not reloaded yet); False: it accepts it but its
    account's imports do not answer yet; True: they do (a direct get of an event subject
    that does not exist is answered by JetStream, through the import)."""

    async def quiet(_: Exception) -> None:
        return None

    try:
        nc = await nats_connect(
            [server],
            user=credentials.user,
            password=credentials.password,
            inbox_prefix=credentials.inbox_prefix,
            allow_reconnect=False,
            connect_timeout=2,
            error_cb=quiet,
        )
    except (NatsError, OSError, TimeoutError):
        return None
    probe = (
        f"{credentials.js_api_prefix}.DIRECT.GET.{stream}."
        f"tenant.{credentials.tenant_id}.evt.credentials.probe"
    )
    try:
        await nc.request(probe, b"", timeout=1)
    except (NatsError, TimeoutError):
        return False
    finally:
        await nc.close()
    return True


def role_url(nats_url: str, auth_dir: str | None, role: str) -> str:
    """The URL a service of `role` connects with: its own user where Agency manages the
    users (`auth_dir`), else `nats_url` as given (an external server's own credentials)."""
    if not auth_dir:
        return nats_url
    return NatsAuth(Path(auth_dir)).url(without_credentials(nats_url), role)
