"""Fixtures of the API tests: an app on the session's database, an admin and a viewer
token, and authenticated test clients for each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

from quartzlite.api import create_app
from quartzlite.client import SchedulerClient

from .support import Api, Rows


@pytest.fixture
def app(client: SchedulerClient) -> Flask:
    return create_app(client)


@pytest.fixture
def admin_secret(client: SchedulerClient) -> str:
    # Set-up, not under test: kept out of the audit trail the tests read.
    return client.auditing(audit=False).create_token("ops-admin", "admin")[1]


@pytest.fixture
def viewer_secret(client: SchedulerClient) -> str:
    return client.auditing(audit=False).create_token("ops-viewer", "viewer")[1]


@pytest.fixture
def api(app: Flask, admin_secret: str) -> Api:
    """Requests with the admin token."""
    return Api(app, admin_secret)


@pytest.fixture
def viewer(app: Flask, viewer_secret: str) -> Api:
    """Requests with the viewer token."""
    return Api(app, viewer_secret)


@pytest.fixture
def anonymous(app: Flask) -> Api:
    """Requests without a token."""
    return Api(app, None)


@pytest.fixture
def rows(db_url: str) -> Iterator[Rows]:
    r = Rows(db_url)
    yield r
    r.close()
