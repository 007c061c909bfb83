#!/bin/sh
# Creates the namespace and registers durability's search attributes (idempotent).
set -eu
namespace="${TEMPORAL_NAMESPACE:-default}"

until temporal operator cluster health >/dev/null 2>&1; do echo "waiting for temporal"; sleep 2; done
temporal operator namespace describe -n "$namespace" >/dev/null 2>&1 \
  || temporal operator namespace create -n "$namespace" --retention 72h

# Keep in step with workflows/search_attributes.py (tests/test_compose.py checks it).
for attribute in DurabilityObjectId=Keyword DurabilityLedgerId=Keyword \
                 DurabilityNextTickAt=Datetime DurabilityScheduleVersion=Int; do
  temporal operator search-attribute create -n "$namespace" \
    --name "${attribute%%=*}" --type "${attribute#*=}" || true
done
echo "namespace $namespace ready"
