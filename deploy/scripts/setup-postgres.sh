#!/bin/sh
# Creates Temporal's two PostgreSQL databases and brings their schemas to the image's version.
set -eu
: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${POSTGRES_PWD:?}" "${DB_PORT:=5432}"
export SQL_PASSWORD="$POSTGRES_PWD"
schema_dir=/etc/temporal/schema/postgresql/v12

until nc -z "$POSTGRES_SEEDS" "$DB_PORT"; do echo "waiting for postgresql"; sleep 1; done

for database in temporal temporal_visibility; do
  case "$database" in
    temporal) versioned="$schema_dir/temporal/versioned" ;;
    *) versioned="$schema_dir/visibility/versioned" ;;
  esac
  tool="temporal-sql-tool --plugin postgres12 --ep $POSTGRES_SEEDS -u $POSTGRES_USER -p $DB_PORT --db $database"
  $tool create || echo "database $database exists"
  $tool setup-schema -v 0.0
  $tool update-schema -d "$versioned"
done
echo "schema ready"
