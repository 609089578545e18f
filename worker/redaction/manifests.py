"""Kubernetes Secret manifests: every value under `data:` is a base64-encoded secret.

These values carry no prefix and any key name (`extra`, `.dockercfg`, `ca.pem`), so only the
manifest around them says they are secrets.
"""

from __future__ import annotations

import re

# the line may close a string the manifest was quoted in (`kind: Secret"}` in JSON)
_KIND_SECRET = re.compile(rb"(?im)^[ \t]*kind:[ \t]*[\"']?secret[\"']?[ \t\r\"'}\],]*$")
_DATA = re.compile(rb"(?m)^([ \t]*)data:[ \t]*$")
_ENTRY = re.compile(rb"([ \t]+)[\"']?[\w.-]+[\"']?:[ \t]*(.*)")
_BASE64 = re.compile(rb"[\"']?([A-Za-z0-9+/]{12,}={0,2})[\"']?[ \t]*")
_BLOCK = re.compile(rb"[|>][+-]?[ \t]*")


def _may_name_a_secret(data: bytes) -> bool:
    """Whether data holds `kind` and `secret` in any (ASCII) case, as _KIND_SECRET needs: the
    search over the whole text, line by line, is skipped where they are not (a JSON text with a
    `data:` key and no Secret)."""
    lowered = data.lower()
    return b"kind" in lowered and b"secret" in lowered


def kubernetes_secret_spans(data: bytes) -> list[tuple[str, int, int]]:
    """Byte spans of the base64 values in the `data:` maps of `kind: Secret` manifests."""
    if b"data:" not in data or not _may_name_a_secret(data) or _KIND_SECRET.search(data) is None:
        return []
    spans: list[tuple[str, int, int]] = []
    for section in _DATA.finditer(data):
        indent = len(section.group(1).expandtabs())
        pos = section.end() + 1
        block_from = -1
        block_indent = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            end = len(data) if nl < 0 else nl
            line = data[pos:end]
            stripped = line.strip()
            depth = len(line.expandtabs()) - len(line.expandtabs().lstrip())
            if stripped and depth <= indent:
                break
            if block_from >= 0 and (not stripped or depth > block_indent):
                spans[-1] = ("kubernetes_secret", block_from, end) if stripped else spans[-1]
            elif stripped and not stripped.startswith(b"#"):
                block_from = -1
                entry = _ENTRY.fullmatch(line)
                if entry is not None:
                    value = entry.group(2)
                    at = pos + entry.start(2)
                    if _BLOCK.fullmatch(value):
                        block_from, block_indent = end + 1, depth
                        spans.append(("kubernetes_secret", end + 1, end + 1))
                    elif (b64 := _BASE64.fullmatch(value)) is not None:
                        spans.append(("kubernetes_secret", at + b64.start(1), at + b64.end(1)))
            pos = end + 1
    return [s for s in spans if s[2] > s[1]]
