#!/usr/bin/env python3
"""Write the ``.env`` that docker-compose.yaml reads: ``.env.example`` with every empty secret generated.

    python3 include/deploy/make_env.py                  # creates .env next to docker-compose.yaml
    python3 include/deploy/make_env.py --output other.env --set AIRFLOW_PORT=28080

Generated: the passwords (admin, PostgreSQL, crawler database), the JWT secret and the API secret key that every
Airflow component must share, and the Fernet key that encrypts connection passwords in the metadata database. A
value already in the output file is kept, so running it again never changes a secret: a new JWT secret would only
log everyone out, but a new Fernet key makes the stored connection passwords unreadable. Python's standard library
only, so it runs on a host that has no checkout's virtualenv. The file is written readable by its owner only.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def fernet_key() -> str:
    """A Fernet key as ``cryptography.fernet.Fernet.generate_key()`` makes one: 32 random bytes, URL-safe base64."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


GENERATORS: dict[str, Callable[[], str]] = {
    "AIRFLOW_ADMIN_PASSWORD": lambda: secrets.token_urlsafe(16),
    "POSTGRES_PASSWORD": lambda: secrets.token_urlsafe(24),
    "CRAWLER_DB_PASSWORD": lambda: secrets.token_urlsafe(24),
    "AIRFLOW_JWT_SECRET": lambda: secrets.token_urlsafe(48),
    "AIRFLOW_API_SECRET_KEY": lambda: secrets.token_urlsafe(48),
    "AIRFLOW_FERNET_KEY": fernet_key,
}
LINE = re.compile(r"^(\w+)=(.*)$")


def render(template: str, existing: dict[str, str], overrides: dict[str, str]) -> str:
    """The template's lines with each value from ``overrides``, else ``existing``, else generated when the template
    leaves a secret empty, else the template's own; variables only in ``existing`` or ``overrides`` are appended."""
    out, seen = [], set()
    for line in template.splitlines():
        match = LINE.match(line)
        if not match:
            out.append(line)
            continue
        name, value = match.groups()
        seen.add(name)
        if name in overrides:
            value = overrides[name]
        elif existing.get(name):
            value = existing[name]
        elif not value and name in GENERATORS:
            value = GENERATORS[name]()
        out.append(f"{name}={value}")
    extra = {**{k: v for k, v in existing.items() if k not in seen}, **{k: v for k, v in overrides.items()}}
    out += [f"{name}={value}" for name, value in extra.items() if name not in seen]
    return "\n".join(out) + "\n"


def read_env(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    return {m.group(1): m.group(2) for m in map(LINE.match, path.read_text(encoding="utf-8").splitlines()) if m}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--template", type=Path, default=ROOT / ".env.example")
    parser.add_argument("--output", type=Path, default=ROOT / ".env")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="set a variable")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    text = render(args.template.read_text(encoding="utf-8"), read_env(args.output), overrides)
    fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    print(f"wrote {args.output} (secrets generated where empty, existing values kept)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
