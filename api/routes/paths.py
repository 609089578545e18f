"""Path parameters shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

SessionId = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@-]+$")]
