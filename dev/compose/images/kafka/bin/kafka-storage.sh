#!/usr/bin/env bash
# kafka-storage, as in the Kafka distribution (tools run with a small heap)
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx256m}" KAFKA_LOG4J_ROOT_LOGLEVEL="${KAFKA_TOOLS_LOG4J_LOGLEVEL:-WARN}" \
  exec "$(dirname "$0")/kafka-run-class.sh" kafka.tools.StorageTool "$@"
