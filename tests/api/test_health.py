"""/healthz, /readyz and /metrics."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from quartzlite.api import create_app, set_node
from quartzlite.client import SchedulerClient
from quartzlite.node.stats import LATENESS_BUCKETS, Histogram
from quartzlite.storage import migrate

from .support import Api, assert_error

pytestmark = pytest.mark.db


@dataclass
class FakeLockStats:
    waits: int = 3
    wait_s: float = 0.25
    by_name: dict[str, float] = field(default_factory=lambda: {"job": 0.2, "session": 0.05})


@dataclass
class FakeStore:
    lock_stats: FakeLockStats = field(default_factory=FakeLockStats)


def observed(*values: float) -> Histogram:
    histogram = Histogram(LATENESS_BUCKETS)
    for value in values:
        histogram.observe(value)
    return histogram


@dataclass
class FakeStats:
    fires: int = 4
    runs_by_status: dict[str, int] = field(default_factory=lambda: {"succeeded": 3, "killed": 1})
    lateness: Histogram = field(default_factory=lambda: observed(0.001, 0.02, 0.3, 75.0))
    db_errors: int = 2


@dataclass
class FakeNode:
    """What the API reads of quartzlite.node.node.Node."""

    live: bool = True
    session_id: str = "sess-fake"
    stats: FakeStats = field(default_factory=FakeStats)
    prepared: dict[int, object] = field(default_factory=lambda: {1: object()})
    executing: dict[int, object] = field(default_factory=lambda: {2: object(), 3: object()})
    running: int = 1
    store: FakeStore = field(default_factory=FakeStore)
    pokes: int = 0

    def is_live(self) -> bool:
        return self.live

    def poke(self) -> None:
        self.pokes += 1

    def heartbeat_age_s(self) -> float:
        return 0.4 if self.live else 12.0


def test_healthz(anonymous: Api) -> None:
    response = anonymous.get("/healthz")

    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_readyz_is_200_when_the_database_answers_at_head(anonymous: Api) -> None:
    response = anonymous.get("/readyz")

    assert response.status_code == 200
    assert response.get_json() == {"status": "ready", "checks": {"database": "ok", "schema": "ok"}}


@pytest.fixture
def empty_database(server_url: str) -> Iterator[str]:
    """A database with no schema at all."""
    name = f"ql_empty_{uuid.uuid4().hex[:10]}"
    url = make_url(server_url).set(drivername="mysql+pymysql", database=name)
    migrate.ensure_database(url.render_as_string(hide_password=False))
    yield url.render_as_string(hide_password=False)
    admin = create_engine(make_url(server_url).set(drivername="mysql+pymysql", database=""))
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    admin.dispose()


def test_readyz_is_503_when_the_schema_is_not_at_head(empty_database: str) -> None:
    with SchedulerClient(empty_database) as client:
        response = Api(create_app(client), None).get("/readyz")

    error = assert_error(response, 503, "not_ready")
    assert error["details"]["checks"]["database"] == "ok"
    assert "quartzlite db upgrade" in error["details"]["checks"]["schema"]
    assert "schema" in error["message"]


def test_readyz_is_503_when_the_database_does_not_answer() -> None:
    with SchedulerClient("mysql+pymysql://root@127.0.0.1:1/none") as client:
        response = Api(create_app(client), None).get("/readyz")

    error = assert_error(response, 503, "not_ready")
    assert error["details"]["checks"]["database"] != "ok"


def test_readyz_under_serve_waits_for_a_live_node(client: SchedulerClient) -> None:
    app = create_app(client, expect_node=True)
    probe = Api(app, None)

    error = assert_error(probe.get("/readyz"), 503, "not_ready")
    assert error["details"]["checks"]["node"] == "not started yet"

    node = FakeNode()
    set_node(app, node)
    assert probe.get("/readyz").get_json()["checks"]["node"] == "ok"

    node.live = False
    error = assert_error(probe.get("/readyz"), 503, "not_ready")
    assert "sess-fake is not live" in error["details"]["checks"]["node"]


def _metrics(api: Api) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = api.get("/metrics")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_metrics_without_a_node(anonymous: Api) -> None:
    found = _metrics(anonymous)

    assert found["quartzlite_node_live"] == {(): 0.0}
    assert "quartzlite_fires_total" not in found


def test_metrics_read_the_node_at_scrape_time(client: SchedulerClient) -> None:
    node = FakeNode()
    probe = Api(create_app(client, node=node), None)

    found = _metrics(probe)

    assert found["quartzlite_node_live"] == {(): 1.0}
    assert found["quartzlite_fires_total"] == {(): 4.0}
    assert found["quartzlite_runs_total"][(("status", "succeeded"),)] == 3.0
    assert found["quartzlite_runs_total"][(("status", "killed"),)] == 1.0
    assert found["quartzlite_runs_total"][(("status", "failed"),)] == 0.0
    assert found["quartzlite_prepared_jobs"] == {(): 1.0}
    assert found["quartzlite_executing_jobs"] == {(): 2.0}
    assert found["quartzlite_running_runs"] == {(): 1.0}
    assert found["quartzlite_heartbeat_age_seconds"] == {(): 0.4}
    assert found["quartzlite_lock_wait_seconds_total"] == {
        (("lock", "job"),): 0.2, (("lock", "session"),): 0.05,
    }
    assert found["quartzlite_lock_waits_total"] == {(): 3.0}
    assert found["quartzlite_db_errors_total"] == {(): 2.0}
    assert found["quartzlite_fire_lateness_seconds_count"] == {(): 4.0}
    assert found["quartzlite_fire_lateness_seconds_bucket"][(("le", "0.005"),)] == 1.0
    assert found["quartzlite_fire_lateness_seconds_bucket"][(("le", "0.5"),)] == 3.0
    assert found["quartzlite_fire_lateness_seconds_bucket"][(("le", "60.0"),)] == 3.0
    assert found["quartzlite_fire_lateness_seconds_bucket"][(("le", "+Inf"),)] == 4.0

    # Counters move at the next scrape; values already counted are not counted again.
    node.stats.fires = 5
    node.stats.lateness.observe(0.002)
    again = _metrics(probe)
    assert again["quartzlite_fires_total"] == {(): 5.0}
    assert again["quartzlite_fire_lateness_seconds_count"] == {(): 5.0}
    assert again["quartzlite_fire_lateness_seconds_bucket"][(("le", "0.005"),)] == 2.0


def test_two_apps_have_separate_registries(client: SchedulerClient) -> None:
    one = Api(create_app(client, node=FakeNode()), None)
    two = Api(create_app(client), None)

    assert _metrics(one)["quartzlite_node_live"] == {(): 1.0}
    assert _metrics(two)["quartzlite_node_live"] == {(): 0.0}


def test_the_lateness_histogram_is_cumulative() -> None:
    histogram = observed(0.001, 0.004, 0.02, 0.3, 75.0)
    cumulative, total = histogram.snapshot()
    assert cumulative[0] == (0.005, 2)
    assert dict(cumulative)[0.025] == 3
    assert dict(cumulative)[60.0] == 4
    assert cumulative[-1] == (math.inf, 5)
    assert total == pytest.approx(75.325)


def test_successful_writes_poke_the_node_of_this_process(
    client: SchedulerClient, admin_secret: str
) -> None:
    node = FakeNode()
    api = Api(create_app(client, node=node), admin_secret)
    body = {"name": "poked", "schedule": "@every 1h", "command": "true"}

    assert api.post("/api/v1/jobs", json=body).status_code == 201
    assert api.post("/api/v1/jobs/poked/trigger").status_code == 202
    assert node.pokes == 2
    assert api.get("/api/v1/jobs/poked").status_code == 200  # reads never poke
    assert api.post("/api/v1/jobs", json=body).status_code == 409  # nor failed writes
    assert node.pokes == 2
