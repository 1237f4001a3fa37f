"""The teaching features in headless Chromium: presenter mode, deep links and Copy link,
the first-visit tour, the glossary, the explanations and the what-if of a replayed trace.
The app here has no model: everything shown comes from the page, the link or a trace."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest

from browsing import in_view, upload_trace
from serving import serve_modelless

pytestmark = pytest.mark.browser

TERMS = ["draft", "verify", "acceptance-rate", "alpha", "tau", "bonus-token", "correction", "gamma",
         "cost-coefficient", "mtp", "shared-kv-cache", "clustered-head",
         "eager-engine", "compiled-engine", "engine-cpu-time"]   # the terms the speedup badge uses
SEEN = "localStorage.setItem('mtp-viz-tour-done', '1')"


@pytest.fixture(scope="module")
def url():
    demo, address = serve_modelless()
    yield address
    demo.close()


def _page(browser, url, query="", tour_seen=True):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    if tour_seen:
        page.add_init_script(SEEN)
    page.goto(url + query)
    # after the link's restore: the status of the pair it names (a link loads nothing, so a pair
    # other than the one loaded at launch "loads on first run"; the launch's own failed here)
    page.wait_for_function("() => /no model|loads on first run/.test(document.querySelector('#model-status')"
                           "?.innerText || '')", timeout=60_000)
    page.wait_for_selector("body[data-tour]", state="attached", timeout=30_000)
    return page


def _settings(page):
    page.locator("#settings").get_by_text("More settings").click()
    page.wait_for_selector("#seed input", state="attached")


def _form(page) -> dict:
    return {"prompt": page.input_value("#prompt textarea"),
            "model": page.input_value("#model input"),
            "draft_tokens": page.input_value("#draft-tokens input[type='number']"),
            "max_new_tokens": page.input_value("#max-new input[type='number']"),
            "sampling": page.locator("#decoding input[value='sampling']").is_checked(),
            "temperature": page.input_value("#temperature input[type='number']"),
            "seed": page.input_value("#seed input"),
            "schedule": page.input_value("#schedule input"),
            "lookup": page.locator("#drafter-kind input[value='lookup']").is_checked()}


LINK = {"prompt": "def mean(xs):\n    return sum(xs) / <len(xs)>", "model": "e2b", "draft_tokens": "6",
        "max_new_tokens": "32", "decoding": "sampling", "temperature": "0.5", "seed": "7",
        "schedule": "heuristic", "drafter": "lookup"}
RESTORED = {"prompt": LINK["prompt"], "model": "Gemma 4 E2B + MTP assistant", "draft_tokens": "6",
            "max_new_tokens": "32", "sampling": True, "temperature": "0.5", "seed": "7",
            "schedule": "heuristic", "lookup": True}


def test_a_deep_link_restores_the_prompt_pair_and_settings(browser, url):
    page = _page(browser, url, "?" + urlencode(LINK))
    try:
        _settings(page)
        page.wait_for_function("v => document.querySelector('#prompt textarea').value === v", arg=LINK["prompt"],
                               timeout=30_000)
        assert _form(page) == RESTORED
        # nothing was ignored (the line may still show the load's progress timer for a moment)
        page.wait_for_function("() => document.querySelector('#status').innerText.trim() === ''", timeout=30_000)
    finally:
        page.close()


def test_a_bad_link_says_what_it_ignored_and_keeps_the_defaults(browser, url):
    page = _page(browser, url, "?draft_tokens=99&max_new_tokens=12&colour=red&presenter=yes")
    try:
        # the status line can still show the load's progress timer for a moment
        page.wait_for_selector("#status:has-text('Ignored from the link')", timeout=30_000)
        status = page.inner_text("#status")
        assert status.startswith("Ignored from the link: draft_tokens (must be a whole number from 1 to 16); "
                                  "colour (not a setting); presenter (must be 1).")
        assert "mv-presenter" not in (page.get_attribute("body", "class") or "")
        assert page.input_value("#draft-tokens input[type='number']") == "4"
        assert page.input_value("#max-new input[type='number']") == "12"
    finally:
        page.close()


def test_copy_link_hands_over_the_current_settings(browser, url):
    page = _page(browser, url, "?" + urlencode(LINK))
    try:
        box = page.locator("#draft-tokens input[type='number']")
        # edit only once the link's values are on the page (on a loaded machine they can land late)
        page.wait_for_function("v => document.querySelector('#prompt textarea').value === v", arg=LINK["prompt"],
                               timeout=30_000)
        page.wait_for_function("v => document.querySelector(\"#draft-tokens input[type='number']\").value === v",
                               arg=LINK["draft_tokens"], timeout=30_000)
        page.fill("#prompt textarea", "x = [i * i for i in range(10)]")
        box.fill("3")
        box.blur()
        assert page.input_value("#prompt textarea") == "x = [i * i for i in range(10)]" and box.input_value() == "3"
        page.click("#share-link")
        link = page.locator("#status #share-url")
        link.wait_for(timeout=30_000)
        shared = link.inner_text()
        assert shared.startswith(url + "?")
        page.evaluate("window.scrollTo(0, 0)")
        assert in_view(page, "#spec-output") and in_view(page, "#ar-output")  # the link takes one line
    finally:
        page.close()
    page = _page(browser, url, shared[len(url):])
    try:
        _settings(page)
        page.wait_for_function("v => document.querySelector('#prompt textarea').value === v",
                               arg="x = [i * i for i in range(10)]", timeout=30_000)
        assert _form(page) == {**RESTORED, "prompt": "x = [i * i for i in range(10)]", "draft_tokens": "3"}
    finally:
        page.close()


def test_presenter_mode_switches_type_and_token_colours(browser, url):
    from mtp_viz.sources import trace
    path = sorted(trace.examples_dir().glob("*.jsonl"))[0]
    styles = {}
    for query in ("", "?presenter=1"):
        page = _page(browser, url, query)
        try:
            upload_trace(page, path)
            token = page.locator("#spec-output span.tok[data-kind='accepted']").first
            styles[query] = (page.evaluate("document.body.classList.contains('mv-presenter')"),
                             token.evaluate("e => getComputedStyle(e).backgroundColor"),
                             page.locator("#spec-output .mv-text").evaluate(
                                 "e => parseFloat(getComputedStyle(e).fontSize)"),
                             page.locator("#legend .tok[data-kind='rejected']").evaluate(
                                 "e => getComputedStyle(e).textDecorationColor"),
                             # the race's bottom (panes, legend, live charts) in the page, with tokens in the panes
                             page.evaluate("() => Math.max(...['#legend', '#live-charts'].map(s => "
                                           "document.querySelector(s).getBoundingClientRect().bottom "
                                           "+ window.scrollY))"))
        finally:
            page.close()
    plain, presenter = styles[""], styles["?presenter=1"]
    assert presenter[0] and not plain[0]
    assert presenter[1] == "rgb(204, 228, 246)" != plain[1]      # Okabe-Ito blue, not green
    assert presenter[3] == "rgb(213, 94, 0)" != plain[3]         # vermillion, not red
    assert presenter[2] >= 20 > plain[2]
    assert presenter[4] <= 720 and plain[4] <= 720   # the larger type still fits a 1280×720 projector


def test_the_tour_shows_once_and_stays_dismissed(browser, url):
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    try:
        page.goto(url)
        page.wait_for_selector("#tour", timeout=60_000)
        assert "prompt" in page.inner_text("#tour").lower() and "1 / 5" in page.inner_text("#tour")
        assert page.locator("#prompt.mv-tour-target").count() == 1
        page.click("#tour [data-tour='next']")
        assert "2 / 5" in page.inner_text("#tour") and page.locator("#run.mv-tour-target").count() == 1
        page.click("#tour [data-tour='close']")
        page.wait_for_selector("body[data-tour='dismissed']", state="attached")
        assert page.locator("#tour").count() == 0
        page.reload()
        page.wait_for_selector("#model-status:has-text('no model')", timeout=60_000)
        page.wait_for_selector("body[data-tour='dismissed']", state="attached", timeout=30_000)
        page.wait_for_timeout(600)  # past the moment a first visit's tour opens
        assert page.locator("#tour").count() == 0
        page.click("#header [data-tour-start]")          # and it can be taken again on demand
        page.wait_for_selector("#tour")
    finally:
        context.close()


def test_a_first_visit_can_press_every_tab_and_run_without_closing_the_tour(browser, url):
    """Issue 42, point 1: the tour's card never covers the tab bar, Run or the title, and a
    card whose target is on another tab waits hidden (it used to sit over the tab bar and
    intercept the click on Measure). Opened on another tab, the tour starts once the
    Decode tab shows. An explanation's popover closes on Escape and on a click outside it."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    try:
        page.goto(url)
        page.wait_for_selector("#tour", timeout=60_000)
        for tab in page.locator("#tabs [role=tab]").all():
            tab.click(timeout=5_000)                        # fails if the card intercepts it
            assert page.locator("#tour").is_hidden() or page.locator(".mv-tour-target").first.is_visible()
        page.locator("#tab-decode-button").click(timeout=5_000)
        page.wait_for_selector("#tour", state="visible", timeout=5_000)
        page.click("#run", timeout=5_000)
        page.click("#tour [data-tour='close']")
        explain = page.locator("details[data-explain='spec']")
        explain.locator("summary").click()
        assert explain.evaluate("e => e.open")
        page.keyboard.press("Escape")
        assert not explain.evaluate("e => e.open")
        explain.locator("summary").click()
        assert explain.evaluate("e => e.open")
        page.click("#header", position={"x": 5, "y": 5})
        assert not explain.evaluate("e => e.open")
    finally:
        context.close()
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    try:
        page.goto(url + "?tab=inside")
        page.wait_for_selector("body[data-tour='waiting']", state="attached", timeout=60_000)
        page.wait_for_timeout(600)
        assert page.locator("#tour").count() == 0           # no card pointing at the hidden prompt
        page.locator("#tab-decode-button").click(timeout=5_000)
        page.wait_for_selector("#tour", state="visible", timeout=5_000)
        assert page.locator("#prompt.mv-tour-target").count() == 1
    finally:
        context.close()


def test_glossary_explanations_and_the_what_if_of_a_trace(browser, url):
    from mtp_viz.sources import trace
    page = _page(browser, url)
    try:
        assert page.locator("#glossary dt[data-term]").evaluate_all("els => els.map(e => e.dataset.term)") == TERMS
        assert page.locator("#glossary dd").count() == len(TERMS)
        explain = page.locator("#spec-output").locator("xpath=ancestor::div[contains(@class,'mv-pane')]") \
            .locator("details[data-explain='spec']")
        explain.locator("summary").click()
        assert explain.evaluate("e => e.open") and "longest correct prefix" in explain.inner_text()
        for key in ("acceptance-plot", "position-plot", "theory", "legend", "ar", "what-if"):
            assert page.locator(f"details[data-explain='{key}']").count() == 1, key
        assert "Appears after" in page.inner_text("#what-if")
        upload_trace(page, sorted(trace.examples_dir().glob("*.jsonl"))[0])
        page.wait_for_selector("#what-if tr[data-best]", state="attached", timeout=30_000)
        assert page.locator("#what-if tr[data-best]").count() == 1
        assert "estimate" in page.inner_text("#what-if")
        page.click("#header a[href='#when-mtp-helps']")    # the header link opens its tab and the panel
        assert page.evaluate("document.body.dataset.tab") == "measure"
        assert page.locator("#when-mtp-helps details.mv-when-box").evaluate("e => e.open")
        assert page.locator("#when-mtp-helps li[data-category]").count() == 6
    finally:
        page.close()
