#!/usr/bin/env bash
# Restart the local MySQL/MariaDB server (for the fault suite's real-restart test):
# SHUTDOWN over SQL, wait until it stops answering, then start it the way
# ensure-mysql.sh does. Prints how long the server was away.
set -euo pipefail
PY=${PY:-.venv/bin/python}
"$PY" - <<'PY'
import os, time
import pymysql
from sqlalchemy.engine import make_url
u = make_url(os.environ.get("QUARTZLITE_TEST_DATABASE_URL") or "mysql+pymysql://root@127.0.0.1:3306/")
args = dict(host=u.host or "127.0.0.1", port=u.port or 3306, user=u.username or "root",
            password=u.password or "", connect_timeout=2)
conn = pymysql.connect(**args)
try:
    conn.cursor().execute("SHUTDOWN")
except pymysql.err.OperationalError:
    pass  # the server may drop us while it goes
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        pymysql.connect(**args).close()
        time.sleep(0.05)
    except pymysql.err.OperationalError:
        break
else:
    raise SystemExit("the server did not stop")
PY
# mariadbd removes its pid file last; make sure the old process is gone before starting.
for _ in $(seq 1 100); do pgrep -x mariadbd >/dev/null || pgrep -x mysqld >/dev/null || break; sleep 0.1; done
PY="$PY" ./scripts/ensure-mysql.sh 2>/dev/null
