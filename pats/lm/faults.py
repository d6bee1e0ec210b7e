"""What a failed LLM call was, whether to try again, and messages with API keys masked.

Fault kinds come from DSPy's LM error classes, onto which both of DSPy's engines (its native HTTP
client and LiteLLM) map their errors. The two differ on broken bodies: a 200 whose body is not JSON is
`malformed` on the native client but `server_error` through LiteLLM, and a body cut short is
`connection` resp. `server_error`. Auth, quota and invalid-request errors count as `other` and are not
retried (another attempt cannot fix them).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterable

FAULT_KINDS = ("timeout", "rate_limit", "server_error", "connection", "malformed", "other")
_KEY_PATTERN = re.compile(r"sk-[A-Za-z0-9_\-]{3,}")


class MalformedAnswer(ValueError):
    """An answer that arrived but cannot be used (wrong schema, unparseable). Counted and retried."""


def mask_secrets(text: str, env_names: Iterable[str | None] = ()) -> str:
    """`text` with the values of the named environment variables and `sk-...` keys replaced by ***."""
    for name in env_names:
        value = os.environ.get(name) if name else None
        if value and len(value) >= 4:  # a 1-3 character "key" would mask ordinary words
            text = text.replace(value, "***")
    return _KEY_PATTERN.sub("***", text)


def fault_kind(exc: BaseException) -> str | None:
    """The fault kind of an exception raised while asking an LLM, or None if it is not an LLM fault.

    DSPy maps both of its engines' errors (native and LiteLLM) onto its own LM error classes; anything
    outside them (a TypeError in a program, say) is a bug and is not swallowed.
    """
    from dspy.utils import exceptions as dx

    if isinstance(exc, (MalformedAnswer, dx.AdapterParseError, dx.LMStreamAssemblyError)):
        return "malformed"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, dx.LMTimeoutError)):
        return "timeout"
    if isinstance(exc, dx.LMRateLimitError):
        return "rate_limit"
    if isinstance(exc, dx.LMTransportError):
        # The native engine reports a read timeout as a transport error.
        return "timeout" if "timed out" in str(exc).lower() else "connection"
    if isinstance(exc, dx.LMProviderError):
        status = getattr(exc, "status", None)
        if status == 200:  # a 200 whose body is not a completion
            return "malformed"
        if isinstance(exc, dx.LMServerError) or (isinstance(status, int) and status >= 500):
            return "server_error"
        return "other"
    if isinstance(exc, dx.LMError):
        return "other"
    return None


def retryable(exc: BaseException) -> bool:
    """False for faults that another attempt cannot fix: bad key, no quota, invalid request, bad config."""
    from dspy.utils import exceptions as dx

    fatal = (
        dx.LMAuthError,
        dx.LMBillingError,
        dx.LMInvalidRequestError,
        dx.LMConfigurationError,
        dx.LMUnsupportedFeatureError,
    )
    return not isinstance(exc, fatal)


def retry_after(exc: BaseException) -> float | None:
    """The server's Retry-After in seconds, where the error carries one."""
    value = getattr(exc, "retry_after", None)
    if value is None:
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        value = headers.get("retry-after") if hasattr(headers, "get") else None
    try:
        seconds = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and seconds >= 0 else None
