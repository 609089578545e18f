"""Path parameters shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from worker.contracts import SESSION_ID_MAX_LENGTH, SESSION_ID_PATTERN

# the rule is worker/contracts.py's; here it is a path parameter
SessionId = Annotated[str, Path(min_length=1, max_length=SESSION_ID_MAX_LENGTH, pattern=SESSION_ID_PATTERN)]
