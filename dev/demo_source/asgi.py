"""The demo source's HTTP plumbing over raw ASGI: a request as the handlers see it, JSON responses and errors, query
and body parsing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import msgspec

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Handler = Callable[["Request"], Awaitable["Response"]]
T = TypeVar("T")

MAX_BODY_BYTES: Final[int] = 1 << 20

_JSON_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = ((b"content-type", b"application/json"),)
_ENCODER: Final[msgspec.json.Encoder] = msgspec.json.Encoder()


class HttpError(Exception):
    """An error answered as ``{"code": status, "msg": msg}``."""

    def __init__(self, status: int, msg: str) -> None:
        """Create the error.

        :param status: HTTP status code.
        :param msg: human-readable message.
        """
        super().__init__(msg)
        self.status = status
        self.msg = msg


@dataclass(frozen=True)
class Request:
    """The parts of an HTTP request the handlers need."""

    method: str
    task_id: str
    query: dict[str, str]
    body: bytes
    headers: dict[bytes, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Response:
    """An HTTP response with a JSON body."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


def json_response(payload: object, status: int = 200) -> Response:
    """Encode ``payload`` as a JSON response.

    :param payload: any msgspec-encodable value.
    :param status: HTTP status code.
    :return: the response.
    """
    return Response(status, _ENCODER.encode(payload))


def error_response(status: int, msg: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Response:
    """Build the standard error response.

    :param status: HTTP status code.
    :param msg: human-readable message.
    :param headers: extra headers (e.g. ``Retry-After``).
    :return: the response.
    """
    return Response(status, _ENCODER.encode({"code": status, "msg": msg}), headers)


def ok_response(data: object) -> Response:
    """Wrap ``data`` in the source's success envelope.

    :param data: the ``data`` member.
    :return: ``{"code": 0, "msg": "ok", "data": data}`` with status 200.
    """
    return json_response({"code": 0, "msg": "ok", "data": data})


def decode_body(body: bytes, kind: type[T]) -> T:
    """Decode and validate a JSON request body.

    :param body: raw request body.
    :param kind: the msgspec type to decode into.
    :return: the decoded value.
    :raises HttpError: 400 on invalid JSON or values.
    """
    try:
        return msgspec.json.decode(body or b"{}", type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise HttpError(400, f"invalid body: {exc}") from exc


def query_int(query: dict[str, str], name: str, default: int) -> int:
    """Read an integer query parameter.

    :param query: parsed query string.
    :param name: parameter name.
    :param default: value when absent.
    :return: the integer.
    :raises HttpError: 400 if the value is not an integer.
    """
    text = query.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError as exc:
        raise HttpError(400, f"{name} must be an integer") from exc


def query_float(query: dict[str, str], name: str, default: float) -> float:
    """Read a non-negative number from the query string.

    :param query: parsed query string.
    :param name: parameter name.
    :param default: value when absent.
    :return: the number.
    :raises HttpError: 400 if the value is not a non-negative number.
    """
    text = query.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError as exc:
        raise HttpError(400, f"{name} must be a number") from exc
    if not value >= 0:
        raise HttpError(400, f"{name} must be >= 0")
    return value


async def read_body(receive: Receive) -> bytes:
    """Read a whole request body.

    :param receive: ASGI receive callable.
    :return: the body.
    :raises HttpError: 413 if it exceeds :data:`MAX_BODY_BYTES`.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise HttpError(413, "request body too large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_response(send: Send, response: Response) -> None:
    """Send a complete response in one body message.

    :param send: ASGI send callable.
    :param response: the response.
    """
    typed = any(name == b"content-type" for name, _ in response.headers)
    headers = [
        *(() if typed else _JSON_HEADERS),
        (b"content-length", str(len(response.body)).encode()),
        *response.headers,
    ]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})
