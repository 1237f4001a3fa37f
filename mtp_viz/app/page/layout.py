"""The Gradio page: layout and wiring only. Handlers live in :mod:`.handlers`, rendering
in :mod:`.view`, :mod:`.panels` and :mod:`.charts`, model access in :mod:`.service`
and :mod:`.runs`; none of them imports torch.

``build_demo()`` draws the page without loading a model; :func:`launch` starts loading
the default pair in the background and serves. ``mtp-viz ui`` and ``python app.py``
both end up in :func:`launch`. The first screen fits a 1280×720 projector: the prompt,
Run, the speedup and both token panes; settings a first-time user does not need sit
in a collapsed group.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

import gradio as gr

from mtp_viz.prompts import Prompt, category_suite, code_suite, load_prompts
from mtp_viz.engine.schedules import SCHEDULES
from mtp_viz.app.views import charts, stats as stats_view, explain, tokens as view
from . import inspector as inspect_ui, teach, vllm as vllm_tab
from mtp_viz.app.handlers import links
from mtp_viz.app.runtime import runs, service
from mtp_viz.app.handlers.local import CUSTOM, PLOTS, SLOTS, Handlers
from mtp_viz.app.runtime.guard import ServerPolicy

INTRO = ("A small <b>drafter</b> guesses the next few tokens; the <b>target</b> checks them all in one "
         "forward pass, keeps the longest correct prefix and adds one token of its own. Same text as "
         "plain decoding, fewer slow target forwards.")


def examples_for(key: str) -> list[Prompt]:
    """Prompts that suit the pair: held-out code for the bundled code model, the
    category suite (code, JSON, chat, …) for instruction models."""
    return load_prompts(code_suite(), default_category="code") if key == "tiny" else load_prompts(category_suite())


def launch_kwargs() -> dict[str, Any]:
    """Styling for ``demo.launch`` (Gradio 6 takes css and theme at launch)."""
    return {"css": service.css(),
            "theme": gr.themes.Soft(primary_hue="emerald", secondary_hue="blue")}


def _hint_html(presets: dict, key: str, note: str) -> str:
    hint = presets.get(key, {}).get(
        "hint", "A hub id or a local folder; Gemma 4 targets find their -assistant drafter.")
    return view.message_html(hint + (f" {note}" if note else ""))


def _choices(prompts: list[Prompt]) -> list[tuple[str, str]]:
    return [(p.label, p.text) for p in prompts]


def _pane(title: str, key: str, placeholder: str) -> tuple[gr.HTML, gr.HTML]:
    """A token pane (``#{key}-output``) under its title, with its stats line below."""
    with gr.Column(elem_classes="mv-pane"):
        gr.HTML(f'<div class="mv-pane-title">{title} {explain.explain(key)}</div>', padding=False)
        tokens = gr.HTML(view.placeholder_html(placeholder), elem_id=f"{key}-output", padding=False)
        stats = gr.HTML(stats_view.stats_html(stats_view.RunStats()), elem_id=f"{key}-stats", padding=False)
    return tokens, stats


def build_demo(loader: service.PairLoader | None = None, target: str | None = None,
               drafter: str | None = None) -> gr.Blocks:
    """The whole page. Loads no model; ``demo.mtp_loader`` is the pair cache it uses.
    The pair selected at start is ``target``/``drafter`` if given, else
    :func:`service.default_pair` (environment, cached E2B, bundled tiny pair)."""
    loader = loader or service.PairLoader(runs.load_and_warm)
    presets = service.presets(loader.allow)
    target0, drafter0, note = service.default_pair(loader.allow)
    if target:
        target0, drafter0, note = target, drafter, f"Model pair from the command line: {target}."
    preset0 = next((k for k, p in presets.items() if (p["target"], p["drafter"]) == (target0, drafter0)
                    or (k == target0.lower() and not drafter0)), CUSTOM)
    cap, prompt_cap = service.env_cap(), service.env_prompt_cap()
    examples = examples_for(preset0)
    choices = [(p["label"], k) for k, p in presets.items()]
    if not loader.allow.active:
        choices.append(("Custom hub id or folder", CUSTOM))
    policy = ServerPolicy(loader.allow)
    choices += vllm_tab.choices(policy)
    figs = charts.all_figures([])
    h = Handlers(loader, presets, (target0, drafter0), cap, prompt_cap, empty_figures=figs)
    vh = vllm_tab.VllmHandlers(h, policy)

    # delete_cache: uploads and downloads leave Gradio's cache after an hour (a Space runs for weeks)
    with gr.Blocks(title="mtp-viz: speculative decoding, made visible", delete_cache=(1800, 3600)) as demo:
        gr.HTML(f'<div class="mv-title"><b>mtp-viz</b> · speculative decoding, made visible. '
                f'<span>{INTRO}</span> {explain.header_links()}</div>', elem_id="header", padding=False)
        with gr.Row(elem_id="top-row", equal_height=False):
            with gr.Column(scale=6, min_width=440):
                prompt = gr.Textbox(label="Prompt", lines=3, max_lines=3, elem_id="prompt",
                                    value=examples[0].text if examples else "")
                with gr.Row(elem_id="buttons"):
                    run_btn = gr.Button("Run", variant="primary", elem_id="run", min_width=70, size="sm")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop", min_width=70, size="sm")
                    measure_btn = gr.Button("Measure", elem_id="measure", min_width=80, size="sm")
                    replay_btn = gr.Button("Race replay", interactive=False, elem_id="replay", min_width=100,
                                           size="sm")
                    example = gr.Dropdown(_choices(examples), value=None, elem_id="examples", show_label=False,
                                          container=False, scale=3, min_width=180,
                                          info=None, filterable=False)
                    step_mode = gr.Checkbox(False, label="Step", elem_id="step-mode", container=False,
                                            scale=0, min_width=70)
                    next_btn = gr.Button("Next", elem_id="next", min_width=60, size="sm", scale=0)
                status = gr.HTML("", elem_id="status", padding=False)
                caption = gr.HTML("", elem_id="step-caption", padding=False)
            with gr.Column(scale=4, min_width=360):
                with gr.Row():
                    model_key = gr.Dropdown(choices, value=preset0, label="Model pair", scale=4,
                                            elem_id="model")
                    load_btn = gr.Button("Load", size="sm", elem_id="load", scale=0, min_width=60)
                with gr.Row(visible=preset0 == CUSTOM) as custom_row:
                    custom_t = gr.Textbox(target0 if preset0 == CUSTOM else "", label="Custom target",
                                          placeholder="google/gemma-4-E2B-it or /path/to/folder",
                                          elem_id="custom-target")
                    custom_d = gr.Textbox((drafter0 or "") if preset0 == CUSTOM else "", label="Custom drafter",
                                          placeholder="…-assistant (optional)", elem_id="custom-drafter")
                server = vllm_tab.source_row(policy)
                model_status = gr.HTML(view.message_html("No model loaded yet."), elem_id="model-status",
                                       padding=False)
                with gr.Row():
                    max_new = gr.Slider(1, cap, value=min(64, cap), step=1, label="Max new tokens",
                                        elem_id="max-new")
                    draft_k = gr.Slider(1, 16, value=4, step=1, label="Draft tokens", elem_id="draft-tokens")
        compare = gr.HTML(stats_view.compare_html(stats_view.RunStats(), stats_view.RunStats(), greedy=True),
                          elem_id="compare-panel", padding=False)
        with gr.Row(equal_height=False, elem_id="panes"):
            spec, spec_stats = _pane("Speculative · drafter proposes, target verifies", "spec",
                                     "Tokens appear here as they are verified.")
            ar, ar_stats = _pane("Autoregressive · one target forward per token", "ar",
                                 "The baseline takes turns with the speculative run.")
        gr.HTML(view.legend_html() + explain.explain("legend", corner=True), elem_id="legend", padding=False)
        with gr.Row(elem_id="trace-row", equal_height=True):  # below the panes: the first screen stays
            trace_example = gr.Dropdown(h.example_traces(), value=None, label="Example trace (no model needed)",
                                        elem_id="trace-examples", scale=3, filterable=False)
            trace_upload = gr.File(label="Replay a trace (.jsonl)", file_types=[".jsonl", ".json", ".txt"],
                                   type="filepath", elem_id="trace-upload", height=100, scale=3)
            with gr.Column(scale=1, min_width=150):
                trace_download = gr.DownloadButton("Download trace", value=None, interactive=False,
                                                   elem_id="trace-download", size="sm")
                export_html = gr.DownloadButton("Page (HTML)", value=None, interactive=False,
                                                elem_id="export-html", size="sm")
                export_csv = gr.DownloadButton("Steps (CSV)", value=None, interactive=False,
                                               elem_id="export-csv", size="sm")
        scrub = gr.Slider(0, 1, value=0, step=1, interactive=False, elem_id="scrub",
                          label="Scrub: the state after step… (after a run or a replay)")
        hint = gr.HTML(_hint_html(presets, preset0, note), elem_id="model-hint")
        with gr.Accordion("More settings", open=False, elem_id="settings"):
            with gr.Row():
                schedule = gr.Dropdown(list(SCHEDULES), value="constant", label="Draft-length schedule",
                                       elem_id="schedule")
                drafter_kind = gr.Radio([("MTP assistant", "mtp"), ("Prompt lookup", "lookup")],
                                        value="mtp", label="Drafter", elem_id="drafter-kind")
                chat = gr.Checkbox(preset0 not in ("tiny",), label="Chat template", elem_id="chat")
                baseline = gr.Checkbox(True, label="Then run autoregressive", elem_id="baseline")
            with gr.Row():
                sampling = gr.Radio(["greedy", "sampling"], value="greedy", label="Decoding", elem_id="decoding")
                temperature = gr.Slider(0.05, 2.0, value=0.8, step=0.05, label="Temperature",
                                        elem_id="temperature")
                top_p = gr.Slider(0.05, 1.0, value=0.95, step=0.05, label="Top-p", elem_id="top-p")
                top_k = gr.Number(0, precision=0, label="Top-k (0 = off)", elem_id="top-k")
                seed = gr.Number(0, precision=0, label="Seed", elem_id="seed")
            with gr.Row():
                repeats = gr.Slider(2, 15, value=5, step=1, label="Measure: repeats of each mode",
                                    elem_id="repeats")
                speed = gr.Dropdown([("real time", 1.0), ("½× speed", 0.5), ("¼× speed", 0.25),
                                     ("⅒× speed", 0.1)], value=0.25, label="Race replay speed",
                                    elem_id="replay-speed")
        timer = gr.Timer(1.0, active=False)
        gr.Markdown("### What happened, step by step", elem_id="charts-title")
        gr.HTML(explain.explanations(PLOTS, "About the charts:"), padding=False)
        with gr.Row():
            plots = {k: gr.Plot(figs[k], elem_id=k, show_label=False) for k in PLOTS[:2]}
        with gr.Row():
            plots.update({k: gr.Plot(figs[k], elem_id=k, show_label=False) for k in PLOTS[2:]})
        gr.Markdown("### Measured vs theory", elem_id="theory-title")
        gr.HTML(explain.explanations(["theory"], "About this panel:"), padding=False)
        theory = gr.HTML(view.placeholder_html("Appears after a run."), elem_id="theory-panel")
        what_if = teach.sections()
        inspector_panel, anatomy_panel = inspect_ui.components()  # #inspector floats over the page
        session = gr.State(None)

        form = {prompt: "prompt", model_key: "model", custom_t: "custom_target", custom_d: "custom_drafter",
                max_new: "max_new_tokens", draft_k: "draft_tokens", schedule: "schedule",
                drafter_kind: "drafter_kind", sampling: "decoding", temperature: "temperature",
                top_p: "top_p", top_k: "top_k", seed: "seed", chat: "chat", baseline: "baseline",
                step_mode: "step_mode", server.url: "vllm_url", server.baseline: "vllm_baseline_url"}
        comps = {"status": status, "caption": caption, "spec": spec, "spec_stats": spec_stats, "ar": ar, "ar_stats": ar_stats,
                 "compare": compare, "theory": theory, **plots}
        outputs = [comps[s] for s in SLOTS] + [session, replay_btn]

        def values(data: dict) -> dict[str, Any]:
            return {name: data[c] for c, name in form.items()}

        def on_model(key: str):
            prompts, vllm = examples_for(key), key == vllm_tab.VLLM  # a server's chat template is unknown
            return (gr.update(visible=key == CUSTOM),
                    view.message_html(vllm_tab.HINT) if vllm else _hint_html(presets, key, ""),
                    gr.update(choices=_choices(prompts), value=None),
                    gr.skip() if vllm else gr.update(value=key != "tiny"), gr.update(visible=vllm),
                    vh.picked(key))

        hidden = dict(api_visibility="private")
        model_key.change(on_model, model_key, [custom_row, hint, example, chat, server.row, model_status],
                         queue=False, **hidden)
        load_inputs = [model_key, custom_t, custom_d]
        load_ev = load_btn.click(vh.load, load_inputs + [server.url, server.baseline],
                                 [model_status, timer, chat], **hidden)
        limits = links.Limits(tuple(presets), cap, 16 * prompt_cap)
        restored = teach.wire(demo, form, status, limits)  # deep link, Copy link, tour, presenter mode
        loads = [load_ev, restored.then(h.load, load_inputs, [model_status, timer, chat], **hidden),
                 timer.tick(h.tick, load_inputs, [model_status, timer, chat], show_progress="hidden", **hidden)]
        example.change(lambda p: p or gr.skip(), example, prompt, queue=False, **hidden)
        def run(data: dict):
            v = values(data)
            yield from (vh if v["model"] == vllm_tab.VLLM else h).run(v, data[session])

        def measure(data: dict):
            v = values(data)
            yield from (vh if v["model"] == vllm_tab.VLLM else h).measure(v, data[repeats], data[session])

        run_ev = run_btn.click(run, set(form) | {session}, outputs, concurrency_id="model",
                               show_progress="minimal", show_progress_on=status, **hidden)
        measure_ev = measure_btn.click(measure, set(form) | {session, repeats}, outputs,
                                       concurrency_id="model", show_progress="minimal",
                                       show_progress_on=status, **hidden)
        replay_ev = replay_btn.click(h.replay, [session, speed], outputs, concurrency_limit=8,
                                     show_progress="hidden", **hidden)
        trace_opts = dict(concurrency_limit=8, show_progress="hidden", **hidden)
        upload_ev = trace_upload.upload(h.replay_trace, [trace_upload, session, speed], outputs, **trace_opts)
        example_ev = trace_example.change(h.replay_example, [trace_example, session, speed], outputs,
                                          **trace_opts)
        for ev in (run_ev, upload_ev, example_ev, replay_ev):  # download and scrub what the panes show
            ev.then(h.download_files, session, [trace_download, export_html, export_csv], queue=False,
                    **hidden).then(
                h.scrub_range, session, scrub, queue=False, **hidden).then(
                teach.what_if_update, session, what_if, queue=False, **hidden)
        inspect_ui.attach(h, session, inspector_panel, anatomy_panel, load_inputs, loads, [run_ev])
        for start in (run_btn.click, trace_upload.upload, trace_example.change):  # a new run or trace:
            start(lambda: "", None, inspector_panel, queue=False, **hidden)       # the old token goes
        # input, not change: the range set after a run must not re-render the panes
        scrub.input(h.scrub, [session, scrub], outputs, trigger_mode="always_last", show_progress="hidden",
                    concurrency_limit=8, **hidden)
        stop_btn.click(h.stop, session, None, cancels=[replay_ev, upload_ev, example_ev], queue=False, **hidden)
        # queue=False: both must reach a run that holds the model's queue slot
        step_mode.change(h.step_mode, [session, step_mode], None, queue=False, **hidden)
        next_btn.click(h.next_step, session, status, queue=False, **hidden)
        if policy.offered:
            vllm_tab.dashboard_tab(vh)
        gr.api(h.api_generate, api_name="generate", concurrency_id="model")
    demo.mtp_loader, demo.mtp_handlers = loader, h  # type: ignore[attr-defined]
    demo.mtp_default = h.default  # type: ignore[attr-defined]
    demo.mtp_events = {"run": run_ev, "measure": measure_ev}  # type: ignore[attr-defined]
    return demo


def _report_load(loader: service.PairLoader, target: str, drafter: str | None) -> None:
    """One line on stderr once the pair loaded at launch is ready (or failed)."""
    st = loader.wait(target, drafter)
    took = time.monotonic() - st.started
    msg = f"model pair ready in {took:.1f} s" if st.status == "ready" else st.message
    print(f"mtp-viz: {target}{' + ' + drafter if drafter else ''}: {msg}", file=sys.stderr, flush=True)


def launch(demo: gr.Blocks, *, host: str | None = None, port: int | None = None, **kwargs: Any):
    """Start loading the default pair in the background, then serve (Gradio's own
    ``GRADIO_SERVER_NAME``/``GRADIO_SERVER_PORT`` apply when host/port are not given).
    ``MTP_VIZ_CONCURRENCY`` runs at once (default 1, so timings never share the CPU)
    and ``MTP_VIZ_QUEUE_SIZE`` waiting requests at most. Gradio keeps a copy of the
    page's config (~0.15 MB here) for every session, and every plain HTTP API call is a
    session: ``MTP_VIZ_MAX_SESSIONS`` bounds them (least recently used out)."""
    loader, (target, drafter) = demo.mtp_loader, demo.mtp_default  # type: ignore[attr-defined]
    loader.start(target, drafter)
    threading.Thread(target=_report_load, args=(loader, target, drafter), daemon=True).start()
    demo.queue(default_concurrency_limit=service.env_int("MTP_VIZ_CONCURRENCY", 1),
               max_size=service.env_int("MTP_VIZ_QUEUE_SIZE", 32))
    return demo.launch(server_name=host, server_port=port,
                       **{**launch_kwargs(), "state_session_capacity": service.env_sessions(), **kwargs})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="target model: preset, hub id or local folder (env MTP_VIZ_TARGET)")
    parser.add_argument("--drafter", help="drafter: preset, hub id or local folder (env MTP_VIZ_DRAFTER)")
    parser.add_argument("--host", help="address to listen on (env GRADIO_SERVER_NAME; default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (env GRADIO_SERVER_PORT; default 7860)")
    parser.add_argument("--share", action="store_true", help="also serve through a public gradio.live link")


def run(args: argparse.Namespace) -> int:
    demo = build_demo(target=args.target, drafter=args.drafter)
    launch(demo, host=args.host, port=args.port, share=args.share or None)
    return 0
