"""Bad requests: what a script or a link can send that the app once mishandled.

Through a real ``gradio_client`` against a served app (its loader refuses the default
pair and loads anything else with :func:`mtp_viz.sources.models.load_pair`, so nothing
is loaded unless a test asks), and through the real CLI:

- a wrong-typed value of any ``/generate`` parameter is one ``error`` event naming it
  (defect 4);
- out-of-range sampling numbers are refused under greedy decoding too, with the CLI's
  sentence (defect 5);
- a bad ``presenter=`` link value is named like every other bad link parameter (defect 7);
- a 100,000-character model name comes back as a short prefix (defect 8).
"""
from __future__ import annotations

import re

import pytest

from mtp_viz.errors import UserError
from serving import serve

PARAMS = ("prompt", "model", "mode", "drafter", "max_new_tokens", "draft_tokens", "schedule",
          "temperature", "top_p", "top_k", "seed", "chat")
# how each parameter is named in its sentence
NAMES = {"max_new_tokens": "max new tokens", "draft_tokens": "draft tokens", "top_p": "top-p",
         "top_k": "top-k"}
WRONG = (["tiny"], 5, {"a": 1}, None, 3, ["constant"], True)
# values of WRONG that are right for a parameter (None: the seed's "fresh entropy")
VALID = {"max_new_tokens": (5, 3), "draft_tokens": (5, 3), "temperature": (5, 3), "top_k": (5, 3),
         "seed": (5, 3, None), "chat": (True,)}
LONG = "x" * 100_000


def _no_default(target, drafter):
    from mtp_viz.errors import UserError
    from mtp_viz.sources.models import load_pair
    if target == "tiny":
        raise UserError("This test app loads no default pair.")
    return load_pair(target, drafter)


@pytest.fixture(scope="module")
def client():
    from gradio_client import Client

    from mtp_viz.app.page import layout as ui
    from mtp_viz.app.runtime import service
    demo = ui.build_demo(loader=service.PairLoader(_no_default), target="tiny")
    yield Client(serve(demo), verbose=False)
    demo.close()


def _one_error(client, **kw) -> str:
    events = client.predict(**{"prompt": "def f(x):", **kw}, api_name="/generate")
    assert len(events) == 1 and events[0]["type"] == "error", events[:3]
    assert isinstance(events[0]["message"], str) and events[0]["message"]
    return events[0]["message"]


def _cases():
    for p in PARAMS:
        for v in WRONG:
            if v not in VALID.get(p, ()):
                yield p, v


@pytest.mark.parametrize("param, value", list(_cases()), ids=lambda x: repr(x)[:12])
def test_a_wrong_typed_value_of_any_parameter_is_one_error_naming_it(client, param, value):
    message = _one_error(client, **{param: value})
    name = NAMES.get(param, param)
    assert re.search(rf"\b{re.escape(name)}\b", message, re.IGNORECASE), message
    assert "Something went wrong" not in message and len(message) < 200


@pytest.mark.parametrize("flag, value", [("top_p", 2), ("seed", -1), ("top_k", -5)])
def test_out_of_range_sampling_numbers_are_refused_under_greedy_decoding_as_the_cli_does(
        client, capsys, flag, value):
    from mtp_viz.cli.main import main
    message = _one_error(client, temperature=0, **{flag: value})
    rc = main(["generate", "--temperature", "0", f"--{flag.replace('_', '-')}", str(value), "--prompt", "hi"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == f"mtp-viz: error: {message}"


@pytest.mark.parametrize("model", [LONG, "/" + LONG, "org/" + LONG])
def test_a_long_model_name_comes_back_as_a_short_prefix(client, model):
    message = _one_error(client, model=model, max_new_tokens=2)
    assert len(message) < 300 and "…" in message and "xxxxx" in message


def test_the_cli_quotes_a_long_target_as_a_short_prefix(capsys):
    from mtp_viz.cli.main import main
    assert main(["generate", "--target", LONG, "--prompt", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mtp-viz: error: ") and len(err) < 300 and "…" in err


def test_a_long_custom_name_in_the_status_line_is_a_short_prefix():
    from mtp_viz.app.handlers.local import Handlers
    from mtp_viz.app.runtime import service
    from mtp_viz.app.runtime.pairs import PairSpec
    h = Handlers(service.PairLoader(_no_default), {}, ("tiny", None), 64, 2048, empty_figures={})
    assert len(h.gate.model_line(PairSpec(LONG, LONG))) < 400


def test_quote_and_clip_cut_to_a_short_prefix():
    from mtp_viz.errors import NAME, clip
    from mtp_viz.sources.settings import QUOTE, quote
    assert clip("short") == "short" and len(clip(LONG)) == NAME and clip(LONG).endswith("…")
    assert len(quote(LONG)) == QUOTE


@pytest.mark.parametrize("value", ["yes", "0", "true", ""])
def test_a_bad_presenter_value_in_a_link_is_named(value):
    from mtp_viz.app.handlers import links
    limits = links.Limits(("tiny",), 512, 16 * 2048)
    link = links.parse({"presenter": value, "draft_tokens": "6"}, limits)
    assert link.problems == ["presenter (must be 1)"] and link.values == {"draft_tokens": 6}
    assert link.sentence() == "Ignored from the link: presenter (must be 1)."
    assert links.parse({"presenter": "1"}, limits).problems == []


def test_a_replay_of_a_very_long_trace_ends_at_its_bound(monkeypatch):
    """Defect 3: a valid trace an hour long, replayed at real time, stops after
    REPLAY_SECONDS and shows the whole run, so it holds its slot no longer than that."""
    import dataclasses

    from mtp_viz.app.handlers import local, recorded
    from mtp_viz.app.runtime import runs
    from streams import ar_run, spec_run
    monkeypatch.setattr(recorded, "REPLAY_SECONDS", 0.5)
    sess = runs.Session()
    late = lambda e: dataclasses.replace(e, t=3000.0) if hasattr(e, "t") and e.type == "step" else e  # noqa: E731
    sess.spec, sess.ar = [late(e) for e in spec_run()], ar_run()
    frames = list(recorded.Traces.replay(sess, 1.0))
    status = frames[-1][local.OUTPUTS.index("status")]
    assert "stopped after" in status and "Replay done" in status
    spec = frames[-1][local.OUTPUTS.index("spec")]
    assert 'data-kind="accepted"' in spec  # the whole run, though its steps were not reached


@pytest.mark.parametrize("speed", [0, -1, float("nan"), float("inf"), "fast", 1e9])
def test_a_bad_replay_speed_is_one_sentence(speed):
    from mtp_viz.app.handlers import local, recorded
    from mtp_viz.app.runtime import runs
    from streams import ar_run, spec_run
    sess = runs.Session()
    sess.spec, sess.ar = spec_run(), ar_run()
    frames = list(recorded.Traces.replay(sess, speed))
    assert len(frames) == 1 and "replay speed" in frames[0][local.OUTPUTS.index("status")]


@pytest.mark.parametrize("field,value,name", [("experts", "yes", "Count experts"), ("experts", 1, "Count experts"),
                                              ("chat", "no", "Chat"), ("baseline", 0, "Baseline")])
def test_a_forged_switch_on_the_page_is_true_or_false_only(field, value, name):
    """The page's switches take true or false, as /generate's chat does: "yes"
    and 1 were read as on (bool("no") is true)."""
    from mtp_viz.app.handlers import form
    values = dict(prompt="def f():", decoding="greedy", seed=0, temperature=0.8, top_k=0, top_p=0.95, baseline=True,
                  drafter_kind="auto", max_new_tokens=8, draft_tokens=4, schedule="constant", chat=False,
                  experts=False)
    values[field] = value
    with pytest.raises(UserError, match=f"^{name} must be true or false, not "):
        form.form_settings(values, 64, 512)
