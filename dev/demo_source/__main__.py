"""Command line entry point: ``python -m demo_source --port 18080``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import uvicorn

from demo_source.app import create_app
from demo_source.data import parse_ref

ADMIN_TOKEN_ENV = "DEMO_SOURCE_ADMIN_TOKEN"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line.

    :param argv: arguments without the program name (default: ``sys.argv``).
    :return: the parsed options.
    """
    parser = argparse.ArgumentParser(
        prog="python -m demo_source",
        description="Serve the demo job postings source API. With DEMO_SOURCE_ADMIN_TOKEN set, the /admin routes "
        "want 'Authorization: Bearer <token>'.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address")
    parser.add_argument("--port", type=int, default=18080, help="TCP port")
    parser.add_argument(
        "--default-total",
        type=int,
        default=10_000,
        help="initial records of a task first seen without PUT /admin/tasks/{task}",
    )
    parser.add_argument(
        "--default-ref",
        type=parse_ref,
        default=None,
        help="ISO reference time of such tasks (default: today's UTC midnight)",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn log level (access log is always off)",
    )
    args = parser.parse_args(argv)
    # From the environment, not the command line: every local user can read a process's arguments.
    args.admin_token = os.environ.get(ADMIN_TOKEN_ENV) or None
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the server until interrupted.

    :param argv: arguments without the program name (default: ``sys.argv``).
    """
    args = parse_args(argv)
    app = create_app(args.default_total, args.default_ref, args.admin_token)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        http="httptools",
        loop="uvloop",
        lifespan="on",
        access_log=False,
        log_level=args.log_level,
    )


if __name__ == "__main__":
    main()
