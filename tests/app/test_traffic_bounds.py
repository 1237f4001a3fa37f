"""Integrity under load, in the app: the Traffic panel's sweep is bounded (smaller when
locked down, by MTP_VIZ_TRAFFIC_LEVELS and MTP_VIZ_TRAFFIC_REQUESTS), a server that is
not vLLM is one sentence with no HTTP status, path or port in it (by role in the Traffic
panel; the vLLM run, Load and the dashboard name only the address the visitor typed),
and a server that floods a run sends the browser frames bounded by the tokens asked.

The servers are small real HTTP servers on 127.0.0.1 written here (tests/hostile.py);
no vLLM, no mocks. Every server loop is bounded.
"""
import json

import pytest

import hostile
from hostile import MODELS, SECRET, SPEC_METRICS
from mtp_viz.app.handlers import servers as server_handlers, traffic as traffic_handlers
from mtp_viz.app.handlers.local import OUTPUTS, Handlers
from mtp_viz.app.handlers.traffic import TrafficHandlers
from mtp_viz.app.runtime import deploy, runs, service
from mtp_viz.app.runtime.guard import ServerPolicy
from mtp_viz.errors import UserError
from mtp_viz.measure import traffic
from mtp_viz.sources.servers import Servers

LOCKED = deploy.AllowList("tiny")
OPEN = deploy.AllowList("")


@pytest.fixture
def serve():
    with hostile.serving() as start:
        yield start


@pytest.fixture(autouse=True)
def no_traffic_env(monkeypatch):
    for name in ("MTP_VIZ_TRAFFIC_LEVELS", "MTP_VIZ_TRAFFIC_REQUESTS", "MTP_VIZ_ALLOWED_MODELS"):
        monkeypatch.delenv(name, raising=False)


def _sse(*chunks) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def _chunk(ids, finish=None, prompt=(2, 3)):
    return {"prompt_token_ids": list(prompt) if prompt else None, "choices": [{
        "index": 0, "text": "x" * len(ids), "token_ids": list(ids), "finish_reason": finish,
        "logprobs": {"tokens": ["x"] * len(ids), "token_logprobs": [-0.1] * len(ids)}}]}


def _final(accepted, drafted):
    return {"choices": [], "usage": {"completion_tokens": 1},
            "metrics": {"speculative_decoding": {"num_spec_steps": len(accepted), "per_step_accepted": accepted,
                                                 "per_step_drafted": drafted}}}


# A well-behaved speculating server's answer: 1 + (3 + 1) tokens.
GOOD = _sse(_chunk([5, 6, 7, 8, 9], finish="length"), _final([3], [4]))


def _vllm(serve, completions):
    return serve({"/v1/models": json.dumps(MODELS), "/metrics": SPEC_METRICS, "/v1/completions": completions})


# ------------------------------------------------------------- the sweep's bounds

@pytest.mark.parametrize("allow, env, want", [
    (LOCKED, {}, (4, 8)),                                            # lock-down defaults
    (LOCKED, {"MTP_VIZ_TRAFFIC_LEVELS": "2", "MTP_VIZ_TRAFFIC_REQUESTS": "3"}, (2, 3)),
    (LOCKED, {"MTP_VIZ_TRAFFIC_LEVELS": "abc", "MTP_VIZ_TRAFFIC_REQUESTS": "0"}, (4, 1)),
    (LOCKED, {"MTP_VIZ_TRAFFIC_LEVELS": "1000", "MTP_VIZ_TRAFFIC_REQUESTS": "99999"}, (16, 256)),
    (OPEN, {}, (16, 256)),                                           # today's maxima
    (OPEN, {"MTP_VIZ_TRAFFIC_LEVELS": "8", "MTP_VIZ_TRAFFIC_REQUESTS": "32"}, (8, 32)),
])
def test_the_sweeps_bounds_come_from_the_environment(monkeypatch, allow, env, want):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    th = TrafficHandlers(ServerPolicy(allow, "http://127.0.0.1:8000"))
    assert traffic_handlers.limits(th.policy) == want == (th.highest, th.max_requests)


def test_a_locked_down_sweep_sends_no_more_than_its_bounds(serve, monkeypatch):
    """At most MTP_VIZ_TRAFFIC_LEVELS levels × 2 servers × MTP_VIZ_TRAFFIC_REQUESTS requests;
    more is refused with one sentence before anything is sent."""
    monkeypatch.setenv("MTP_VIZ_TRAFFIC_LEVELS", "2")
    monkeypatch.setenv("MTP_VIZ_TRAFFIC_REQUESTS", "3")
    server, url = _vllm(serve, hostile.reply(200, GOOD, [("Content-Type", "text/event-stream")]))
    th = TrafficHandlers(ServerPolicy(LOCKED, url))
    for levels, requests, words in (("1,2,3", 3, "whole numbers from 1 to 2"),
                                    ("1,2", 4, "Requests per level must be a whole number from 1 to 3")):
        (status, *_rest), = list(th.sweep(url, url, levels, requests, 4, None))
        assert words in status and "mv-msg-error" in status
    assert server.seen == []
    frames = list(th.sweep(url, url, "1,2", 3, 5, None))
    assert "Done:" in frames[-1][0], frames[-1][0]
    assert server.seen.count("/v1/completions") == 2 * 2 * 3
    with pytest.raises(UserError, match="whole numbers from 1 to 2"):   # the sweep itself checks too
        list(traffic.sweeping(Servers(url, url), ["x"], [3], 1, None, greedy=True, highest=2))
    with pytest.raises(UserError, match="from 1 to 3"):
        list(traffic.sweeping(Servers(url, url), ["x"], [1], 4, None, greedy=True, max_requests=3))


def test_the_panel_states_and_starts_within_its_bounds(monkeypatch):
    import gradio as gr

    from mtp_viz.app.page.vllm import traffic_section
    monkeypatch.setenv("MTP_VIZ_TRAFFIC_LEVELS", "2")
    monkeypatch.setenv("MTP_VIZ_TRAFFIC_REQUESTS", "3")
    th = TrafficHandlers(ServerPolicy(LOCKED, "http://127.0.0.1:8000"))
    with gr.Blocks() as demo:
        traffic_section(th)
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    text = " ".join(str(getattr(b, "value", "")) for b in demo.blocks.values() if isinstance(b, gr.Markdown))
    assert "At most 2 at once, 3 requests per level" in text
    assert by_id["traffic-levels"].value == "1,2" and by_id["traffic-requests"].value == 3


# ------------------------------------------------------------- a server that is not vLLM

@pytest.mark.parametrize("code", [418, 500])
def test_a_non_vllm_server_is_one_sentence_without_status_path_or_port_in_the_traffic_panel(serve, code):
    server, url = serve(lambda h: hostile.reply(code, f"<h1>{SECRET}</h1>")(h))
    port = url.rsplit(":", 1)[1]
    th = TrafficHandlers(ServerPolicy(OPEN, ""))
    frames = list(th.sweep(url, url, "4", 8, 16, None))
    status = frames[-1][0]
    assert "mv-msg-error" in status and status.count("<div") == 1 and status.count(". ") == 0
    assert "is not a vLLM server" in status and "speculating server" in status
    for leak in (str(code), port, "/v1", "/metrics", "HTTP", SECRET, "127.0.0.1"):
        assert leak not in status, leak
    # one /props to tell the server's kind, then each of the 4 clients stopped at its first refusal
    assert server.seen.count("/props") == 1 and len(server.seen) <= 5


def _vllm_handlers(policy):
    h = Handlers(service.PairLoader(lambda t, d: None), deploy.presets(OPEN), ("tiny", None), 64, 256)
    return server_handlers.ServerHandlers(h, policy)


def _values(url, **kw):
    return {**dict(prompt="def f(x):", model=server_handlers.VLLM, custom_target="", custom_drafter="",
                   max_new_tokens=16, draft_tokens=4, schedule="constant", drafter_kind="mtp", decoding="greedy",
                   temperature=0.8, top_p=0.95, top_k=0, seed=0, chat=False, baseline=True,
                   vllm_url=url, vllm_baseline_url=""), **kw}


@pytest.mark.parametrize("code", [418, 500])
def test_a_non_vllm_server_has_no_status_or_path_in_the_vllm_run_load_or_dashboard(serve, code):
    """These name the server by the address the visitor typed (nothing the server told)."""
    server, url = serve(lambda h: hostile.reply(code, f"<h1>{SECRET}</h1>")(h))
    vh = _vllm_handlers(ServerPolicy(OPEN, ""))
    frames = list(vh.run(_values(url), runs.Session()))
    errors = [str(f[OUTPUTS.index("status")]) for f in frames if "mv-msg-error" in str(f[OUTPUTS.index("status")])]
    said = [errors[-1], vh.probe(url, ""), vh.watch(url)[1]]
    for line in said:
        assert "is not a vLLM server" in line
        for leak in (f"HTTP {code}", f" {code}", "/v1", "/metrics", SECRET):
            assert leak not in line, (leak, line)


# ------------------------------------------------------------- a flood, in the browser's frames

FLOOD = 20_000


def test_a_flooding_server_sends_the_browser_frames_bounded_by_the_tokens_asked(serve):
    """20,000 tokens in one line and arrays that fit them, for a 16-token run: one sentence,
    the run holds no more than 16 tokens, and every frame together stays small."""
    flood = _sse(_chunk([7] * FLOOD, finish="length"), _final([3] * 4999 + [2], [4] * 5000))
    server, url = _vllm(serve, hostile.reply(200, flood, [("Content-Type", "text/event-stream")]))
    vh = _vllm_handlers(ServerPolicy(OPEN, ""))
    sess = runs.Session()
    frames = list(vh.run(_values(url, vllm_baseline_url=url), sess))
    statuses = [str(f[OUTPUTS.index("status")]) for f in frames]
    errors = [s for s in statuses if "mv-msg-error" in s]
    assert len(errors) == 1 and "more than" in errors[0]
    tokens = [e for e in sess.spec + sess.ar if e.type in ("accepted", "bonus", "token")]
    assert len(tokens) <= 16 and sess.ar == []
    sent = sum(len(str(v)) for f in frames for v in f)
    assert sent < 512 * 1024, f"{sent} characters of frames for a 16-token run"
