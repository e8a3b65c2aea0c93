#!/usr/bin/env bash
# kafka-broker-api-versions, as in the Kafka distribution (tools run with a small heap)
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx256m}" KAFKA_LOG4J_ROOT_LOGLEVEL="${KAFKA_TOOLS_LOG4J_LOGLEVEL:-WARN}" \
  exec "$(dirname "$0")/kafka-run-class.sh" org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
