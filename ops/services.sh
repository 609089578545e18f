#!/usr/bin/env bash
# Start the shared Redis (127.0.0.1:6379) and PostgreSQL (127.0.0.1:5432) if they are not answering.
# No Docker: the distribution's packages, installed with apt-get only when the binaries are missing.
set -euo pipefail

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

wait_for() {
  for _ in $(seq 1 100); do answers "$1" && return 0; sleep 0.1; done
  echo "services: nothing answers on 127.0.0.1:$1" >&2
  return 1
}

start_redis() {
  if answers 6379; then echo "redis: already answering on 127.0.0.1:6379"; return; fi
  command -v redis-server >/dev/null || { as_root apt-get update -qq && as_root apt-get install -y -qq redis-server; }
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  wait_for 6379 && echo "redis: started on 127.0.0.1:6379"
}

start_postgres() {
  if answers 5432; then echo "postgres: already answering on 127.0.0.1:5432"; else
    command -v pg_ctlcluster >/dev/null || { as_root apt-get update -qq && as_root apt-get install -y -qq postgresql; }
    as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
    wait_for 5432 && echo "postgres: started on 127.0.0.1:5432"
  fi
  # the tests use database "test" (trust auth on loopback)
  if ! psql -h 127.0.0.1 -U postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null | grep -q 1; then
    psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" >/dev/null 2>&1 || true
  fi
}

case "${1:-start}" in
  start) start_redis; start_postgres ;;
  *) echo "usage: $0 start" >&2; exit 2 ;;
esac
