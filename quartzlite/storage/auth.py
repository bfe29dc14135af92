"""API tokens and the audit trail: the SQL behind ``quartzlite token`` and the HTTP
API's authentication and audit log. Secrets never reach this module: only their
hashes (see :mod:`quartzlite.auth`)."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import delete, exists, func, select
from sqlalchemy.engine import RowMapping

from quartzlite.clock import utc
from quartzlite.enums import AuditSource, Role
from quartzlite.errors import Conflict, NotFound
from quartzlite.models import AuditEntry, Page, Token
from quartzlite.storage.engine import Database, RetryPolicy, Tx
from quartzlite.storage.jobs import decode_cursor, encode_cursor
from quartzlite.storage.tables import audit, tokens, ui_sessions


def token_from_row(row: RowMapping) -> Token:
    return Token(name=row["name"], role=Role(row["role"]), created_at=utc(row["created_at"]))


def audit_from_row(row: RowMapping) -> AuditEntry:
    return AuditEntry(
        id=row["id"],
        at=utc(row["recorded_at"]),
        token_name=row["token_name"],
        action=row["action"],
        job_name=row["job_name"],
        client_address=row["client_address"],
        details=json.loads(row["details"] or "{}"),
        source=AuditSource(row["source"]),
    )


class TokenStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, *, name: str, role: Role, token_hash: str, only_if_none: bool = False) -> Token | None:
        """Insert a token; :class:`Conflict` when the name is taken. With ``only_if_none``,
        insert nothing (and return None) when any token exists."""

        def tx(t: Tx) -> Token | None:
            if only_if_none and t.conn.execute(select(exists().select_from(tokens))).scalar():
                return None
            found = t.conn.execute(select(tokens).where(tokens.c.name == name)).mappings().first()
            if found is not None:
                if t.after_unknown and found["token_hash"] == token_hash:
                    return token_from_row(found)  # our own earlier commit
                raise Conflict(f"a token named {name!r} exists", details={"token": name})
            t.conn.execute(
                tokens.insert().values(
                    name=name, role=role.value, token_hash=token_hash, created_at=func.now(6)
                )
            )
            row = t.conn.execute(select(tokens).where(tokens.c.name == name)).mappings().one()
            return token_from_row(row)

        return self.db.transaction(tx, name="create_token")

    def list(self) -> list[Token]:
        with self.db.connect() as conn:
            found = conn.execute(select(tokens).order_by(tokens.c.name)).mappings().all()
        return [token_from_row(r) for r in found]

    def any(self) -> bool:
        with self.db.connect() as conn:
            return bool(conn.execute(select(exists().select_from(tokens))).scalar())

    def revoke(self, name: str) -> Token:
        """Delete the token (requests carrying it fail from now on); :class:`NotFound`."""

        def tx(t: Tx) -> Token:
            row = t.conn.execute(select(tokens).where(tokens.c.name == name)).mappings().first()
            if row is None:
                raise NotFound(f"no token named {name!r}", details={"token": name})
            t.conn.execute(delete(tokens).where(tokens.c.id == row["id"]))
            # Its dashboard sessions end with it (they are invalid without it anyway).
            t.conn.execute(delete(ui_sessions).where(ui_sessions.c.token_hash == row["token_hash"]))
            return token_from_row(row)

        return self.db.transaction(tx, name="revoke_token")

    def by_hash(self, token_hash: str) -> Token | None:
        with self.db.connect() as conn:
            row: RowMapping | None = (
                conn.execute(select(tokens).where(tokens.c.token_hash == token_hash))
                .mappings()
                .first()
            )
        return None if row is None else token_from_row(row)


class AuditStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self,
        *,
        token_name: str,
        action: str,
        job_name: str | None,
        client_address: str | None,
        details: str,
        source: AuditSource,
        retry: RetryPolicy | None = None,
    ) -> AuditEntry:
        """Append one entry (``details`` is a JSON object, already encoded)."""

        def tx(t: Tx) -> AuditEntry:
            result = t.conn.execute(
                audit.insert().values(
                    recorded_at=func.now(6),
                    token_name=token_name,
                    action=action,
                    job_name=job_name,
                    client_address=client_address,
                    details=details,
                    source=source.value,
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            entry_id = int(key[0])
            row = t.conn.execute(select(audit).where(audit.c.id == entry_id)).mappings().one()
            return audit_from_row(row)

        return self.db.transaction(tx, name="record_audit", retry=retry)

    def list(
        self,
        *,
        job: str | None,
        token: str | None,
        since: datetime | None,
        limit: int,
        cursor: str | None,
        source: AuditSource | None = None,
    ) -> Page[AuditEntry]:
        """Newest first (by id); ``next_cursor`` continues after the last item."""
        query = select(audit)
        if source is not None:
            query = query.where(audit.c.source == source.value)
        if job is not None:
            query = query.where(audit.c.job_name == job)
        if token is not None:
            query = query.where(audit.c.token_name == token)
        if since is not None:
            query = query.where(audit.c.recorded_at >= utc(since).replace(tzinfo=None))
        if cursor is not None:
            query = query.where(audit.c.id < decode_cursor(cursor, numeric=True))
        query = query.order_by(audit.c.id.desc()).limit(limit + 1)
        with self.db.connect() as conn:
            found = [audit_from_row(r) for r in conn.execute(query).mappings()]
        more = len(found) > limit
        items = found[:limit]
        return Page(items=items, next_cursor=encode_cursor(items[-1].id) if more else None)


__all__ = ["AuditStore", "TokenStore"]
