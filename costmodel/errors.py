"""One error type for bad user input, so every front end can report it the same way.

The CLI catches :class:`InputError` and prints ``error: <field>: <message>`` on one line and
exits with status 2; library callers get an ordinary ``ValueError`` subclass. A run that stops for a
reason outside its input (a Dask scheduler lost mid-study) is a :class:`RunStoppedError`: one line too,
with its own exit status, so scripts can tell "fix the input" from "rerun later".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

#: Characters of an offending value echoed in a message; the rest is counted, not printed.
ECHO_CHARS = 80


def shown(value: object) -> str:
    """``repr(value)``, cut to its first :data:`ECHO_CHARS` characters and a count of the whole.

    Why: the value is echoed into a one-line error, and a 20 MB cell of a pasted log was echoed whole."""
    text = repr(value)
    if len(text) <= ECHO_CHARS + 20:  # a little over is shown whole: a cut must save something
        return text
    length = len(value) if isinstance(value, (str, bytes)) else len(text)
    return f"{text[:ECHO_CHARS]}\u2026 ({length:,} chars)"


class InputError(ValueError):
    """A user-supplied value is malformed; names the field and the expected form."""

    def __init__(self, field: str, got: object, expected: str) -> None:
        self.field = field
        self.got = got
        self.expected = expected
        super().__init__(field, got, expected)

    def __str__(self) -> str:
        return f"{self.field}: got {shown(self.got)}; expected {self.expected}"

    # ``args`` are the three fields, so ``type(e)(*e.args)`` rebuilds the error: simpy copies an exception
    # that way when it leaves a simulated process, which otherwise turned a one-line error into a traceback.

    def __reduce__(self) -> tuple:
        """Pickle by the three fields, so an error raised in a worker process or on a Dask worker
        arrives intact (``ValueError``'s default would call ``__init__`` with the message alone)."""
        return (type(self), (self.field, self.got, self.expected))


#: sysexits.h EX_TEMPFAIL: "a temporary failure; the user is invited to retry" (rerunning resumes).
EXIT_RESUMABLE = 75


class RunStoppedError(RuntimeError):
    """A run stopped for a reason outside its input; the message says why and what rerunning does."""

    def __init__(self, message: str, exit_status: int = EXIT_RESUMABLE) -> None:
        self.exit_status = exit_status
        super().__init__(message)

    def __reduce__(self) -> tuple:
        return (type(self), (str(self), self.exit_status))


@contextmanager
def renamed_fields(names: Mapping[str, str], got: object = None) -> Iterator[None]:
    """Re-raise an :class:`InputError` whose field is an engine's parameter name under the user's name
    (and, with ``got``, quoting what the user typed rather than the value derived from it).

    Why: an engine validates its own arguments (``JitterDynamics(sigma, period_s)``), but the user typed
    ``--jitter`` and ``--jitter-period``; the message must name what they typed.
    """
    try:
        yield
    except InputError as error:
        if error.field in names:
            raise InputError(names[error.field], error.got if got is None else got, error.expected) from None
        raise
