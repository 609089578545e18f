"""The service's redaction key: COMPACTD_REDACTION_KEY, or one generated once into var_dir.

Apart from worker.resources so that `compactd up` makes the key before its children start without
importing the store, the cache and the detectors (they are the children's to load).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.settings import Settings


def redaction_key(settings: Settings) -> bytes:
    """Settings.redaction_key, or a key generated once into var_dir (mode 0600) and reused."""
    if settings.redaction_key:
        return settings.redaction_key.encode()
    path = Path(settings.var_dir) / "redaction.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip().encode()
