"""`make data`: the third-party test data from its public upstreams, pinned and checked.

ops/data/manifest.json names every file the tests read from the shared data (../shared/data, or
COMPACTD_DATA_DIR): for each `fetch` entry its upstream repository, path, commit and full sha256.
Each missing file is downloaded from the repository at that commit, checked (size and sha256) and
only then put in place; a file already there is checked, never downloaded again. `derived` entries
(extracted from upstream rule tests) cannot be downloaded: they are checked when present and said
missing otherwise. Nothing is copied into this repository.

    python -m ops.data.fetch [--dest DIR] [--base-url URL]

`--base-url` (or COMPACTD_DATA_BASE_URL) serves `{base}/{repo}/{commit}/{path}`: GitHub's raw
files by default; the tests point it at a local server.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[2]
MANIFEST = Path(__file__).with_name("manifest.json")
RAW = "https://raw.githubusercontent.com"
TIMEOUT_SECONDS = 60


@dataclass(frozen=True, slots=True)
class Outcome:
    path: str
    status: str  # present | fetched | failed | missing (a derived file, not downloadable)
    detail: str = ""


def default_dest() -> Path:
    """Where the tests read the data: COMPACTD_DATA_DIR, else ../shared/data beside the checkout."""
    env = os.environ.get("COMPACTD_DATA_DIR")
    return Path(env) if env else REPO.parent / "shared" / "data"


def load_manifest(path: Path = MANIFEST) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verified(path: Path, entry: dict[str, Any]) -> bool:
    """Whether the file at `path` is the manifest's bytes (size, then sha256)."""
    return path.is_file() and path.stat().st_size == entry["bytes"] and sha256_of(path) == entry["sha256"]


def source_url(base: str, entry: dict[str, Any]) -> str:
    return f"{base.rstrip('/')}/{entry['repo']}/{entry['commit']}/{quote(entry['upstream_path'])}"


def download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
        body: bytes = response.read()
        return body


def fetch_one(
    entry: dict[str, Any], dest: Path, base: str, get: Callable[[str], bytes] = download
) -> Outcome:
    """One `fetch` entry in place under `dest`: checked if there, else downloaded, checked, moved in."""
    target = dest / entry["path"]
    if verified(target, entry):
        return Outcome(entry["path"], "present")
    url = source_url(base, entry)
    try:
        data = get(url)
    except (urllib.error.URLError, OSError) as exc:
        return Outcome(entry["path"], "failed", f"could not download {url}: {exc}")
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != entry["bytes"] or digest != entry["sha256"]:
        return Outcome(
            entry["path"],
            "failed",
            f"{url} is {len(data):,} bytes with sha256 {digest}, not the manifest's "
            f"{entry['bytes']:,} bytes {entry['sha256']}: not placed",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".fetch-", delete=False) as tmp:
        tmp.write(data)
    Path(tmp.name).replace(target)
    return Outcome(entry["path"], "fetched", url)


def check_derived(entry: dict[str, Any], dest: Path) -> Outcome:
    target = dest / entry["path"]
    if verified(target, entry):
        return Outcome(entry["path"], "present")
    if target.exists():
        return Outcome(entry["path"], "failed", "differs from the manifest's sha256")
    return Outcome(
        entry["path"],
        "missing",
        f"extracted from {entry['extracted_from']}: comes with the project's shared data",
    )


def fetch_all(
    manifest: dict[str, Any], dest: Path, base: str, get: Callable[[str], bytes] = download
) -> list[Outcome]:
    """Every manifest entry under `dest`, in manifest order."""
    out = [fetch_one(e, dest, base, get) for e in manifest["fetch"]]
    return out + [check_derived(e, dest) for e in manifest.get("derived", [])]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.data.fetch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=default_dest(), help="default: %(default)s")
    parser.add_argument("--base-url", default=os.environ.get("COMPACTD_DATA_BASE_URL", RAW))
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    args = parser.parse_args(argv)
    outcomes = fetch_all(load_manifest(args.manifest), args.dest, args.base_url)
    for o in outcomes:
        print(f"{o.status:8} {o.path}" + (f"  ({o.detail})" if o.status in ("failed", "missing") else ""))
    counts = {s: sum(o.status == s for o in outcomes) for s in ("present", "fetched", "failed", "missing")}
    print(
        f"data in {args.dest}: {counts['present']} present, {counts['fetched']} fetched, "
        f"{counts['failed']} failed, {counts['missing']} not downloadable (the secret samples: optional, "
        "the tests that read them skip without them)"
    )
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
