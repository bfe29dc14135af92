"""Outside /api/v1, without a token: /healthz (the process answers), /readyz (the
database answers, the schema is at head and, under ``serve``, the node's session is
live) and /metrics (Prometheus text; counts only, no job names or commands).
Query parameters are ignored here, so that probes and scrapers may add their own."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from quartzlite.errors import SchemaError, StoreError

from .auth import public
from .context import ApiState, get_state
from .errors import error_response

bp = Blueprint("health", __name__)


def readiness(state: ApiState) -> dict[str, str]:
    """Each check's verdict: ``ok``, or why not (the first failing check ends it)."""
    checks: dict[str, str] = {}
    try:
        state.client.now()
        checks["database"] = "ok"
        state.client.check_ready()
        checks["schema"] = "ok"
    except SchemaError as error:
        checks["schema"] = error.message
    except StoreError as error:
        checks["database"] = error.message
    if state.expect_node or state.node is not None:
        if state.node is None:
            checks["node"] = "not started yet"
        elif not state.node.is_live():
            checks["node"] = (
                f"session {state.node.session_id} is not live "
                f"(last heartbeat {state.node.heartbeat_age_s():.1f}s ago)"
            )
        else:
            checks["node"] = "ok"
    return checks


@bp.get("/healthz")
@public
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
@public
def readyz() -> Response:
    checks = readiness(get_state())
    failing = {name: verdict for name, verdict in checks.items() if verdict != "ok"}
    if failing:
        message = "not ready: " + "; ".join(f"{k}: {v}" for k, v in failing.items())
        return error_response(503, "not_ready", message, {"checks": checks}, {"Retry-After": "1"})
    return jsonify({"status": "ready", "checks": checks})


@bp.get("/metrics")
@public
def metrics() -> Response:
    registry = get_state().registry
    assert registry is not None
    return Response(generate_latest(registry), mimetype=None, content_type=CONTENT_TYPE_LATEST)
