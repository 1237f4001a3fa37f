"""The Gradio app: wiring only. Rendering lives in :mod:`mtp_viz.view`, model access and
the run sequence in :mod:`mtp_viz.service`; neither this module nor those import torch.

``build_demo()`` draws the page without loading a model; :func:`launch` starts loading
the default pair in the background and serves. ``mtp-viz ui`` and ``python app.py``
both end up in :func:`launch`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gradio as gr

from . import charts, service, view
from .presets import assets_dir
from .schedules import SCHEDULES

ASSETS = assets_dir()
PRESETS = service.presets()
CUSTOM = "custom"
PLOTS = ("acceptance-plot", "draft-length-plot", "tokens-per-forward-plot", "position-plot", "timing-plot")
SLOTS = ("status", "spec", "spec_stats", "ar", "ar_stats", "compare", "theory") + PLOTS
INTRO = ("**Speculative decoding**: a small *drafter* guesses the next few tokens, the big *target* "
         "model checks all of them in one forward pass and keeps the longest correct prefix plus one "
         "token of its own. Same text as plain decoding, fewer slow target forwards.")
FALLBACK_PROMPTS = {
    "code": ["Write a Python function that returns the n-th Fibonacci number, with a docstring."],
    "json": ['Return a JSON object with keys "name", "age" and "city" for a fictional person.'],
    "summarization": ["Summarize in two sentences: speculative decoding lets a small model draft "
                      "tokens that a large model verifies in parallel, trading cheap guesses for "
                      "fewer expensive forward passes."],
    "translation": ["Translate into French: The weather is nice today, so we will walk to the market."],
    "chat": ["What are three tips for staying focused while working from home?"],
    "creative": ["Write a four-line poem about a lighthouse keeper."],
}


def load_examples(path: Path = ASSETS / "prompts.json") -> list[tuple[str, str]]:
    """(label, prompt) pairs by category from the prompt suite, or built-in examples.

    Accepts ``{category: [prompt | {"prompt"/"text": ...}]}``, a list of
    ``{"category": ..., "prompt"/"text": ...}``, or either under a ``"prompts"`` key."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    items = _examples(data)
    return items or _examples(FALLBACK_PROMPTS)


def _examples(data: Any) -> list[tuple[str, str]]:
    if isinstance(data, dict) and isinstance(data.get("prompts"), (list, dict)):
        data = data["prompts"]
    if isinstance(data, dict):
        data = [{"category": c, "prompt": p} for c, ps in data.items() if isinstance(ps, list) for p in ps]
    items = []
    for d in data if isinstance(data, list) else []:
        cat, text, title = "", d, None
        if isinstance(d, dict):
            cat, text = str(d.get("category", "")), d.get("prompt") or d.get("text") or ""
            title = d.get("title")
            if isinstance(text, dict):
                cat, text = cat or str(text.get("category", "")), text.get("prompt") or text.get("text") or ""
        if isinstance(text, str) and text.strip():
            short = " ".join(str(title or text).split())
            short = short[:70] + ("…" if len(short) > 70 else "")
            items.append((f"{cat} · {short}" if cat else short, text))
    return items


def launch_kwargs() -> dict[str, Any]:
    """Styling for ``demo.launch`` (Gradio 6 takes css and theme at launch)."""
    css_path = ASSETS / "app.css"
    return {"css": css_path.read_text() if css_path.exists() else "",
            "theme": gr.themes.Soft(primary_hue="emerald", secondary_hue="blue")}


def _pick(key: str, custom_target: str, custom_drafter: str) -> tuple[str, str | None]:
    if key == CUSTOM:
        target = (custom_target or "").strip()
        if not target:
            raise ValueError("Enter a hub id or a local folder for the custom target model.")
        return target, (custom_drafter or "").strip() or None
    p = PRESETS.get(key) or PRESETS["tiny"]
    return p["target"], p["drafter"]


def _hint_html(key: str, note: str) -> str:
    hint = PRESETS.get(key, {}).get(
        "hint", "A hub id or a local folder; Gemma 4 targets find their -assistant drafter.")
    return view.message_html(hint + (f" {note}" if note else ""))


def _model_line(loader: service.PairLoader, target: str, drafter: str | None) -> str:
    st = loader.state(target, drafter)
    name = "the bundled tiny pair" if target == "tiny" else target + (f" + {drafter}" if drafter else "")
    if st.status == "loading":
        return view.message_html(f"Loading {name}… {time.monotonic() - st.started:.0f} s")
    if st.status == "ready":
        return view.message_html(f"Ready: {name}.")
    if st.status == "error":
        return view.message_html(st.message, level="error")
    return view.message_html(f"{name[:1].upper()}{name[1:]} loads on first run (or press Load).")


def build_demo(loader: service.PairLoader | None = None, target: str | None = None,
               drafter: str | None = None) -> gr.Blocks:
    """The whole page. Loads no model; ``demo.mtp_loader`` is the pair cache it uses.
    The pair selected at start is ``target``/``drafter`` if given, else
    :func:`service.default_pair` (environment, cached E2B, bundled tiny pair)."""
    loader = loader or service.PairLoader()
    target0, drafter0, note = service.default_pair()
    if target:
        target0, drafter0, note = target, drafter, f"Model pair from the command line: {target}."
    preset0 = next((k for k, p in PRESETS.items() if (p["target"], p["drafter"]) == (target0, drafter0)
                    or (k == target0.lower() and not drafter0)), CUSTOM)
    cap = service.env_cap()
    examples = load_examples()

    with gr.Blocks(title="mtp-viz: speculative decoding, made visible") as demo:
        gr.Markdown("# mtp-viz · speculative decoding, made visible\n" + INTRO, elem_id="intro")
        with gr.Row(elem_id="model-row"):
            model_key = gr.Dropdown([(p["label"], k) for k, p in PRESETS.items()]
                                    + [("Custom hub id or folder", CUSTOM)],
                                    value=preset0, label="Model pair", scale=3, elem_id="model")
            custom_t = gr.Textbox(target0 if preset0 == CUSTOM else "", label="Custom target", scale=2,
                                  visible=preset0 == CUSTOM, placeholder="google/gemma-4-E2B-it or /path/to/folder")
            custom_d = gr.Textbox(drafter0 or "" if preset0 == CUSTOM else "", label="Custom drafter", scale=2,
                                  visible=preset0 == CUSTOM, placeholder="…-assistant (optional)")
            with gr.Column(scale=2, min_width=220):
                model_status = gr.HTML(view.message_html("No model loaded yet."), elem_id="model-status")
                load_btn = gr.Button("Load", size="sm", elem_id="load")
        hint = gr.HTML(_hint_html(preset0, note), elem_id="model-hint")
        timer = gr.Timer(1.0, active=False)

        with gr.Row():
            with gr.Column(scale=3):
                prompt = gr.Textbox(label="Prompt", lines=4, elem_id="prompt",
                                    value=examples[0][1] if examples else "")
                example = gr.Dropdown(examples, label="Example prompts", value=None, elem_id="examples")
                with gr.Row():
                    run_btn = gr.Button("Run", variant="primary", elem_id="run")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
                    replay_btn = gr.Button("Race replay", interactive=False, elem_id="replay")
                    speed = gr.Dropdown([("real time", 1.0), ("½× speed", 0.5), ("¼× speed", 0.25),
                                         ("⅒× speed", 0.1)], value=0.25, label="Replay", show_label=False,
                                        elem_id="replay-speed", min_width=110)
                status = gr.HTML("", elem_id="status")
            with gr.Column(scale=2):
                with gr.Row():
                    max_new = gr.Slider(1, cap, value=min(64, cap), step=1, label="Max new tokens", elem_id="max-new")
                    draft_k = gr.Slider(1, 16, value=4, step=1, label="Draft tokens")
                with gr.Row():
                    schedule = gr.Dropdown(list(SCHEDULES), value="constant", label="Draft-length schedule")
                    drafter_kind = gr.Radio([("MTP assistant", "mtp"), ("Prompt lookup", "lookup")],
                                            value="mtp", label="Drafter", elem_id="drafter-kind")
                with gr.Row():
                    sampling = gr.Radio(["greedy", "sampling"], value="greedy", label="Decoding",
                                        elem_id="decoding")
                    chat = gr.Checkbox(True, label="Chat template", elem_id="chat")
                    baseline = gr.Checkbox(True, label="Then run autoregressive")
                with gr.Row(visible=False) as sampling_row:
                    temperature = gr.Slider(0.05, 2.0, value=0.8, step=0.05, label="Temperature")
                    top_p = gr.Slider(0.05, 1.0, value=0.95, step=0.05, label="Top-p")
                    seed = gr.Number(0, precision=0, label="Seed")

        gr.HTML(view.legend_html(), elem_id="legend", padding=True)
        with gr.Row(equal_height=False):
            with gr.Column(elem_classes="mv-pane"):
                gr.Markdown("### Speculative · drafter proposes, target verifies")
                spec = gr.HTML(view.placeholder_html("Tokens appear here as they are verified."), elem_id="spec-output")
                spec_stats = gr.HTML(view.stats_html(view.RunStats()), elem_id="spec-stats")
            with gr.Column(elem_classes="mv-pane"):
                gr.Markdown("### Autoregressive · one target forward per token")
                ar = gr.HTML(view.placeholder_html("The baseline runs after the speculative pass."), elem_id="ar-output")
                ar_stats = gr.HTML(view.stats_html(view.RunStats()), elem_id="ar-stats")
        compare = gr.HTML("", elem_id="compare")
        figs = charts.all_figures([])
        gr.Markdown("### What happened, step by step", elem_id="charts-title")
        with gr.Row():
            plots = {k: gr.Plot(figs[k], elem_id=k, show_label=False) for k in PLOTS[:2]}
        with gr.Row():
            plots.update({k: gr.Plot(figs[k], elem_id=k, show_label=False) for k in PLOTS[2:]})
        gr.Markdown("### Measured vs theory", elem_id="theory-title")
        theory = gr.HTML(view.placeholder_html("Appears after a run."), elem_id="theory-panel")
        session = gr.State(None)

        comps = {"status": status, "spec": spec, "spec_stats": spec_stats, "ar": ar, "ar_stats": ar_stats,
                 "compare": compare, "theory": theory, **plots}
        outputs = [comps[s] for s in SLOTS] + [session, replay_btn]

        h = Handlers(loader, cap, empty_figures=figs)
        model_key.change(h.model, model_key, [custom_t, custom_d, hint], queue=False)
        load_btn.click(h.load, [model_key, custom_t, custom_d], [model_status, timer], concurrency_limit=None)
        timer.tick(h.tick, [model_key, custom_t, custom_d], [model_status, timer],
                   concurrency_limit=None, show_progress="hidden")
        demo.load(h.load, [model_key, custom_t, custom_d], [model_status, timer], concurrency_limit=None)
        example.change(lambda p: p or gr.skip(), example, prompt, queue=False)
        sampling.change(lambda m: gr.update(visible=m == "sampling"), sampling, sampling_row, queue=False)
        run_btn.click(h.run, [prompt, model_key, custom_t, custom_d, max_new, draft_k, schedule,
                              drafter_kind, sampling, temperature, top_p, seed, chat, baseline],
                      outputs, concurrency_limit=_concurrency(), concurrency_id="model",
                      show_progress="minimal", show_progress_on=status)  # queue position shows there
        replay_ev = replay_btn.click(h.replay, [session, speed], outputs, concurrency_limit=8,
                                     show_progress="hidden")
        stop_btn.click(h.stop, session, None, cancels=[replay_ev], concurrency_limit=None, queue=False)
    demo.mtp_loader, demo.mtp_handlers = loader, h  # type: ignore[attr-defined]
    demo.mtp_default = _pick(preset0, target0, drafter0 or "")  # type: ignore[attr-defined]
    return demo


def frame(f: dict[str, Any], sess: Any = None, replay: Any = None) -> list[Any]:
    """A service frame (slot -> value) as the outputs list; absent slots are skipped."""
    figures = f.get("figures", {})
    vals = [figures[s] if s in figures else f.get(s, gr.skip()) for s in SLOTS]
    return vals + [gr.skip() if sess is None else sess, gr.skip() if replay is None else replay]


class Handlers:
    """The event handlers; one instance per demo, shared by all sessions (per-session
    state travels in ``gr.State``)."""

    def __init__(self, loader: service.PairLoader, cap: int, empty_figures: dict | None = None):
        self.loader, self.cap = loader, cap
        self.empty_figures = empty_figures or charts.all_figures([])  # shared, never mutated

    def model(self, key: str):
        custom = key == CUSTOM
        return gr.update(visible=custom), gr.update(visible=custom), _hint_html(key, "")

    def load(self, key: str, ct: str, cd: str):
        try:
            t, d = _pick(key, ct, cd)
        except ValueError as e:
            return view.message_html(str(e), level="error"), gr.Timer(active=False)
        self.loader.start(t, d)
        return _model_line(self.loader, t, d), gr.Timer(active=True)

    def tick(self, key: str, ct: str, cd: str):
        try:
            t, d = _pick(key, ct, cd)
        except ValueError:
            return gr.skip(), gr.Timer(active=False)
        line = _model_line(self.loader, t, d)
        return line, gr.Timer(active=self.loader.state(t, d).status == "loading")

    def run(self, prompt, key, ct, cd, max_new, k, sched, kind, mode, temp, top_p, seed, chat, baseline):
        """Speculative run, then the baseline, streamed as frames for the outputs."""
        sess = service.Session()
        reset = {"spec": view.placeholder_html("Waiting for the model…"), "ar": view.placeholder_html(
            "The baseline runs after the speculative pass." if baseline else "Baseline off."),
            "spec_stats": view.stats_html(view.RunStats()), "ar_stats": view.stats_html(view.RunStats()),
            "compare": "", "theory": "", "figures": self.empty_figures}
        try:
            if not (prompt or "").strip():
                raise ValueError("Type a prompt first, or pick one of the examples.")
            target, drafter = _pick(key, ct, cd)
        except ValueError as e:
            yield frame({"status": view.message_html(str(e), level="error")}, sess, gr.update(interactive=False))
            return
        yield frame({**reset, "status": _model_line(self.loader, target, drafter)}, sess, gr.update(interactive=False))
        while (st := self.loader.wait(target, drafter, timeout=0.5)).status == "loading":
            if sess.stop.is_set():  # the model keeps loading for the next run
                yield frame({"status": view.message_html("Stopped while the model loads.", level="warn")})
                return
            yield frame({"status": _model_line(self.loader, target, drafter)})
        if st.status != "ready":
            yield frame({"status": view.message_html(st.message, level="error")})
            return
        greedy = mode == "greedy"
        settings = dict(drafter=kind, max_new_tokens=max(1, min(int(max_new), self.cap)), draft_tokens=int(k),
                        schedule=sched, temperature=0.0 if greedy else float(temp),
                        top_p=1.0 if greedy else float(top_p), top_k=0,
                        seed=None if greedy else int(seed or 0), chat=bool(chat))
        for f in service.compare_frames(st.pair, prompt, settings, sess, baseline=bool(baseline)):
            yield frame(f)
        yield frame({}, replay=gr.update(interactive=bool(sess.spec and sess.ar)))

    @staticmethod
    def stop(sess):
        if sess is not None:
            sess.stop.set()

    @staticmethod
    def replay(sess, speed):
        """Both recorded runs, side by side, on their recorded timestamps."""
        if sess is None or not sess.spec:
            yield frame({"status": view.message_html("Run a prompt first.", level="warn")})
            return
        speed, t0, shown, clock = float(speed or 1.0), time.monotonic(), None, 0.0
        while True:
            now = time.monotonic()
            t = (now - t0) * speed
            (s, s_done), (a, a_done) = view.events_until(sess.spec, t), view.events_until(sess.ar, t)
            status = {"status": view.message_html(f"Race replay at {speed:g}× speed · t = {t:.2f} s")}
            if (len(s), len(a)) != shown:  # tokens only when some arrived; the clock 4× a second
                shown, clock = (len(s), len(a)), now
                yield frame({"spec": view.tokens_html(s), "ar": view.tokens_html(a),
                             "spec_stats": view.stats_html(view.run_stats(s, now=t)),
                             "ar_stats": view.stats_html(view.run_stats(a, now=t)), **status})
            elif now - clock >= 0.25:
                clock = now
                yield frame(status)
            if s_done and a_done:
                break
            time.sleep(0.04)
        yield frame({"status": view.message_html(
            f"Replay done: speculative finished in {view.run_stats(sess.spec).seconds:.2f} s, "
            f"autoregressive in {view.run_stats(sess.ar).seconds:.2f} s.")})


def _concurrency() -> int:
    try:
        return max(1, int(os.environ.get("MTP_VIZ_CONCURRENCY", "1")))
    except ValueError:
        return 1


def _report_load(loader: service.PairLoader, target: str, drafter: str | None) -> None:
    """One line on stderr once the pair loaded at launch is ready (or failed)."""
    st = loader.wait(target, drafter)
    took = time.monotonic() - st.started
    msg = f"model pair ready in {took:.1f} s" if st.status == "ready" else st.message
    print(f"mtp-viz: {target}{' + ' + drafter if drafter else ''}: {msg}", file=sys.stderr, flush=True)


def launch(demo: gr.Blocks, *, host: str | None = None, port: int | None = None, **kwargs: Any):
    """Start loading the default pair in the background, then serve (Gradio's own
    ``GRADIO_SERVER_NAME``/``GRADIO_SERVER_PORT`` apply when host/port are not given)."""
    loader, (target, drafter) = demo.mtp_loader, demo.mtp_default  # type: ignore[attr-defined]
    loader.start(target, drafter)
    threading.Thread(target=_report_load, args=(loader, target, drafter), daemon=True).start()
    demo.queue(default_concurrency_limit=_concurrency())
    return demo.launch(server_name=host, server_port=port, **{**launch_kwargs(), **kwargs})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="target model: hub id, local folder or 'tiny' (env MTP_VIZ_TARGET)")
    parser.add_argument("--drafter", help="drafter: hub id or local folder (env MTP_VIZ_DRAFTER)")
    parser.add_argument("--host", help="address to listen on (env GRADIO_SERVER_NAME; default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (env GRADIO_SERVER_PORT; default 7860)")
    parser.add_argument("--share", action="store_true", help="also serve through a public gradio.live link")


def run(args: argparse.Namespace) -> int:
    demo = build_demo(target=args.target, drafter=args.drafter)
    launch(demo, host=args.host, port=args.port, share=args.share or None)
    return 0
