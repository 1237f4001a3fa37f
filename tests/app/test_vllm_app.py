"""The app's vLLM source and dashboard without a vLLM server: the URL guard, the
rejected-draft counts in the panes, the theory panel and charts of a source without
timings, and the one-sentence failures. Servers that are down, redirect or are not vLLM
are small real HTTP servers on 127.0.0.1 (or a closed port). The same views against real
vLLM servers are in test_vllm_ui.py.
"""
import pytest

from hostile import SECRET, closed_url, reply, serve
from mtp_viz.analysis.metrics import theory_check
from mtp_viz.app.handlers import servers as server_handlers
from mtp_viz.app.handlers.local import OUTPUTS, Handlers
from mtp_viz.app.page import vllm as vllm_tab
from mtp_viz.app.runtime import deploy, runs, service
from mtp_viz.app.runtime.guard import ServerPolicy, canonical
from mtp_viz.engine.events import Accepted, Bonus, Done, Drafted, Rejected, Start, Step
from mtp_viz.errors import UserError
from mtp_viz.sources.vllm import client as vllm_client
from mtp_viz.sources.vllm.stream import Received, step_events
from mtp_viz.views import charts, theory as panels, tokens as view

LOCKED = deploy.AllowList("tiny")
OPEN = deploy.AllowList("")


# ---------------------------------------------------------------- the guard

@pytest.mark.parametrize("url, want", [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("  HTTP://LocalHost:8000/v1/ ", "http://localhost:8000"),
    ("https://vllm.example.org", "https://vllm.example.org:443"),
    ("http://vllm.example.org/", "http://vllm.example.org:80"),
    ("http://[::1]:8000/v1", "http://[::1]:8000"),
    ("http://gw.example.org:9000/team-a/v1?x=1#y", "http://gw.example.org:9000/team-a"),
])
def test_canonical_server_urls(url, want):
    assert canonical(url) == want


@pytest.mark.parametrize("url, sentence", [
    ("", "Enter the vLLM server's URL"),
    ("ftp://127.0.0.1:8000", "Only http:// and https://"),
    ("file:///etc/passwd", "Only http:// and https://"),
    ("gopher://127.0.0.1:70/_x", "Only http:// and https://"),
    ("127.0.0.1:8000", "Only http:// and https://"),
    ("http://user:secret@127.0.0.1:8000", "may not carry a user name or password"),
    ("http://listed.example.org@169.254.169.254/", "may not carry a user name or password"),
    ("http://:8000", "not a server address"),
    ("http://127.0.0.1:99999", "not a server address"),
    ("http://127.0.0.1:port", "not a server address"),
    ("http://127.0.0.1 :8000", "not a server address"),
    ("http://evil.example\\@127.0.0.1", "not a server address"),
    ("http://h/" + "a" * 600, "longer than 512 characters"),
])
def test_refused_urls_are_one_sentence(url, sentence):
    with pytest.raises(UserError) as e:
        ServerPolicy(OPEN, "").check(url)
    assert sentence in str(e.value) and "\n" not in str(e.value)
    assert "secret" not in str(e.value) and "a" * 100 not in str(e.value)


def test_an_open_deployment_allows_any_http_server():
    policy = ServerPolicy(OPEN, "")
    assert policy.offered and not policy.locked
    assert policy.check("http://10.0.0.7:8000/v1") == "http://10.0.0.7:8000"


def test_a_locked_deployment_allows_only_its_listed_servers():
    policy = ServerPolicy(LOCKED, " http://127.0.0.1:8000/v1 , https://VLLM.example.org/, not a url")
    assert policy.locked and policy.offered
    assert policy.listed == ["http://127.0.0.1:8000", "https://vllm.example.org:443"]
    # the same servers however they are written
    for url in ("http://127.0.0.1:8000", "http://127.0.0.1:8000/", "https://vllm.example.org:443/v1"):
        assert policy.check(url) in policy.listed
    for url in ("http://127.0.0.1:8001", "http://localhost:8000", "http://169.254.169.254/",
                "https://vllm.example.org:8443", "http://vllm.example.org", "http://127.0.0.1:8000/other"):
        with pytest.raises(UserError, match="only connects to the vLLM servers it lists"):
            policy.check(url)
    with pytest.raises(UserError, match="user name or password"):
        policy.check("http://x@127.0.0.1:8000")


def test_a_locked_deployment_without_listed_servers_offers_no_vllm_source(monkeypatch):
    monkeypatch.setenv("MTP_VIZ_VLLM_URLS", "")
    policy = ServerPolicy(LOCKED)
    assert not policy.offered and vllm_tab.choices(policy) == []
    with pytest.raises(UserError, match="only connects"):
        policy.check("http://127.0.0.1:8000")
    monkeypatch.setenv("MTP_VIZ_VLLM_URLS", "http://127.0.0.1:8000")
    assert ServerPolicy(LOCKED).offered and vllm_tab.choices(ServerPolicy(OPEN)) == [
        ("vLLM or llama.cpp server (enter its URL)", server_handlers.VLLM)]


def test_a_redirect_is_not_followed():
    inner, inner_url = serve(reply(200, '{"data": []}'))
    outer, outer_url = serve(reply(302, SECRET, [("Location", inner_url + "/v1/models")]))
    try:
        with pytest.raises(UserError) as e:
            vllm_client.served_models(outer_url)
        assert "HTTP 302" in str(e.value) and SECRET not in str(e.value)
        assert outer.seen == ["/v1/models"] and inner.seen == []
    finally:
        inner.shutdown(), outer.shutdown()


# ---------------------------------------------------------------- views of a vLLM stream

def _vllm_events(accepted, drafted, n_tokens, finish="max_new_tokens"):
    """The vLLM source's own events for per-step arrays (as laid over a server's tokens)."""
    tokens = [Received(100 + i, f"t{i} ", 0.9, 0.01 * (i + 1)) for i in range(n_tokens)]
    return [Start("speculative", 3, (1, 2, 3), {"backend": "vllm"}),
            *step_events(tokens, accepted, drafted, finish),
            Done(n_tokens, 1 + len(accepted), 0.5, "", 0, sum(drafted), sum(accepted))]


def _counts(html: str) -> dict[int, int]:
    import re
    return {int(s): int(n) for s, n in re.findall(r'data-step="(\d+)" data-drafted="\d+" data-rejected="(\d+)"', html)}


def test_panes_count_the_drafts_vllm_rejected_after_each_step():
    # steps 2..5: kept 2 of 4, all 4, none, then 1 of 4 in a step cut by the token limit
    evs = _vllm_events([2, 4, 0, 1], [4, 4, 4, 4], 1 + 3 + 5 + 1 + 1)
    html = view.tokens_html(evs)
    assert _counts(html) == {2: 2, 4: 4, 5: 3}   # drafted − accepted, where above 0
    assert 'data-kind="rejected"' not in html and "✗4" in html
    assert 'title="step 4: 4 drafted, 4 rejected; the server reports how many drafts it rejected' in html
    renderer = view.PaneRenderer()
    for e in evs:
        renderer.add(e)
    assert _counts(renderer.html()) == _counts(html)


def test_step_captions_of_a_vllm_run_give_counts_and_no_invented_times():
    from mtp_viz.views import captions
    evs = _vllm_events([2, 4, 0, 1], [4, 4, 4, 4], 1 + 3 + 5 + 1 + 1)
    upto = lambda s: [e for e in evs if isinstance(e, Start) or 0 < getattr(e, "step", 0) <= s]  # noqa: E731
    assert captions.caption(upto(1)) == ("Step 1: the target read the prompt (3 tokens) in one forward pass "
                                         "and wrote its first token “t0 ”.")
    assert captions.caption(upto(2)) == ("Step 2: the drafter proposed 4 tokens. The target checked them in one "
                                         "forward pass: it kept 2 and rejected 2 (the server does not say which "
                                         "tokens), and wrote its own token “t3 ” in their place.")
    assert "it kept all of them" in captions.caption(upto(3)) and " ms" not in captions.caption(evs)


def test_the_steps_csv_of_a_vllm_run_has_counts_and_no_invented_times():
    from mtp_viz.views import export
    rows = export.steps_csv(_vllm_events([2, 4, 0, 1], [4, 4, 4, 4], 11)).splitlines()
    assert rows[2].startswith("speculative,2,4,2,2,3,,,")
    assert all(r.split(",")[6:8] == ["", ""] for r in rows[1:])


def test_panes_of_the_local_engine_show_no_counts():
    """A local step shows its rejected drafts as tokens; drafts dropped after an EOS
    (agreed > accepted) were not rejected: no count either way."""
    step = [Drafted(2, i, 10 + i, "d", 0.5) for i in range(4)]
    local = [*step, Accepted(2, 0, 10, "d", 0.9), Rejected(2, 1, 11, "d", 0.1), Rejected(2, 2, 12, "d", 0.1),
             Rejected(2, 3, 13, "d", 0.1), Bonus(2, 50, "b", 0.9, 1, "correction"), Step(2, 4, 1, 2, agreed=1),
             *[Drafted(3, i, 20 + i, "d", 0.5) for i in range(4)], Accepted(3, 0, 20, "<eos>", 0.9),
             Step(3, 4, 1, 1, cut="eos", agreed=4)]
    html = view.tokens_html(local)
    assert "mv-rejcount" not in html and html.count('data-kind="rejected"') == 3


def test_theory_panel_and_timing_chart_say_vllm_reports_no_timings():
    evs = _vllm_events([2, 4, 0, 3], [4, 4, 4, 4], 1 + 3 + 5 + 1 + 4)
    check = theory_check(evs)
    assert not check.timed and check.acceptance_rate == pytest.approx(9 / 16)
    panel = panels.theory_panel_html(check)
    assert "not reported" in panel and "γ*" not in panel and "τ/(γc+1)" not in panel
    assert "tokens per target forward τ" in panel
    fig = charts.timing_figure(evs)
    assert not fig.data and "reports no draft or verify times" in fig.layout.annotations[0].text
    assert charts.acceptance_figure(evs).data  # the counts chart as for a local run
    local = [Start("speculative", 1, (1,), {}), Drafted(2, 0, 5, "x", 0.5), Accepted(2, 0, 5, "x", 0.9),
             Bonus(2, 6, "y", 0.9, 1, "extension"), Step(2, 1, 1, 2, 0.01, 0.02, t=0.03)]
    assert theory_check(local).timed and "γ*" in panels.theory_panel_html(theory_check(local))
    assert charts.timing_figure(local).data
    from mtp_viz.app.page import teach
    sess = runs.Session()
    sess.spec = evs
    assert "Not for this run" in teach.what_if_update(sess) and "data-best" not in teach.what_if_update(sess)


# ---------------------------------------------------------------- handlers, without a server

def _handlers(policy):
    h = Handlers(service.PairLoader(lambda t, d: None), deploy.presets(OPEN), ("tiny", None), 64, 256)
    return server_handlers.ServerHandlers(h, policy)


def _values(**kw):
    v = dict(prompt="def f(x):", model=server_handlers.VLLM, custom_target="", custom_drafter="",
             max_new_tokens=16, draft_tokens=4, schedule="constant", drafter_kind="mtp", decoding="greedy",
             temperature=0.8, top_p=0.95, top_k=0, seed=0, chat=False, baseline=True,
             vllm_url="http://127.0.0.1:8000", vllm_baseline_url="")
    return {**v, **kw}


@pytest.mark.parametrize("policy, kw, sentence", [
    (ServerPolicy(OPEN, ""), {"vllm_url": ""}, "Enter the vLLM server&#x27;s URL"),
    (ServerPolicy(OPEN, ""), {"vllm_url": "file:///etc/passwd"}, "Only http:// and https://"),
    (ServerPolicy(OPEN, ""), {"vllm_baseline_url": "http://u:p@h:1"}, "may not carry a user name"),
    (ServerPolicy(LOCKED, "http://127.0.0.1:8000"), {"vllm_baseline_url": "http://127.0.0.1:22"},
     "only connects to the vLLM servers it lists"),
    (ServerPolicy(OPEN, ""), {"prompt": "  "}, "Type a prompt first"),
    (ServerPolicy(OPEN, ""), {"max_new_tokens": 65}, "Max new tokens must be between 1 and 64"),
])
def test_run_refuses_with_one_sentence_before_contacting_anything(policy, kw, sentence):
    frames = list(_handlers(policy).run(_values(**kw), None))
    status = frames[0][OUTPUTS.index("status")]
    assert len(frames) == 1 and sentence in status and 'mv-msg-error' in status


def test_a_server_that_is_down_is_one_sentence_and_nothing_else_runs():
    url = closed_url()
    vh = _handlers(ServerPolicy(OPEN, ""))
    sess = runs.Session()
    frames = list(vh.run(_values(vllm_url=url, vllm_baseline_url=url, step_mode=True), sess))
    assert "Step mode pauses only the local engine" in frames[0][OUTPUTS.index("caption")]
    errors = [f[OUTPUTS.index("status")] for f in frames if "mv-msg-error" in str(f[OUTPUTS.index("status")])]
    assert errors and f"No server answers at {url}" in errors[-1]
    assert [e.type for e in sess.spec] == ["error"] and sess.ar == []   # no baseline after a failure
    assert f"No server answers at {url}" in vh.probe(url, "")


def test_load_checks_servers_and_the_dashboard_never_quotes_them():
    server, url = serve(reply(200, f"<html>{SECRET}</html>"))
    try:
        vh = _handlers(ServerPolicy(OPEN, ""))
        line = vh.load(server_handlers.VLLM, "", "", url, "")[0]
        assert "mv-msg-error" in line and "is not a vLLM server" in line and SECRET not in line
        state, summary, pos, rate, timer = vh.watch(url)
        assert "mv-msg-error" in summary and SECRET not in summary and timer.active is False
        assert vh.watch("ftp://x")[1].count("Only http://") == 1
        assert vh.poll(None)[-1].active is False
    finally:
        server.shutdown()


def test_the_status_line_follows_the_picker():
    vh = _handlers(ServerPolicy(OPEN, ""))
    assert "Give the server&#x27;s URL" in vh.picked(server_handlers.VLLM)
    assert "loads on first run" in vh.picked("tiny")   # the local pair's own line, as before


def test_measure_says_to_use_bench_for_servers():
    frames = list(_handlers(ServerPolicy(OPEN, "")).measure(_values(), 3, None))
    assert len(frames) == 1 and "mtp-viz bench --server URL" in frames[0][OUTPUTS.index("status")]


def test_the_page_offers_the_source_and_dashboard_unless_locked_without_servers(monkeypatch):
    from mtp_viz.app.page import layout as ui

    def has_vllm(demo):
        model = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "model")
        ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
        return server_handlers.VLLM in [v for _, v in model.choices], "vllm-dashboard" in ids

    monkeypatch.delenv("MTP_VIZ_VLLM_URLS", raising=False)
    monkeypatch.delenv("MTP_VIZ_ALLOWED_MODELS", raising=False)
    assert has_vllm(ui.build_demo(target="tiny")) == (True, True)
    monkeypatch.setenv("MTP_VIZ_ALLOWED_MODELS", "tiny")
    assert has_vllm(ui.build_demo(target="tiny")) == (False, False)
    monkeypatch.setenv("MTP_VIZ_VLLM_URLS", "http://127.0.0.1:8000")
    assert has_vllm(ui.build_demo(target="tiny")) == (True, True)
