#!/usr/bin/env bash
# Make sure a MySQL/MariaDB server answers at the host/port of
# QUARTZLITE_TEST_DATABASE_URL, else QUARTZLITE_DATABASE_URL, else 127.0.0.1:3306 (root,
# no password). A server on this machine is started (or installed); one elsewhere is
# only checked.
# Order: already answering -> start the installed server -> install MariaDB from the
# OS packages, start it, and create a TCP root user (Debian's root logs in over the
# unix socket only).
set -euo pipefail

PY=${PY:-.venv/bin/python}
answers() {
  "$PY" - <<'PY'
import os, sys
import pymysql
from sqlalchemy.engine import make_url
url = os.environ.get("QUARTZLITE_TEST_DATABASE_URL") or os.environ.get("QUARTZLITE_DATABASE_URL") \
    or "mysql+pymysql://root@127.0.0.1:3306/quartzlite"
u = make_url(url)
try:
    pymysql.connect(host=u.host or "127.0.0.1", port=u.port or 3306, user=u.username or "root",
                    password=u.password or "", connect_timeout=2).close()
except Exception as e:
    print(f"no answer: {e}", file=sys.stderr)
    sys.exit(1)
PY
}

wait_answer() {
  for _ in $(seq 1 60); do
    if answers 2>/dev/null; then return 0; fi
    sleep 1
  done
  answers
}

if answers 2>/dev/null; then
  exit 0
fi
host=$("$PY" -c 'import os
from sqlalchemy.engine import make_url
url = os.environ.get("QUARTZLITE_TEST_DATABASE_URL") or os.environ.get("QUARTZLITE_DATABASE_URL") or "mysql+pymysql://root@127.0.0.1:3306/"
print(make_url(url).host or "127.0.0.1")')
case "$host" in
  127.0.0.1|localhost|::1) ;;
  *) echo "the database server at $host does not answer (only a local one is started here)" >&2
     answers
     exit 1 ;;
esac

start_server() {
  mkdir -p /run/mysqld
  chown mysql:mysql /run/mysqld 2>/dev/null || true
  if [ ! -d /var/lib/mysql/mysql ] && command -v mariadb-install-db >/dev/null; then
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  fi
  if command -v start-stop-daemon >/dev/null && [ -x /usr/sbin/mariadbd ]; then
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
  elif [ -x /usr/sbin/mariadbd ]; then
    nohup /usr/sbin/mariadbd --user=mysql >/tmp/mariadbd.log 2>&1 &
  elif command -v mysqld >/dev/null; then
    nohup mysqld --user=mysql >/tmp/mysqld.log 2>&1 &
  else
    return 1
  fi
}

if [ -x /usr/sbin/mariadbd ] || command -v mysqld >/dev/null; then
  echo "starting the installed MySQL/MariaDB server" >&2
  start_server
else
  echo "installing MariaDB from the OS packages" >&2
  if [ "$(id -u)" != 0 ]; then echo "need root to install mariadb-server" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq mariadb-server >/dev/null
  start_server
fi

# A fresh Debian MariaDB lets root in over the socket only: add a TCP root user.
for _ in $(seq 1 60); do
  if command -v mariadb >/dev/null && mariadb -uroot -e "SELECT 1" >/dev/null 2>&1; then
    mariadb -uroot -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
      GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES;" || true
    break
  fi
  if answers 2>/dev/null; then break; fi
  sleep 1
done
wait_answer
echo "MySQL/MariaDB answers" >&2
