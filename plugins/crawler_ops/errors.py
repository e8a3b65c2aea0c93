"""The exception tree of crawler_ops: one base class, a few specific failures, messages that name the input."""

from __future__ import annotations


class CrawlerError(Exception):
    """Base class of every error raised by crawler_ops."""


class ConfigError(CrawlerError):
    """The YAML config (or a run parameter) is invalid; the message names the task and the field."""


class SourceError(CrawlerError):
    """The source API failed or answered something unusable.

    :param retriable: True for failures worth retrying later (5xx, timeouts, 429); False for a bad request,
        a malformed body or a wrong shape, which retrying will not fix.
    :param retry_after: seconds the source asked us to wait (a 429's Retry-After), if any.
    """

    def __init__(self, message: str, *, retriable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.retry_after = retry_after


class SourcePausedError(SourceError):
    """The source connection's shared rate limit has no request slot before the request's deadline (a long
    Retry-After, or a deep queue of requests): the request fails at once, retriable, instead of waiting that long;
    the hook does not retry it itself (Airflow's retries do, later)."""


class SourceDeferral(CrawlerError):
    """A chunk's request must wait longer than ``source.defer_after_s`` (a long Retry-After, a paused or busy shared
    rate limit): the chunk stops at a batch boundary and hands its worker slot to Airflow's triggerer, which resumes
    it once the source opens. Raised only by a hook a deferrable chunk built; never retried by the hook itself.

    :param wait_s: how long the source asked to wait.
    """

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class DeliveryError(CrawlerError):
    """Kafka did not confirm a delivery, or the topic is missing and cannot be created."""


class RegistryError(CrawlerError):
    """The Schema Registry refused a schema or did not answer.

    :param retriable: True when asking again later may pass (the registry down, a 5xx, a timeout); False for an
        answer that retrying will not change (an incompatible schema, a subject or id that does not exist, a refused
        login).
    :param status: the registry's HTTP status (None when it did not answer).
    :param retry_after: seconds the registry asked us to wait (its Retry-After), if any.
    """

    def __init__(
        self, message: str, *, retriable: bool, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.status = status
        self.retry_after = retry_after


class StatusTableError(CrawlerError):
    """The progress store or the status table is unusable or inconsistent."""


class AnswerTooHeavyError(SourceError):
    """An answer over ``source.max_response_mb``, or not finished within ``source.deadline_s``: a request for fewer
    records may pass (a page is then read in parts, :mod:`crawler_ops.hooks.source.parts`)."""


class TokenExpiredError(SourceError):
    """A rule of ``source.responses`` says the token the request carried expired (``authorization``: the header it
    carried); the hook renews the shared token once and retries."""

    def __init__(self, message: str, authorization: str | None) -> None:
        super().__init__(message, retriable=True)
        self.authorization = authorization


class PageSkippedError(SourceError):
    """A ``skip`` rule of ``source.responses`` matched a page: its batch is recorded done without records, with one
    dead letter naming the rule (``envelope``: the answer's body, as far as it decodes)."""

    def __init__(self, message: str, envelope: object) -> None:
        super().__init__(message, retriable=False)
        self.envelope = envelope
