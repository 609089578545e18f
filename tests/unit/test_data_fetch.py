"""`make data` (ops/data/fetch.py) against a local HTTP server: what is placed where, what is refused,
and that the manifest names the shared data's own bytes."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from ops.data import fetch
from tests.conftest import require

FILES = {"a/one.jsonl": b'{"type":"user"}\n' * 50, "deep/er/two.json": b"[1, 2, 3]"}


class Upstream:
    """Serves `{repo}/{commit}/{upstream path}` from a dict of bytes; counts the requests."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files, self.requests = files, 0
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.requests += 1
                body = served.files.get(unquote(self.path))
                self.send_response(200 if body is not None else 404)
                self.send_header("content-length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def entry(path: str, data: bytes) -> dict[str, Any]:
    return {
        "path": f"transcripts/{path}",
        "repo": "someone/project",
        "upstream_path": f"fixtures/{path}",
        "commit": "0" * 40,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream({f"/someone/project/{'0' * 40}/fixtures/{p}": b for p, b in FILES.items()})
    yield server
    server.close()


def test_files_are_fetched_checked_and_placed_once(upstream: Upstream, tmp_path: Path) -> None:
    """Each file lands at its manifest path with its bytes; a second run downloads nothing."""
    manifest = {"fetch": [entry(p, b) for p, b in FILES.items()], "derived": []}
    first = fetch.fetch_all(manifest, tmp_path, upstream.url)
    assert [o.status for o in first] == ["fetched", "fetched"]
    for path, data in FILES.items():
        assert (tmp_path / "transcripts" / path).read_bytes() == data
    asked = upstream.requests
    assert [o.status for o in fetch.fetch_all(manifest, tmp_path, upstream.url)] == ["present", "present"]
    assert upstream.requests == asked


def test_a_file_that_does_not_match_is_refused_and_not_placed(upstream: Upstream, tmp_path: Path) -> None:
    """Bytes whose sha256 differs from the manifest's, or a 404, fail the run and leave no file."""
    wrong = entry("a/one.jsonl", b"something else")
    gone = {**entry("deep/er/two.json", FILES["deep/er/two.json"]), "upstream_path": "fixtures/nope.json"}
    outcomes = fetch.fetch_all({"fetch": [wrong, gone]}, tmp_path, upstream.url)
    assert [o.status for o in outcomes] == ["failed", "failed"]
    assert "sha256" in outcomes[0].detail and "not placed" in outcomes[0].detail
    assert "404" in outcomes[1].detail
    assert not (tmp_path / "transcripts").exists() or not any((tmp_path / "transcripts").rglob("*"))
    # a corrupted file already in place is replaced by the good bytes
    good = entry("a/one.jsonl", FILES["a/one.jsonl"])
    (tmp_path / good["path"]).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / good["path"]).write_bytes(b"truncated")
    assert fetch.fetch_one(good, tmp_path, upstream.url).status == "fetched"
    assert fetch.verified(tmp_path / good["path"], good)


def test_derived_files_are_checked_never_downloaded(tmp_path: Path) -> None:
    """A derived entry is missing (said so, the run still succeeds), present, or failed when it differs."""
    data = b"sample\n"
    derived = {
        "path": "secrets/s.jsonl",
        "extracted_from": "x/y @ abc",
        "bytes": 7,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert fetch.check_derived(derived, tmp_path).status == "missing"
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets/s.jsonl").write_bytes(data)
    assert fetch.check_derived(derived, tmp_path).status == "present"
    (tmp_path / "secrets/s.jsonl").write_bytes(b"changed")
    assert fetch.check_derived(derived, tmp_path).status == "failed"


def test_the_manifest_names_the_shared_data_s_own_bytes(tmp_path: Path) -> None:
    """Served from the shared data under their upstream paths, every manifest file is fetched into
    an empty folder, placed where the tests read it and verified by its full sha256; make data's
    exit code is 0 and a second run finds everything present."""
    source = fetch.default_dest()
    require(source.is_dir(), f"needs the shared data: not found at {source} (set COMPACTD_DATA_DIR)")
    manifest = fetch.load_manifest()
    assert all(len(e["sha256"]) == 64 and len(e["commit"]) == 40 for e in manifest["fetch"])
    files = {
        f"/{e['repo']}/{e['commit']}/{e['upstream_path']}": (source / e["path"]).read_bytes()
        for e in manifest["fetch"]
    }
    server = Upstream(files)
    try:
        dest = tmp_path / "data"
        assert fetch.main(["--dest", str(dest), "--base-url", server.url]) == 0
        for e in manifest["fetch"]:
            assert fetch.verified(dest / e["path"], e), e["path"]
        for e in manifest["derived"]:
            assert fetch.verified(source / e["path"], e), e["path"]
        outcomes = fetch.fetch_all(manifest, dest, server.url)
        assert {o.status for o in outcomes[: len(manifest["fetch"])]} == {"present"}
    finally:
        server.close()
