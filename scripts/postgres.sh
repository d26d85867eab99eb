#!/usr/bin/env bash
# A PostgreSQL server for the shared-store tests: uses the one answering on 127.0.0.1:PORT
# (default 5432), or installs Debian's `postgresql` and starts a cluster there. Prints the
# line to eval:  export ENGRAM_TEST_POSTGRES=postgres://...
#
#   eval "$(bash scripts/postgres.sh)"
#   ENGRAM_PG_PORT=5499 bash scripts/postgres.sh    # another port (a cluster of its own)
set -euo pipefail

port=${ENGRAM_PG_PORT:-5432}
log() { echo "postgres.sh: $*" >&2; }

answers() {
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h 127.0.0.1 -p "$port"
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
  fi
}

if answers; then
  log "a server answers on 127.0.0.1:$port; using it"
  echo "export ENGRAM_TEST_POSTGRES=${ENGRAM_TEST_POSTGRES:-postgres://postgres@127.0.0.1:$port/test}"
  exit 0
fi

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root (or sudo) to install and start PostgreSQL"; exit 1
  fi
}

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  log "no server on 127.0.0.1:$port and no PostgreSQL installed: apt-get install postgresql"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi

version=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
# The package's cluster when it uses this port; otherwise a cluster of our own on it.
cluster=""
while read -r ver name cport _; do
  if [ "$ver" = "$version" ] && [ "$cport" = "$port" ]; then cluster=$name; fi
done < <(pg_lsclusters --no-header 2>/dev/null || true)
if [ -z "$cluster" ]; then
  cluster="engram$port"
  log "creating cluster $version/$cluster on port $port"
  as_root pg_createcluster "$version" "$cluster" -p "$port" >&2
fi
log "starting cluster $version/$cluster"
as_root pg_ctlcluster "$version" "$cluster" start >&2 || true
for _ in $(seq 1 60); do
  answers && break
  sleep 0.5
done
answers || { log "PostgreSQL did not start on port $port"; exit 1; }

# Debian asks for passwords on TCP: give the postgres role one, and make the test database.
as_root su postgres -c "psql -q -p $port -c \"ALTER USER postgres PASSWORD 'postgres'\"" >&2
as_root su postgres -c "psql -q -p $port -tAc \"SELECT 1 FROM pg_database WHERE datname = 'test'\" | grep -q 1 || createdb -p $port test" >&2
log "PostgreSQL $version ready on 127.0.0.1:$port"
echo "export ENGRAM_TEST_POSTGRES=postgres://postgres:postgres@127.0.0.1:$port/test"
