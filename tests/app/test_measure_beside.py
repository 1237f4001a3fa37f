"""Measure beside other decoders of the same model, for real (marked ``llamacpp`` and
``slow``): the app's handlers on the bundled pair (loaded as the app loads it), the same
models on the compiled engine (compiled before any timing), a real plain llama-server on
the pair's GGUF, a real llama-server on another model of the same shape and tokenizer
(left out: its greedy text differs), and an address where nothing answers (left out).
Then a Run in the same session names the fastest plain decoder Measure found, when it is
faster than that run's own plain decoding. No assertion on a timing: only on how the
figures relate (the rule), which holds whichever decoder is faster on the day."""
from __future__ import annotations

import html
import re
import shutil
import socket

import pytest

from mtp_viz.app.handlers import local
from mtp_viz.app.runtime import deploy, loading, runs, service
from mtp_viz.paths import assets_dir
from mtp_viz.sources.llamacpp.gguf import export_pair
from real_llamacpp import llama_server, serving

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]
PROMPT = "def fibonacci(n):"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(plain llama-server on the bundled pair, plain llama-server on another model)."""
    llama_server()
    pair = export_pair("tiny", None, tmp_path_factory.mktemp("tiny-gguf"), "f32")
    other = export_pair(str(_other_target(tmp_path_factory.mktemp("other"))), str(assets_dir() / "tiny" / "drafter"),
                        tmp_path_factory.mktemp("other-gguf"), "f32")
    with serving(pair.target) as plain, serving(other.target) as stranger:
        yield plain, stranger


def _other_target(folder):
    """The bundled target with its weights nudged: another model of the same shape and
    tokenizer, whose greedy text departs from the pair's within the first tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    src = assets_dir() / "tiny" / "target"
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(src)
    ids = torch.tensor([tok(PROMPT).input_ids])
    before = model.generate(ids, do_sample=False, max_new_tokens=8, pad_token_id=0)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:   # the matrices, each by its own scale (norms stay)
                p.add_(torch.randn(p.shape, generator=g) * p.std())
    after = model.generate(ids, do_sample=False, max_new_tokens=8, pad_token_id=0)
    assert before.tolist() != after.tolist()   # it is another model by what it writes
    model.save_pretrained(folder)
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name == "generation_config.json":
            shutil.copy(f, folder / f.name)
    return folder


def _handlers() -> local.Handlers:
    loader = service.PairLoader(loading.load_and_warm)
    return local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=64, prompt_cap=256)


def _values(**kw):
    v = dict(prompt=PROMPT, model="tiny", custom_target="", custom_drafter="", max_new_tokens=32,
             draft_tokens=4, schedule="constant", drafter_kind="mtp", decoding="greedy",
             temperature=0.8, top_p=0.95, top_k=0, seed=0, chat=False, baseline=True)
    return {**v, **kw}


def _last(frames, slot):
    i = local.OUTPUTS.index(slot)
    return [f[i] for f in frames if isinstance(f[i], str)]


def _text(line: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", line))


def _attrs(tag: str) -> dict[str, str]:
    return dict(re.findall(r'(data-[\w-]+)="([^"]*)"', tag))


def _dead() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_measure_times_the_compiled_engine_and_a_llamacpp_peer_and_run_names_the_fastest(servers):
    plain, stranger = servers
    h, sess = _handlers(), runs.Session()
    dead = _dead()
    frames = list(h.measuring.measure(_values(), 3, sess, "compiled", f"{plain}, {stranger}, {dead}"))
    status = _last(frames, "status")
    assert any("Compiling" in s for s in status)   # the compiled engine compiled before the timing, said so
    done = _text(status[-1])
    assert done.startswith("Measured 3 repeats of each mode")
    assert "Measure left out peer 3: no server answers at peer 3's address" in done
    # two of one kind: numbered #1 and #2 as the bench numbers them (measure.peers.numbered)
    assert "Left out llama.cpp #2: under greedy decoding it wrote other tokens" in done   # the other model
    for url in (plain, stranger, dead):
        assert url.split("//")[1] not in done

    page = _last(frames, "compare")[-1]
    compare = _attrs(re.search(r'<div id="compare"[^>]*>', page).group(0))
    rows = [_attrs(t) | {"fastest": "data-fastest" in t.split(">")[0]}
            for t in re.findall(r"<tr data-decoder=[^>]*>", page)]
    assert [(r["data-decoder"], r["data-setting"]) for r in rows] == [
        ("this eager engine", "mtp"), ("this eager engine", "plain"),
        ("the compiled engine", "plain"), ("llama.cpp #1", "plain")]
    assert [r["data-engine"] for r in rows] == ["eager", "eager", "compiled", "llamacpp"]
    assert "<td>yes</td><td>yes</td>" not in page and page.count("<td>yes</td>") == 2  # both wrote the plain tokens
    plain_rates = {r["data-decoder"]: float(r["data-tps"]) for r in rows if r["data-setting"] == "plain"}
    best = max(plain_rates, key=plain_rates.get)
    assert [r["data-decoder"] for r in rows if r["fastest"]] == [best]
    assert float(rows[0]["data-over-fastest"]) == pytest.approx(float(compare["data-spec-tps"]) / plain_rates[best],
                                                                rel=1e-3)
    fastest = re.search(r'<span id="fastest-plain"[^>]*>', page)
    if best == "this eager engine":
        assert fastest is None
    else:   # named, with its rate, as the row says
        said = _attrs(fastest.group(0))
        assert said["data-fastest-plain"] == best
        assert float(said["data-fastest-plain-tps"]) == pytest.approx(plain_rates[best], rel=1e-3)

    # a Run of the same pair in the same session: named when faster than this run's plain decoding
    out = list(h.run(_values(), sess))
    run_page = _last(out, "compare")[-1]
    ar_tps = float(_attrs(re.search(r'<div id="compare"[^>]*>', run_page).group(0))["data-ar-tps"])
    others = {k: v for k, v in plain_rates.items() if k != "this eager engine" and v > ar_tps}
    named = re.search(r'<span id="fastest-plain"[^>]*>', run_page)
    if not others:
        assert named is None
    else:
        assert _attrs(named.group(0))["data-fastest-plain"] == max(others, key=others.get)
    # Measure keeps serving after all that: a plain Measure of the pair works on
    again = _last(list(h.measuring.measure(_values(), 2, sess, "none", "")), "status")
    assert _text(again[-1]).startswith("Measured 2 repeats of each mode")
