"""OAuth2 access tokens of a source connection, one per connection, shared by every worker through PostgreSQL.

The rule: a token is requested from the provider only by a worker holding the connection's row of
``crawler_ops.source_token`` (``SELECT ... FOR UPDATE``), and only when the row, read again under that lock, still
holds no valid token, or holds the very token the source just refused with a 401. Workers that waited for the lock
find the token the first one saved, so the provider sees one token request per expiry, however many workers and
threads need one at that moment. A refresh token the provider rotates is written in the same transaction, before
it commits: a worker killed between the provider's answer and the commit leaves the row as it was, with the refresh
token used last, which a provider with a reuse interval (Okta, Auth0 and the demo source) still accepts as long as
its successor was never used.

A process keeps the token in memory until it expires (:class:`SharedToken`, one per connection and crawler database,
:func:`shared_token`), so requests cost no round trip to PostgreSQL; the lifetime saved is the provider's
``expires_in`` less a margin (a tenth of it, at most :data:`MARGIN_S`), on PostgreSQL's clock.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import psycopg

from crawler_ops.errors import SourceError, StatusTableError
from crawler_ops.hooks.store.db import CrawlerDbHook, row_connection
from crawler_ops.hooks.store.sqlfiles import read_sql
from crawler_ops.retry import RetryPolicy

#: Most seconds before the provider's expiry a token is renewed.
MARGIN_S = 30.0
#: The lifetime assumed when the provider sends no ``expires_in``: the token is used until a 401.
DEFAULT_LIFETIME_S = 3600.0
#: The longest lifetime taken from a provider's ``expires_in``: a longer one (or inf, or a number of 400 digits) counts
#: as this.
MAX_LIFETIME_S = 365 * 86_400.0


@dataclass(frozen=True)
class Issued:
    """What the provider answered: the access token, its lifetime in seconds and the refresh token to use next
    (None: keep the one used)."""

    access_token: str
    expires_in: float
    refresh_token: str | None = None

    @property
    def lifetime_s(self) -> float:
        """How long workers use it: ``expires_in`` less a margin, so no request goes out with a token about to lapse."""
        return max(0.0, self.expires_in - min(MARGIN_S, self.expires_in / 10))


@dataclass(frozen=True)
class TokenRow:
    """The connection's row as read under its lock."""

    access_token: str | None
    left_s: float | None
    refresh_token: str | None
    seed: str | None

    def valid_unless(self, failed: str | None) -> str | None:
        """The row's token, when it is still valid and is not the one that ``failed`` (was refused by the source)."""
        if self.access_token is None or self.left_s is None or self.left_s <= 0 or self.access_token == failed:
            return None
        return self.access_token


def seed_of(secret: str) -> str:
    """What the row keeps of the connection secret its refresh token descends from (never the secret itself)."""
    return hashlib.sha256(secret.encode()).hexdigest()


class SourceTokenStore:
    """The token row of one source connection in PostgreSQL, on a connection of its own.

    :param postgres_conn_id: Airflow connection of the crawler database.
    :param conn_id: the source connection the token belongs to.
    :param lock_timeout_s: the longest wait for the row while another worker renews the token (its token request
        is bounded by the source's deadline and retries, so a longer wait means something is wrong).
    """

    def __init__(self, postgres_conn_id: str, conn_id: str, lock_timeout_s: float) -> None:
        self.hook = CrawlerDbHook(postgres_conn_id, f"source {conn_id}")
        self.conn_id = conn_id
        self.lock_timeout_ms = int(lock_timeout_s * 1000)

    @cached_property
    def db(self) -> psycopg.Connection[Any]:
        timeouts = {"lock_timeout": f"{self.lock_timeout_ms}ms"}
        return row_connection(self.hook, timeouts, "auth/add_source", {"source": self.conn_id})

    def close(self) -> None:
        db = self.__dict__.pop("db", None)
        if db is not None:
            db.close()

    def read(self) -> tuple[str | None, float]:
        """The stored token and the seconds it stays valid, without a lock."""
        try:
            try:
                row = self.db.execute(read_sql("auth/read"), {"source": self.conn_id}).fetchone()
            except psycopg.OperationalError:  # a connection lost (a server restart): once more on a new one
                self.close()
                row = self.db.execute(read_sql("auth/read"), {"source": self.conn_id}).fetchone()
        except psycopg.Error as exc:
            self.close()
            raise self.failed(exc) from exc
        return (None, 0.0) if row is None or row[0] is None else (str(row[0]), float(row[1] or 0.0))

    @contextmanager
    def locked(self) -> Iterator[tuple[TokenRow, psycopg.Cursor[Any]]]:
        """The row, locked until the block ends, and the cursor of that transaction (for :meth:`save`): it commits
        when the block ends normally, and a failure (or a kill) leaves the row as it was."""
        try:
            with self.db.transaction(), self.db.cursor() as cur:
                # A row deleted meanwhile (a test cleaning up, an operator resetting) is created again.
                cur.execute(read_sql("auth/add_source"), {"source": self.conn_id})
                found = cur.execute(read_sql("auth/lock"), {"source": self.conn_id}).fetchone()
                assert found is not None
                yield TokenRow(found[0], None if found[1] is None else float(found[1]), found[2], found[3]), cur
        except psycopg.Error as exc:
            self.close()
            raise self.failed(exc) from exc

    def save(self, cur: psycopg.Cursor[Any], issued: Issued, refresh_token: str, seed: str | None) -> None:
        """Write a new token in the transaction of :meth:`locked` (it commits when that block ends)."""
        params = {
            "source": self.conn_id,
            "access_token": issued.access_token,
            "lifetime_s": issued.lifetime_s,
            "refresh_token": refresh_token,
            "seed": seed,
        }
        cur.execute(read_sql("auth/save"), params)

    def failed(self, exc: psycopg.Error) -> StatusTableError:
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            return StatusTableError(
                f"the OAuth2 token of source '{self.conn_id}': its row in crawler_ops.source_token stayed locked "
                f"longer than {self.lock_timeout_ms / 1000:g}s (another worker renewing it)"
            )
        return StatusTableError(f"the OAuth2 token of source '{self.conn_id}': PostgreSQL failed: {exc}")


class Grant(Protocol):
    """How a token is asked for (:class:`crawler_ops.hooks.source.auth.TokenGrant`): the seed its refresh token starts
    from, the request itself (one attempt) and how a failed one is tried again."""

    seed: str | None
    #: names the task in errors
    label: str

    @property
    def retry(self) -> RetryPolicy: ...

    def request(self, refresh_token: str | None) -> Issued: ...


class SharedToken:
    """This process's view of a connection's shared token: kept in memory until it expires, renewed through
    :class:`SourceTokenStore` by one thread at a time.

    :param store: the connection's row.
    :param clock: a monotonic clock.
    """

    def __init__(self, store: SourceTokenStore, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self.lock = threading.Lock()
        self.token: str | None = None
        self.until = 0.0

    def current(self, grant: Grant) -> str:
        """A valid token: this process's, else the stored one, else a new one."""
        with self.lock:
            if self.token is not None and self.clock() < self.until:
                return self.token
            token, left = self.store.read()
            if token is not None and left > 0:
                return self.keep(token, left)
            return self.renew_locked(grant, None)

    def renew(self, grant: Grant, failed: str) -> str:
        """The source refused ``failed`` (401): a token other than it, renewed unless another thread or worker
        already did."""
        with self.lock:
            if self.token is not None and self.token != failed and self.clock() < self.until:
                return self.token
            return self.renew_locked(grant, failed)

    def renew_locked(self, grant: Grant, failed: str | None) -> str:
        """A token renewed through the row, the token request tried again as ``grant.retry`` says: each try holds
        the row for one request at most, and every wait between tries is spent with the row released (another worker
        may renew it meanwhile, which the next try then finds)."""
        return grant.retry.run(lambda: self.renew_once(grant, failed), SourceError, sleep=time.sleep)

    def renew_once(self, grant: Grant, failed: str | None) -> str:
        with self.store.locked() as (row, cur):
            # Read again under the row lock: a worker that held it before may have renewed the token meanwhile.
            found = row.valid_unless(failed)
            if found is not None:
                assert row.left_s is not None
                return self.keep(found, row.left_s)
            # The refresh token saved last, unless the connection now holds another secret (set by an operator).
            refresh = row.refresh_token if row.seed == grant.seed else None
            issued = grant.request(refresh)
            self.store.save(cur, issued, issued.refresh_token or refresh or "", grant.seed)
        return self.keep(issued.access_token, issued.lifetime_s)

    def keep(self, token: str, left_s: float) -> str:
        self.token, self.until = token, self.clock() + left_s
        return token

    def forget(self) -> None:
        with self.lock:
            self.token, self.until = None, 0.0


_shared: dict[tuple[str, str], SharedToken] = {}
_shared_lock = threading.Lock()


def shared_token(postgres_conn_id: str, conn_id: str, lock_timeout_s: float) -> SharedToken:
    """This process's shared token of a source connection, kept through the crawler database ``postgres_conn_id``."""
    with _shared_lock:
        found = _shared.get((postgres_conn_id, conn_id))
        if found is None:
            store = SourceTokenStore(postgres_conn_id, conn_id, lock_timeout_s)
            found = _shared[(postgres_conn_id, conn_id)] = SharedToken(store)
        return found


def reset_tokens() -> None:
    """Forget this process's tokens and close their database connections (a process that starts over, a test)."""
    with _shared_lock:
        shared = list(_shared.values())
        _shared.clear()
    for token in shared:
        token.store.close()


def token_for(source: Any, postgres_conn_id: str | None) -> SharedToken | None:
    """The shared token a source hook of ``source`` (a :class:`~crawler_ops.config.SourceConfig`) needs: one for the
    OAuth2 auth types with a crawler database, else None. A renewal holds the row at most as long as its token
    request may take (its deadline; retries wait with the row released), so that bounds the wait of the others."""
    if not source.auth.oauth2 or postgres_conn_id is None:
        return None
    renewal_s = source.deadline_s + 10
    return shared_token(postgres_conn_id, source.conn_id, renewal_s)
