"""A system prompt's redaction, remembered: the same prompt comes with every append of a session.

The proxy appends on every model call, and each append's profile carries the client's system prompt
redacted (worker/flows/append.py `profile_of`): Claude Code's is ~7,000 characters, 2-3 ms of
redaction a request for a text that never changes. The result is kept by the text's digest (never
the text itself), keyed by the tenant (no tenant's timing tells it what another sent), and the
Redactor that made it (another deployment key or rule set is not served another's result);
bounded, least recently used out.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from worker.redaction import Redactor

# below this a redaction costs about what the digest and the lookup do
MIN_CHARS = 512
# above this a prompt is redacted every time (the memo holds at most SIZE results this large)
MAX_CHARS = 256_000
SIZE = 64


class SystemRedactions:
    """redact_text for texts that recur verbatim (see the module docstring)."""

    def __init__(self, size: int = SIZE) -> None:
        self._size = size
        self._held: OrderedDict[bytes, tuple[Redactor, str]] = OrderedDict()
        self._lock = threading.Lock()

    def redact(self, redactor: Redactor, text: str, tenant_id: int) -> str:
        """redactor.redact_text(text), from the memo when this redactor made it already for this
        tenant."""
        if not MIN_CHARS <= len(text) <= MAX_CHARS:
            return redactor.redact_text(text)
        digest = hashlib.blake2b(
            text.encode("utf-8", "surrogatepass"), digest_size=32, key=b"tenant:%d" % tenant_id
        ).digest()
        with self._lock:
            hit = self._held.get(digest)
            if hit is not None and hit[0] is redactor:
                self._held.move_to_end(digest)
                return hit[1]
        out = redactor.redact_text(text)
        with self._lock:
            self._held[digest] = (redactor, out)
            self._held.move_to_end(digest)
            while len(self._held) > self._size:
                self._held.popitem(last=False)
        return out


SYSTEMS = SystemRedactions()
