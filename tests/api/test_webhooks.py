"""/api/v1/webhooks: the secret shown once, admins only, validation naming the field, the
delivery log paged newest first, the test event, and the OpenAPI document."""

from __future__ import annotations

import pytest

from .support import Api, assert_error

pytestmark = pytest.mark.db

HOOKS = "/api/v1/webhooks"


def body(name: str = "ops", **fields: object) -> dict[str, object]:
    return {"name": name, "url": "https://alerts.example.com/q", "events": ["run.failed"],
            **fields}


def test_create_shows_the_secret_once_and_never_again(api: Api) -> None:
    created = api.post(HOOKS, json=body(job_prefix="etl-", tag="db"))
    assert created.status_code == 201, created.get_json()
    data = created.get_json()
    assert data["secret"].startswith("whsec_")
    assert created.headers["Location"].endswith("/api/v1/webhooks/ops")
    assert {k: data[k] for k in ("name", "url", "events", "job_prefix", "tag", "enabled")} == {
        "name": "ops", "url": "https://alerts.example.com/q", "events": ["run.failed"],
        "job_prefix": "etl-", "tag": "db", "enabled": True}
    shown = api.get(f"{HOOKS}/ops").get_json()
    listed = api.get(HOOKS).get_json()["items"]
    assert "secret" not in shown
    assert [w["name"] for w in listed] == ["ops"]
    assert "secret" not in listed[0]
    audit = api.get("/api/v1/audit").get_json()["items"]
    assert audit[0]["action"] == "webhooks.create"
    assert data["secret"] not in str(audit)
    assert_error(api.post(HOOKS, json=body()), 409, "conflict")


def test_change_test_log_and_delete(api: Api) -> None:
    api.post(HOOKS, json=body())
    changed = api.patch(f"{HOOKS}/ops", json={"events": ["node.expired", "run.missed"],
                                               "enabled": False})
    assert changed.status_code == 200
    assert changed.get_json()["events"] == ["run.missed", "node.expired"]
    assert_error(api.post(f"{HOOKS}/ops/test"), 409, "conflict")
    api.patch(f"{HOOKS}/ops", json={"enabled": True})
    queued = [api.post(f"{HOOKS}/ops/test") for _ in range(3)]
    assert {r.status_code for r in queued} == {202}
    ids = [r.get_json()["id"] for r in queued]
    assert all(r.get_json()["event"] == "webhook.test" for r in queued)
    page = api.get(f"{HOOKS}/ops/deliveries?limit=2").get_json()
    assert [d["id"] for d in page["items"]] == ids[:0:-1]
    assert page["items"][0]["status"] == "pending"
    assert page["items"][0]["attempts"] == 0
    rest = api.get(f"{HOOKS}/ops/deliveries?limit=2&cursor={page['next_cursor']}").get_json()
    assert [d["id"] for d in rest["items"]] == ids[:1]
    assert rest["next_cursor"] is None
    assert api.get(f"{HOOKS}/ops/deliveries?status=delivered").get_json()["items"] == []
    assert_error(api.get(f"{HOOKS}/ops/deliveries?status=lost"), 400, "validation_error", "status")
    assert api.delete(f"{HOOKS}/ops").status_code == 200
    assert_error(api.get(f"{HOOKS}/ops"), 404, "not_found")
    assert_error(api.get(f"{HOOKS}/ops/deliveries"), 404, "not_found")
    assert_error(api.delete(f"{HOOKS}/ops"), 404, "not_found")


@pytest.mark.parametrize(("data", "field"), [
    (body(url="ftp://x/"), "url"),
    (body(url="x" * 3000), "url"),
    (body(events=[]), "events"),
    (body(events=["run.exploded"]), "events"),
    (body(name="no spaces"), "name"),
    (body(tag="UPPER"), "tag"),
    (body(enabled="yes"), "enabled"),
    (body(extra=1), "extra"),
    ({"name": "x", "events": ["run.failed"]}, "url"),
])
def test_bad_input_is_a_400_naming_the_field(api: Api, data: dict[str, object], field: str) -> None:
    assert_error(api.post(HOOKS, json=data), 400, "validation_error", field)


def test_patch_refuses_a_new_name_and_an_empty_change(api: Api) -> None:
    api.post(HOOKS, json=body())
    assert_error(api.patch(f"{HOOKS}/ops", json={"name": "x"}), 400, "validation_error", "name")
    assert_error(api.patch(f"{HOOKS}/ops", json={}), 400, "validation_error", "body")
    assert_error(api.patch(f"{HOOKS}/nope", json={"enabled": False}), 404, "not_found")


def test_viewers_may_not_even_read_webhooks(api: Api, viewer: Api) -> None:
    """A receiver's URL is often a credential (a chat service's incoming webhook)."""
    api.post(HOOKS, json=body())
    for response in (viewer.get(HOOKS), viewer.get(f"{HOOKS}/ops"),
                     viewer.get(f"{HOOKS}/ops/deliveries"), viewer.post(HOOKS, json=body("v")),
                     viewer.post(f"{HOOKS}/ops/test"), viewer.delete(f"{HOOKS}/ops")):
        assert_error(response, 403, "forbidden")


def test_the_openapi_document_describes_webhooks(api: Api) -> None:
    document = api.get("/api/v1/openapi.json").get_json()
    paths = document["paths"]
    assert {"/api/v1/webhooks", "/api/v1/webhooks/{name}", "/api/v1/webhooks/{name}/deliveries",
            "/api/v1/webhooks/{name}/test"} <= set(paths)
    schemas = document["components"]["schemas"]
    assert "secret" in schemas["WebhookCreated"]["properties"]
    assert "secret" not in schemas["Webhook"]["properties"]
    assert schemas["WebhookInput"]["properties"]["events"]["items"]["enum"] == [
        "run.failed", "run.timed_out", "run.abandoned", "run.missed", "run.recovered",
        "node.expired"]
