#!/bin/sh
# Run once by the Postgres image on an empty data directory: sendguard's own role, not a
# superuser, owning its database.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    -v password="$SENDGUARD_DB_PASSWORD" <<'SQL'
CREATE ROLE sendguard LOGIN PASSWORD :'password' NOSUPERUSER NOCREATEDB NOCREATEROLE;
CREATE DATABASE sendguard OWNER sendguard;
SQL
