#!/usr/bin/env bash
# kafka-server-start: the broker, with server.properties as its argument
exec "$(dirname "$0")/kafka-run-class.sh" kafka.Kafka "$@"
