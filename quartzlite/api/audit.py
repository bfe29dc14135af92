"""/api/v1/audit: who changed what, through the API, the dashboard, the CLI or the
library (``source``), newest first (admins only)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from . import serialize
from .auth import admin_only
from .context import get_client
from .parse import Query

bp = Blueprint("audit", __name__)


@bp.get("/audit")
@admin_only
def list_() -> Response:
    q = Query(("job", "token", "source", "since", "limit", "cursor"))
    result = get_client().list_audit(
        job=q.string("job"),
        token=q.string("token"),
        source=q.string("source"),
        since=q.instant("since"),
        limit=q.integer("limit", 100),
        cursor=q.cursor(),
    )
    return jsonify(serialize.page(result, serialize.audit_entry))
