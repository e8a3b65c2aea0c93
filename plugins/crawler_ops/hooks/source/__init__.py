"""The HTTP source API: :class:`~crawler_ops.hooks.source.hook.SourceApiHook` and the parts it is made of (how a
batch becomes requests, how an answer is read and judged, auth and shared tokens, rate limits)."""
