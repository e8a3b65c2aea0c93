"""Every httpx client a hook builds, routed to a handler in the test (``httpx.MockTransport``): the client's other
settings (base URL, headers, auth, timeouts) stay the hook's."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest


def route_clients(monkeypatch: pytest.MonkeyPatch, handler: Callable[[httpx.Request], httpx.Response]) -> None:
    real_client = httpx.Client
    monkeypatch.setattr(
        httpx, "Client", lambda **kwargs: real_client(**{**kwargs, "transport": httpx.MockTransport(handler)})
    )
