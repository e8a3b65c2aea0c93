#!/usr/bin/env bash
# java with the Kafka jars and the image's log4j configuration: kafka-run-class.sh <main class> [args]
exec java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m} ${KAFKA_OPTS:-} \
  -Dlog4j2.configurationFile="${KAFKA_LOG4J_CONFIG:-/etc/kafka/docker/log4j2.yaml}" \
  -cp "/opt/kafka/libs/*" "$@"
