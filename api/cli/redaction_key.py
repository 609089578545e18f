"""The offline redaction key: created once per user, so `compactd compact` runs are repeatable.

A placeholder is an HMAC of the secret under a key. A fixed, public key would let anyone confirm
a guessed password from its placeholder; a key per run makes two runs on the same file differ.
So offline runs use a key made once per user and kept in a private file (mode 0600):
`$XDG_CONFIG_HOME/compactd/redaction.key` (`~/.config/compactd/redaction.key`), or the file
`--redaction-key-file` names. The service has its own (COMPACTD_REDACTION_KEY or var_dir).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path


class KeyFileError(Exception):
    """The key file cannot be read or made, or others can read it."""


def default_key_file(env: Mapping[str, str] = os.environ) -> Path:
    """Where a user's offline key lives: under $XDG_CONFIG_HOME, else ~/.config."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "compactd" / "redaction.key"


def load_or_create(path: Path) -> bytes:
    """The key in path; made (64 hex characters, mode 0600) when there is none. A file that group
    or others may read is refused: its placeholders would let them check guessed secrets."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass  # made earlier (or by a concurrent run): read it
    except OSError as exc:
        raise KeyFileError(f"cannot create the redaction key file {path}: {exc.strerror}") from None
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    try:
        mode = path.stat().st_mode
        key = path.read_text().strip()
    except OSError as exc:
        raise KeyFileError(f"cannot read the redaction key file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"the redaction key file {path} is readable by others: chmod 600 {path}")
    if len(key) < 16:
        raise KeyFileError(f"the redaction key file {path} holds no key (16 characters at least)")
    return key.encode()
