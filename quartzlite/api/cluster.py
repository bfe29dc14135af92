"""/api/v1/cluster: the nodes, as their sessions say."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from quartzlite import codec

from . import serialize
from .context import get_client
from .parse import Query

bp = Blueprint("cluster", __name__)


@bp.get("/cluster")
def show() -> Response:
    """Every registered node (host, pid, started, last heartbeat and its age by the
    database clock, clock offset to the database, capacity, tags, running jobs)."""
    Query(())
    client = get_client()
    now = client.now()
    nodes = client.cluster()
    return jsonify({"now": codec.iso(now), "nodes": [serialize.node(s, now) for s in nodes]})
