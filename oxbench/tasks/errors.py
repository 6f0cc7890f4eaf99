"""Errors raised while loading task data: one line that names the file, the row and the field."""

from __future__ import annotations


class TaskError(ValueError):
    """Task data that cannot be used: a malformed file, a row without a field, a bad source."""


class TaskFileNotFoundError(TaskError, FileNotFoundError):
    """A task data file or directory that does not exist (also a :class:`FileNotFoundError`)."""
