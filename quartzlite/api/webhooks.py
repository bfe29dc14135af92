"""/api/v1/webhooks: webhook subscriptions by name (create, list, show, change, delete),
their delivery log, and a test delivery. Admins only, reads included: a receiver's URL
often carries a credential of its own (a chat service's incoming-webhook URL)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, url_for

from quartzlite import codec
from quartzlite.errors import ValidationError

from . import serialize
from .auth import admin_only
from .context import get_client
from .parse import Query, json_object

bp = Blueprint("webhooks", __name__)


@bp.post("/webhooks")
@admin_only
def create() -> tuple[Response, int, dict[str, str]]:
    """201 with the subscription and its signing ``secret``, shown this once."""
    Query(())
    webhook, secret = get_client().add_webhook(json_object())
    return (jsonify({**codec.webhook_to_dict(webhook), "secret": secret}), 201,
            {"Location": url_for("webhooks.show", name=webhook.name)})


@bp.get("/webhooks")
@admin_only
def list_() -> Response:
    Query(())
    return jsonify({"items": [codec.webhook_to_dict(w) for w in get_client().list_webhooks()]})


@bp.get("/webhooks/<name>")
@admin_only
def show(name: str) -> Response:
    Query(())
    return jsonify(codec.webhook_to_dict(get_client().get_webhook(name)))


@bp.patch("/webhooks/<name>")
@admin_only
def patch(name: str) -> Response:
    Query(())
    body = json_object()
    if "name" in body:
        raise ValidationError("name", "cannot be changed (delete and add the webhook again)")
    return jsonify(codec.webhook_to_dict(get_client().update_webhook(name, body)))


@bp.delete("/webhooks/<name>")
@admin_only
def delete(name: str) -> Response:
    Query(())
    return jsonify(codec.webhook_to_dict(get_client().delete_webhook(name)))


@bp.get("/webhooks/<name>/deliveries")
@admin_only
def deliveries(name: str) -> Response:
    q = Query(("status", "limit", "cursor"))
    result = get_client().list_deliveries(
        name, status=q.string("status"), limit=q.integer("limit", 100), cursor=q.cursor(),
    )
    return jsonify(serialize.page(result, codec.delivery_to_dict))


@bp.post("/webhooks/<name>/test")
@admin_only
def test(name: str) -> tuple[Response, int]:
    """202: a ``webhook.test`` event queued for this subscription; its delivery."""
    Query(())
    return jsonify(codec.delivery_to_dict(get_client().test_webhook(name))), 202
