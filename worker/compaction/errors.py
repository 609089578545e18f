"""Errors raised by the pure engine."""


class CompactionError(Exception):
    """Root of every error the engine raises."""


class InvalidTranscript(CompactionError, ValueError):
    """Raised when input messages are not a valid Anthropic conversation; the message says where."""


class UnknownFormat(CompactionError, ValueError):
    """Raised when an import cannot tell (or does not support) the transcript's format."""
