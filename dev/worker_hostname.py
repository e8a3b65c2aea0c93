"""``[core] hostname_callable`` of the local Celery workers: the name in ``CRAWLER_OPS_WORKER_HOSTNAME``, so
task instances show which of several workers on one machine ran them; the machine's name otherwise."""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return os.environ.get("CRAWLER_OPS_WORKER_HOSTNAME") or socket.getfqdn()
