"""The inspector (/ui) in a real headless Chromium, and `compactd stats`, against a real `compactd
api` and `compactd worker` that compacted a real transcript through several epochs."""

from __future__ import annotations

import io
import itertools
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import redis

from tests.conftest import REPO, require
from tests.factories import long_session, tool_unit, user
from tests.fakes.messages_api import FakeMessagesAPI, reply, tool_call
from tests.integration.conftest import Worker, flush_prefix, free_port, make_settings, settings_env, wait_for
from worker.store.db import make_engine, migrate
from worker.store.tenants import create_tenant

pytestmark = [pytest.mark.services, pytest.mark.browser]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SECRET = "AKIAIOSFODNN7EXAMPLF"
SERVED_RGB = (0x1F, 0x6F, 0xEB)  # the served-prompt line in inspector.js
BUDGET_RGB = (0xD1, 0x24, 0x2F)  # the dashed budget line
# screenshots of each view go here when set (docs/img/ holds the committed ones)
SHOTS = os.environ.get("COMPACTD_SCREENSHOTS")
EPOCH_RGB = {(0x82, 0x50, 0xDF), (0xE1, 0x6F, 0x24)}  # structural / summary epoch marks
RAW_RGB = (0xD0, 0xD7, 0xDE)  # the uncompacted history's grey area


@dataclass
class Service:
    url: str
    key: str
    other_key: str
    env: dict[str, str]

    def get(self, path: str) -> Any:
        r = httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.key}"}, timeout=30)
        r.raise_for_status()
        return r.json()


# four command outputs of ~55 KB each: offloaded at ingest (COMPACTD_OFFLOAD_TOKENS, 10k by default)
OUTPUTS = [
    "\n".join(f"{n:05d} build step {n} of target {k}: compiled, linked, ok" for n in range(1200))
    for k in range(4)
]


def offloading_session() -> list[dict[str, Any]]:
    """A task, four commands whose outputs are offloaded, and the model's final reply."""
    messages: list[dict[str, Any]] = [user("Build the four targets and tell me which failed.")]
    for k, text in enumerate(OUTPUTS):
        messages += tool_unit(f"toolu_build{k:03d}", {"command": f"make target{k}"}, text)
    messages.append({"role": "assistant", "content": "All four targets built; none failed."})
    return messages


def drop_in_session(url: str, key: str) -> None:
    """A conversation through POST /v1/messages, as an SDK agent has it: a tool call, its result,
    the model's final reply (recorded by compactd: the session ends with it)."""
    import anthropic

    tools = [{"name": "bash", "description": "Run a command.", "input_schema": {"type": "object"}}]
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "How many Python files are here?"}]
    try:
        for _ in range(2):
            reply = client.messages.create(
                model="claude-sonnet-4-6",
                max_tokens=256,
                tools=tools,
                messages=messages,
                extra_headers={"x-compactd-session": "dropin"},
            )
            messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                break
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": calls[0].id, "content": "17"}],
                }
            )
    finally:
        client.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Service]:
    """API + worker processes; session `real` appended in chunks (each compacted before the next,
    so there are several epochs), working memory changed, a secret planted; another tenant's
    session beside it."""
    tmp = tmp_path_factory.mktemp("ui")
    key = f"cpd_{uuid.uuid4().hex}"
    port = free_port()
    upstream = FakeMessagesAPI().start()
    upstream.script(
        tool_call("bash", {"command": "ls *.py | wc -l"}, tool_id="toolu_count01"), reply("There are 17.")
    )
    settings = make_settings(
        tmp,
        f"sqlite:///{tmp / 'compactd.db'}",
        redis_url,
        port=port,
        default_api_key=key,
        upstream_url=upstream.base_url,
    )
    # one at a time, with room: start-up loads the secret rules, on a machine with 2 shared cores
    api = Worker(settings, "api", log=tmp / "api.log")
    api.wait_ready("api.started", timeout=120)
    worker = Worker(settings, "worker", "--concurrency=1", log=tmp / "worker.log")
    try:
        worker.wait_ready(timeout=120)
        engine = make_engine(settings.database_url)
        migrate(engine)
        other_key = create_tenant(engine, f"other-{uuid.uuid4().hex[:6]}")[1]
        engine.dispose()
        url = f"http://127.0.0.1:{port}"
        http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        messages = long_session()
        first = messages[0]["content"]
        blocks = [{"type": "text", "text": first}] if isinstance(first, str) else list(first)
        planted = {"role": "user", "content": [*blocks, {"type": "text", "text": f"deploy with {SECRET}"}]}
        http.post("/v1/sessions/real/turns", json={"messages": [planted], "context_window": 12_000})
        for i in range(1, len(messages), 25):
            r = http.post("/v1/sessions/real/turns", json={"messages": messages[i : i + 25]})
            assert r.status_code == 200, r.text
            version = r.json()["version"]
            wait_for(lambda v=version: http.get("/v1/sessions/real").json()["compacted_through"] >= v, 60)
        # small chunks, each compacted before the next: many epochs, their lines close together
        http.post("/v1/sessions/crowded/turns", json={"messages": [planted], "context_window": 6_000})
        for i, n in [(i, 20) for i in range(1, 60, 20)] + [(i, 3) for i in range(61, 151, 3)]:
            r = http.post("/v1/sessions/crowded/turns", json={"messages": messages[i : i + n]})
            assert r.status_code == 200, r.text
            version = r.json()["version"]
            wait_for(lambda v=version: http.get("/v1/sessions/crowded").json()["compacted_through"] >= v, 60)
        ops = [{"op": "add", "section": "decisions", "value": "Inspect the epochs in the browser"}]
        assert http.patch("/v1/sessions/real/memory", json={"ops": ops}).status_code == 200
        r = http.post("/v1/sessions/offloads/turns", json={"messages": offloading_session()})
        assert r.status_code == 200, r.text
        drop_in_session(url, key)
        wait_for(lambda: http.get("/v1/sessions/dropin").json().get("version", 0) >= 4, 30)
        http.post("/v1/sessions/short/turns", json={"messages": [{"role": "user", "content": "hi"}]})
        # a decision recorded, then the next user turn: it carries the change as a memory note
        ops = [{"op": "add", "section": "decisions", "value": "Answer in French"}]
        assert http.patch("/v1/sessions/short/memory", json={"ops": ops}).status_code == 200
        reply_and_ask = [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "ça va ?"}]
        http.post("/v1/sessions/short/turns", json={"messages": reply_and_ask}).raise_for_status()
        httpx.post(
            f"{url}/v1/sessions/not-yours/turns",
            json={"messages": [{"role": "user", "content": "private"}]},
            headers={"Authorization": f"Bearer {other_key}"},
        ).raise_for_status()
        http.close()
        yield Service(url, key, other_key, settings_env(settings))
    finally:
        worker.stop()
        api.stop()
        upstream.stop()
        flush_prefix(redis_url, settings.redis_prefix)
        redis.Redis.from_url(redis_url).delete(settings.queue)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    require(
        Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(),
        "Chromium not installed (apt-get install -y chromium chromium-driver)",
    )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2200"):
        options.add_argument(arg)
    options.add_argument("--force-device-scale-factor=1")
    driver = webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def shot(element: object, name: str) -> bytes:
    """The element's screenshot; also written to $COMPACTD_SCREENSHOTS/<name>.png when that is set."""
    png: bytes = element.screenshot_as_png  # type: ignore[attr-defined]
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        (Path(SHOTS) / f"{name}.png").write_bytes(png)
    return png


def viewport_shot(driver: object, name: str, height: int = 1000) -> None:
    """The top `height` pixels of the window, written like `shot` (only when $COMPACTD_SCREENSHOTS is set)."""
    if not SHOTS:
        return
    import matplotlib.image

    png = driver.get_screenshot_as_png()  # type: ignore[attr-defined]
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")[:height, :, :3]
    Path(SHOTS).mkdir(parents=True, exist_ok=True)
    matplotlib.image.imsave(Path(SHOTS) / f"{name}.png", pixels)


def highest_row(png: bytes, rgb: tuple[int, int, int], tolerance: int = 30) -> int:
    """The topmost pixel row holding that colour (the image's height when none does)."""
    import matplotlib.image

    pixels = (matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3] * 255).astype(int)
    rows = np.nonzero((np.abs(pixels - np.array(rgb)).max(axis=-1) <= tolerance).any(axis=1))[0]
    return int(rows[0]) if len(rows) else pixels.shape[0]


def colour_pixels(png: bytes, rgb: tuple[int, int, int], tolerance: int = 40) -> int:
    """How many pixels of the PNG are within `tolerance` (per channel) of `rgb`."""
    import matplotlib.image

    pixels = (matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3] * 255).astype(int)
    return int((np.abs(pixels - np.array(rgb)).max(axis=-1) <= tolerance).sum())


def test_the_inspector_shows_a_session_behind_its_key(service: Service, browser: object) -> None:
    """Without a key only the key prompt shows; with it the tenant's sessions (not another's), and
    for a session the chart (its pixels checked), the prompt with its compacted parts marked
    and a pointer that opens its file, memory with history, files and redactions by kind."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    # a poll that meets an element the page just re-rendered polls again
    wait = WebDriverWait(d, 30, ignored_exceptions=[StaleElementReferenceException])  # type: ignore[arg-type]
    d.get(service.url + "/ui")  # type: ignore[attr-defined]
    find = d.find_element  # type: ignore[attr-defined]
    find_all = d.find_elements  # type: ignore[attr-defined]
    wait.until(ec.visibility_of_element_located((By.ID, "key-form")))
    assert not find(By.ID, "app").is_displayed() and find_all(By.CSS_SELECTOR, "tr.session-row") == []

    find(By.ID, "key").send_keys("cpd_wrong")
    find(By.ID, "key-submit").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "key-error"), "refused"))
    assert find_all(By.CSS_SELECTOR, "tr.session-row") == []

    find(By.ID, "key").send_keys(service.key)
    find(By.ID, "key-submit").click()
    wait.until(lambda _: len(find_all(By.CSS_SELECTOR, "tr.session-row")) == 5)
    rows = [r.get_attribute("data-sid") for r in find_all(By.CSS_SELECTOR, "tr.session-row")]
    assert rows == [
        "short",
        "dropin",
        "offloads",
        "crowded",
        "real",
    ]  # most recently active first; not the other tenant's
    # times read as people say them ("just now", "3 min ago"), the exact local time in the tooltip
    when = find(By.CSS_SELECTOR, 'tr.session-row[data-sid="real"] td:last-child')
    assert when.text.endswith(("ago", "just now")) and ":" in (when.get_attribute("title") or "")
    assert "system prompt" in find(By.ID, "columns-help").text
    shot(find(By.ID, "list-pane"), "inspector-sessions")

    find(By.CSS_SELECTOR, 'tr.session-row[data-sid="real"]').click()
    wait.until(lambda _: find_all(By.CSS_SELECTOR, "#prompt .msg"))
    summary = find(By.ID, "summary").text
    assert "compaction ratio" in summary and "summary" in summary

    chart = find(By.ID, "chart")
    png = shot(chart, "inspector-chart")
    served = colour_pixels(png, SERVED_RGB, tolerance=30)
    # what a fetch served never rises above the budget line (a few pixels of line width allowed)
    assert highest_row(png, SERVED_RGB) >= highest_row(png, BUDGET_RGB) - 3
    marks = sum(colour_pixels(png, rgb, tolerance=30) for rgb in EPOCH_RGB)
    assert served > 1_000, f"only {served} pixels of the served-prompt line"
    assert marks > 200, f"only {marks} pixels of epoch marks"

    prompt = find(By.ID, "prompt")
    assert prompt.find_elements(By.CSS_SELECTOR, ".summarized")  # the handoff note
    # the prompt has the page (no inner scroll box) and buttons that walk to each kind of part
    assert d.execute_script("return getComputedStyle(arguments[0]).overflowY", prompt) == "visible"  # type: ignore[attr-defined]
    # the first kind of part the prompt holds (which kinds a session's last epoch leaves varies)
    nxt = next(b for b in find_all(By.CSS_SELECTOR, "#prompt-nav button") if b.is_enabled())
    classes = {
        "clipped": ("clipped", "argument"),
        "offloaded": ("offloaded",),
        "deduplicated": ("identical",),
    }
    nxt.click()
    current = find(By.CSS_SELECTOR, "#prompt .current").get_attribute("class").split()
    assert set(classes.get(nxt.get_attribute("data-part"), ("summarized",))) & set(current), current
    d.execute_script("window.scrollTo(0, 0)")  # type: ignore[attr-defined]
    d.execute_script("arguments[0].scrollIntoView()", find(By.ID, "prompt-bar"))  # type: ignore[attr-defined]
    viewport_shot(d, "inspector-prompt")
    served = httpx.get(
        f"{service.url}/v1/sessions/real/prompt", headers={"Authorization": f"Bearer {service.key}"}
    )
    assert bool(find_all(By.ID, "prefill")) == served.json()["prefill"]  # a prefill is said, and only then
    assert prompt.find_elements(By.CSS_SELECTOR, ".marker, .summarized")  # compacted parts marked
    assert SECRET not in prompt.text and "[REDACTED:aws_access_key:" in prompt.text
    # a pointer from the middle of the long prompt opens its file above the page: heading and Close
    # in view and clickable (a click another element would receive raises), the place kept
    ref = d.execute_script(  # type: ignore[attr-defined]
        """const p = arguments[0], mid = p.offsetTop + p.offsetHeight / 2;
        const refs = [...p.querySelectorAll('a.ref')];
        return refs.reduce((a, b) => Math.abs(b.offsetTop - mid) < Math.abs(a.offsetTop - mid) ? b : a);""",
        prompt,
    )
    ref_name = ref.get_attribute("data-ref")
    reads_before = service.get("/v1/sessions/real/files")["files"]
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", ref)  # type: ignore[attr-defined]
    scrolled = d.execute_script("return window.scrollY")  # type: ignore[attr-defined]
    # the middle of a long prompt: its start scrolled far out of view, the legend stuck on top
    assert d.execute_script("return arguments[0].getBoundingClientRect().top", prompt) < -1000  # type: ignore[attr-defined]
    ref.click()
    wait.until(ec.visibility_of_element_located((By.ID, "file-view")))
    wait.until(lambda _: find(By.ID, "file-text").text.strip() or find(By.ID, "file-turns").text.strip())
    assert find(By.ID, "file-ref").text == ref_name
    for part in ("file-title", "file-close"):
        box = d.execute_script("return arguments[0].getBoundingClientRect().toJSON()", find(By.ID, part))  # type: ignore[attr-defined]
        assert box["top"] >= 0 and box["bottom"] <= d.execute_script("return innerHeight")  # type: ignore[attr-defined]
        on_top = d.execute_script(  # type: ignore[attr-defined]
            "const e = document.elementFromPoint(arguments[0], arguments[1]); return !!e && !!e.closest('#file-view')",
            box["left"] + box["width"] / 2,
            box["top"] + box["height"] / 2,
        )
        assert on_top, f"{part} is under another element"
    viewport_shot(d, "inspector-file-from-middle")
    find(By.ID, "file-close").click()
    wait.until(ec.invisibility_of_element_located((By.ID, "file-view")))
    assert abs(d.execute_script("return window.scrollY") - scrolled) <= 2  # type: ignore[attr-defined]
    assert d.execute_script("return document.activeElement.dataset.ref") == ref_name  # type: ignore[attr-defined]
    # a person's look is not the agent's read: the file list (and the next memory note) stay as they were
    assert service.get("/v1/sessions/real/files")["files"] == reads_before

    # an archive reads one turn per block, roles and tool calls spelled out, not JSON lines
    archive = next(
        a
        for a in prompt.find_elements(By.CSS_SELECTOR, "a.ref")
        if a.get_attribute("data-ref").startswith("h_")
    )
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", archive)  # type: ignore[attr-defined]
    archive_name = archive.get_attribute("data-ref")
    archive.click()
    wait.until(ec.visibility_of_element_located((By.ID, "file-view")))
    # the view shows this archive (not the file opened before, whose turns it re-renders away)
    wait.until(lambda _: find(By.ID, "file-ref").text == archive_name)

    def archive_turns(_: object) -> bool:
        turns = find_all(By.CSS_SELECTOR, "#file-turns .msg")
        return len(turns) > 3 and turns[0].find_element(By.CSS_SELECTOR, ".role").text.startswith("#")

    wait.until(archive_turns, "the archive's turns, numbered (#seq role)")
    assert '{"content"' not in find(By.ID, "file-turns").text and "→ " in find(By.ID, "file-turns").text
    shot(find(By.ID, "file-view"), "inspector-archive")
    d.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)  # type: ignore[attr-defined]
    wait.until(ec.invisibility_of_element_located((By.ID, "file-view")))

    memory = find(By.ID, "memory").text
    assert "Inspect the epochs in the browser" in memory
    for line in memory.splitlines():  # no `path: path — edited 4×`
        head, _, rest = line.partition(": ")
        assert not (rest and rest.startswith(head) and "/" in head), line
    history = find(By.ID, "history")
    assert history.get_attribute("open") is None  # folded away until asked for
    history.find_element(By.TAG_NAME, "summary").click()
    events = find_all(By.CSS_SELECTOR, "#memory-history li")
    assert 0 < len(events) <= 15 and any("decisions" in e.text for e in events[:3])  # newest first, one page
    assert not [e.text for e in events if "observed, observed" in e.text]  # the origin said once
    shot(find(By.CSS_SELECTOR, ".cols"), "inspector-memory")
    # the prompt's legend sticks while the prompt scrolls by, not over memory and files
    d.execute_script("window.scrollTo(0, document.body.scrollHeight)")  # type: ignore[attr-defined]
    bottoms = d.execute_script(  # type: ignore[attr-defined]
        """const r = (id) => document.getElementById(id).getBoundingClientRect();
        return [r('prompt-bar').bottom, r('prompt-section').bottom, document.querySelector('.cols').getBoundingClientRect().top];"""
    )
    assert bottoms[0] <= bottoms[1] + 1 and bottoms[0] <= bottoms[2], bottoms
    assert find_all(By.CSS_SELECTOR, "#files tr.file-row")
    assert "aws_access_key" in find(By.ID, "redactions").text

    d.execute_script("sessionStorage.clear()")  # type: ignore[attr-defined]
    d.refresh()  # type: ignore[attr-defined]
    wait.until(ec.visibility_of_element_located((By.ID, "key-form")))
    assert not find(By.ID, "app").is_displayed()


def open_session(d: Any, service: Service, sid: str) -> Any:
    """The inspector with the tenant's key, the session `sid` opened; the wait for the page."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(d, 30, ignored_exceptions=[StaleElementReferenceException])
    d.get(service.url + "/ui")
    d.execute_script("sessionStorage.setItem('compactd-key', arguments[0])", service.key)
    d.refresh()
    wait.until(lambda _: d.find_elements(By.CSS_SELECTOR, f'tr.session-row[data-sid="{sid}"]'))
    d.find_element(By.CSS_SELECTOR, f'tr.session-row[data-sid="{sid}"]').click()
    wait.until(lambda _: d.find_element(By.ID, "session-title").text == f"Session {sid}")
    wait.until(lambda _: d.find_elements(By.CSS_SELECTOR, "#prompt .msg"))
    return wait


def test_a_finished_drop_in_session_is_said_not_warned_about(service: Service, browser: Any) -> None:
    """A session through the drop-in ends with the model's reply: the page says it waits for the
    next user turn, in a plain note, and warns about nothing; the three token figures agree."""
    from selenium.webdriver.common.by import By

    d = browser
    open_session(d, service, "dropin")
    served = service.get("/v1/sessions/dropin/prompt")
    stats = service.get("/v1/sessions/dropin/stats")
    assert served["prefill"] and served["messages"][-1]["role"] == "assistant"
    note = d.find_element(By.ID, "prefill")
    assert note.get_attribute("class").split() == ["note"]  # plain, not a warning
    assert "waits for the next user turn" in note.text and "append the next user turn first" not in note.text
    header = d.find_element(By.ID, "prompt-meta").text
    assert f"{served['token_count']:,} of {served['budget_tokens']:,} tokens" in header
    assert stats["served_tokens"] == served["token_count"]
    assert f"served tokens\n{served['token_count']:,}" in d.find_element(By.ID, "summary").text
    d.execute_script("arguments[0].scrollIntoView()", d.find_element(By.ID, "session-title"))
    viewport_shot(d, "inspector-dropin-finished")


def test_a_memory_change_is_shown_in_the_turn_that_carries_it(service: Service, browser: Any) -> None:
    """A working-memory change made between two user turns rides in the later turn, as a memory
    note the page marks (it stays there: a later fetch repeats it, never takes it back)."""
    from selenium.webdriver.common.by import By

    d = browser
    open_session(d, service, "short")
    served = service.get("/v1/sessions/short/prompt")
    last = served["messages"][-1]
    assert last["role"] == "user" and "Answer in French" in orjson.dumps(last["content"]).decode()
    notes = d.find_elements(By.CSS_SELECTOR, "#prompt .memory-note")
    assert len(notes) == 1 and "Answer in French" in notes[0].text
    assert d.find_element(By.CSS_SELECTOR, ".legend .memory-note").text.startswith("memory note")


def test_offloaded_outputs_show_their_savings(service: Service, browser: Any) -> None:
    """Four outputs offloaded at ingest: the uncompacted history counts them whole, so the ratio
    and the chart's grey area show what was saved, well above the served line."""
    from selenium.webdriver.common.by import By

    d = browser
    open_session(d, service, "offloads")
    stats = service.get("/v1/sessions/offloads/stats")
    assert stats["offloaded_tokens"] > 0 and stats["compaction_ratio"] > 3
    summary = d.find_element(By.ID, "summary").text
    assert f"{stats['raw_tokens']:,} ({stats['offloaded_tokens']:,} offloaded to files at ingest)" in summary
    png = shot(d.find_element(By.ID, "chart"), "inspector-offload-chart")
    raw_top, served_top = highest_row(png, RAW_RGB, tolerance=4), highest_row(png, SERVED_RGB, tolerance=30)
    assert raw_top + 50 < served_top, (raw_top, served_top)  # the history far above what is served
    d.execute_script("arguments[0].scrollIntoView()", d.find_element(By.ID, "session-title"))
    viewport_shot(d, "inspector-offload-page")


def test_every_epoch_line_has_its_label_and_the_list_wraps_between_entries(
    service: Service, browser: Any
) -> None:
    """Crowded epochs: every line keeps its label (stacked in rows, none overlapping another in its
    row), and at a common width the epochs list wraps only between entries."""
    from selenium.webdriver.common.by import By

    d = browser
    d.set_window_size(1280, 1400)
    try:
        open_session(d, service, "crowded")
        stats = service.get("/v1/sessions/crowded/stats")
        chart = d.find_element(By.ID, "chart")
        boxes = orjson.loads(chart.get_attribute("data-labels"))
        assert len(boxes) == len(stats["epochs"]) >= 12
        rows: dict[int, list[tuple[int, int]]] = {}
        for left, right, row in boxes:
            rows.setdefault(row, []).append((left, right))
        # lines closer than a label's width: a second row (on the shared data's session, e10, e13 …)
        side_by_side = sorted((left, right) for left, right, _ in boxes)
        crowded = any(a[1] >= b[0] for a, b in itertools.pairwise(side_by_side))
        assert len(rows) > 1 or not crowded
        for spans in rows.values():
            assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), spans
        entries = d.find_elements(By.CSS_SELECTOR, "#epochs .entry")
        assert len(entries) == len(stats["epochs"])
        assert all(d.execute_script("return arguments[0].getClientRects().length", e) == 1 for e in entries)
        fits = "const e = arguments[0]; return e.scrollWidth <= e.clientWidth + 1 && e.getBoundingClientRect().right <= innerWidth"
        assert d.execute_script(fits, d.find_element(By.ID, "epochs")), (
            "the epochs list is wider than the page"
        )
        assert d.execute_script(fits, d.find_element(By.ID, "summary")), "the summary is wider than the page"
        shot(chart, "inspector-crowded-chart")
        shot(d.find_element(By.ID, "summary"), "inspector-epochs-list")
    finally:
        d.set_window_size(1400, 2200)


def test_stats_command_prints_the_table_and_sparkline(service: Service) -> None:
    """`compactd stats real` prints the numbers and a sparkline; a wrong key or no key says so."""
    command = [sys.executable, "-m", "api.cli.command", "stats", "real", "--url", service.url]
    env = {k: v for k, v in service.env.items() if k not in ("COMPACTD_URL", "COMPACTD_KEY")}
    done = subprocess.run([*command, "--key", service.key], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = {line[:18].strip(): line[20:] for line in done.stdout.splitlines() if line[:1].strip()}
    stats = httpx.get(
        f"{service.url}/v1/sessions/real/stats", headers={"Authorization": f"Bearer {service.key}"}
    ).json()
    assert lines["turns"] == f"{stats['turns']:,}"
    assert lines["served tokens"] == f"{stats['served_tokens']:,} of {stats['budget_tokens']:,} budget"
    assert "summary" in lines["epochs"] and "aws_access_key" in lines["redactions"]
    assert set(lines["prompt/turn"]) <= set("▁▂▃▄▅▆▇█") and len(lines["prompt/turn"]) == 60
    assert SECRET not in done.stdout
    other = subprocess.run(
        [*command, "--key", service.other_key], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert other.returncode == 1 and "404" in other.stderr and "Traceback" not in other.stderr
    nokey = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    assert nokey.returncode == 2 and "COMPACTD_KEY" in nokey.stderr
    assert shutil.which("compactd", path=str(Path(sys.executable).parent))
