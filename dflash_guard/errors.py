"""One error root for everything that stops a command before it can give a verdict.

A *finding* (a tampered file, a dangerous pickle, a divergent token) is not an exception: it is a
result, reported with exit code 1. An `Error` means the check could not be carried out at all
(bad arguments, unreadable or malformed input, the Hub unreachable): exit code 2.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_ERROR = 2


class Error(Exception):
    """Base of every operational error; the CLI turns it into one readable line and exit 2."""

    exit_code: int = EXIT_ERROR

    def diagnostics(self) -> str:
        """A human-readable, one-paragraph explanation."""
        return str(self)


class InputError(Error):
    """A file, folder or argument that is missing, unreadable or malformed."""


class HubError(Error):
    """The Hub (or its emulator) answered with an error, timed out or sent a truncated body."""


class WriteError(InputError, OSError):
    """An output (lockfile, report, record) could not be written. An input error for the CLI (one
    line, exit 2), and still an `OSError` for callers that handle a failed write themselves."""


MESSAGE_VALUE_LIMIT = 80


def shorten(value: object, limit: int = MESSAGE_VALUE_LIMIT) -> str:
    """`repr(value)` cut to `limit` characters with a marker, for quoting untrusted values in a
    message: an error line never carries an unbounded value (a huge int's repr even fails)."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's int-to-str digit limit
        return "<an integer too large to show>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...<{len(text) - limit} more characters>"
