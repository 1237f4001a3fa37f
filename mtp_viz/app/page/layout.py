"""The Gradio page's layout: the components, section by section, and the app they make.
Events are wired in :mod:`.wiring`; handlers live in :mod:`mtp_viz.app.handlers`,
rendering in :mod:`mtp_viz.views`, model access in :mod:`mtp_viz.app.runtime`; none
of them imports torch.

``build_demo()`` draws the page without loading a model; :func:`launch` (``mtp-viz ui``,
``python app.py``) loads the default pair in the background and serves. The first screen
fits a 1280×720 projector: the prompt, Run, the speedup and both token panes; settings a
first-time user does not need sit in a collapsed group.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import gradio as gr

from mtp_viz.app.handlers.beside import Peers, engine_choices
from mtp_viz.app.handlers.form import NO_ENGINE
from mtp_viz.app.handlers.local import CUSTOM, EXPERTS_WAITING, Handlers
from mtp_viz.app.handlers.recorded import Traces
from mtp_viz.app.handlers.servers import ServerHandlers
from mtp_viz.app.handlers.traffic import TrafficHandlers
from mtp_viz.app.runtime import deploy, loading, pairs, service, work
from mtp_viz.app.runtime.guard import ServerPolicy
from mtp_viz.engine.drafters import DRAFTERS
from mtp_viz.engine.engines import ENGINES, default_engine
from mtp_viz.engine.schedules import SCHEDULES
from mtp_viz.sources.precision import fastest
from mtp_viz.sources.settings import DEFAULT_DRAFT_TOKENS, DEFAULT_MAX_NEW_TOKENS, MAX_DRAFT_TOKENS
from mtp_viz.views import charts, explain, export, stats, tokens
from mtp_viz.views.charts import EXPERTS_PLOT

from . import inspector, profile, tabs, teach, vllm, wiring
from .controls import Dropdown

# One line at 1280 px, so the first tab keeps its charts on screen; the Learn tab and the
# tour say the rest.
INTRO = "the <b>drafter</b> guesses, the <b>target</b> checks its guesses in one pass."


@dataclass(frozen=True)
class AppState:
    """What the page runs on, shared by all its sessions: ``demo.mtp_app``."""
    loader: service.PairLoader      # the process's model pairs
    handlers: Handlers              # the local engine's and the recorded runs' handlers
    vllm: ServerHandlers         # the vLLM source's and the dashboard's

    @property
    def default(self) -> tuple[str, str | None]:
        """The pair selected at start, which :func:`launch` loads in the background."""
        return self.handlers.default


@dataclass(frozen=True)
class FirstPair:
    """The pair the page opens on, and the picker entry showing it."""
    key: str                 # a preset key, or CUSTOM
    target: str
    drafter: str | None
    note: str                # why this pair (shown in the hint)


def launch_kwargs() -> dict[str, Any]:
    """Styling for ``demo.launch`` (Gradio 6 takes css and theme at launch)."""
    return {"css": export.stylesheet(),
            "theme": gr.themes.Soft(primary_hue="emerald", secondary_hue="blue")}


def _first_pair(presets: dict, allow: deploy.AllowList, target: str | None, drafter: str | None) -> FirstPair:
    """``target``/``drafter`` if given, else :func:`deploy.default_pair` (environment,
    cached E2B, bundled tiny pair)."""
    target0, drafter0, note = deploy.default_pair(allow)
    if target:
        target0, drafter0, note = target, drafter, f"Model pair from the command line: {target}."
    key = next((k for k, p in presets.items() if (p["target"], p["drafter"]) == (target0, drafter0)
                or (k == target0.lower() and not drafter0)), CUSTOM)
    return FirstPair(key, target0, drafter0, note)


# ---------------------------------------------------------------- sections, top to bottom

def _prompt_column(first: FirstPair) -> dict[str, Any]:
    """The prompt, Run and its neighbours, the status and the step caption."""
    examples = wiring.examples_for(first.key)
    # its label said what the box and the tour say: the height goes to the panes
    prompt = gr.Textbox(label="Prompt", show_label=False, lines=3, max_lines=3, elem_id="prompt",
                        placeholder="Type a prompt, or pick one of the example prompts beside Run",
                        value=examples[0].text if examples else "")
    with gr.Row(elem_id="buttons"):
        c = dict(
            run_btn=gr.Button("Run", variant="primary", elem_id="run", min_width=70, size="sm"),
            stop_btn=gr.Button("Stop", variant="stop", elem_id="stop", min_width=70, size="sm"),
            measure_btn=gr.Button("Measure", elem_id="measure", min_width=80, size="sm"),
            replay_btn=gr.Button("Race replay", interactive=False, elem_id="replay", min_width=100, size="sm"),
            # labelled inline (see app.css): a bare dropdown beside Race replay said nothing
            example=Dropdown(wiring.prompt_choices(examples), value=None, elem_id="examples",
                                label="Example prompts", container=False, scale=3,
                                min_width=180, info=None, filterable=False),
            step_mode=gr.Checkbox(False, label="Step", elem_id="step-mode", container=False, scale=0,
                                  min_width=70),
            next_btn=gr.Button("Next", elem_id="next", min_width=60, size="sm", scale=0))
    return dict(prompt=prompt, **c, status=gr.HTML("", elem_id="status", padding=False),
                caption=gr.HTML("", elem_id="step-caption", padding=False))


def _model_column(first: FirstPair, choices: list, policy: ServerPolicy, cap: int) -> dict[str, Any]:
    """The model pair (a preset, a custom pair or a vLLM server), its state, and the two
    settings every run changes."""
    custom = first.key == CUSTOM
    with gr.Row():
        # labelled inline like the example prompts (app.css): a first screen that fits its charts
        model = Dropdown(choices, value=first.key, label="Model pair", scale=4, elem_id="model", container=False)
        load_btn = gr.Button("Load", size="sm", elem_id="load", scale=0, min_width=60)
    with gr.Row(visible=custom) as custom_row:
        custom_target = gr.Textbox(first.target if custom else "", label="Custom target",
                                   placeholder="google/gemma-4-E2B-it or /path/to/folder", elem_id="custom-target")
        custom_drafter = gr.Textbox((first.drafter or "") if custom else "", label="Custom drafter",
                                    placeholder="…-assistant (optional)", elem_id="custom-drafter")
    server = vllm.source_row(policy)
    model_status = gr.HTML(tokens.message_html("No model loaded yet."), elem_id="model-status", padding=False)
    with gr.Row():
        max_new_tokens = gr.Slider(1, cap, value=min(DEFAULT_MAX_NEW_TOKENS, cap), step=1, label="Max new tokens",
                                   elem_id="max-new")
        draft_tokens = gr.Slider(1, MAX_DRAFT_TOKENS, value=DEFAULT_DRAFT_TOKENS, step=1, label="Draft tokens",
                                 elem_id="draft-tokens")
    return dict(model=model, load_btn=load_btn, custom_row=custom_row, custom_target=custom_target,
                custom_drafter=custom_drafter, server=server, model_status=model_status,
                max_new_tokens=max_new_tokens, draft_tokens=draft_tokens)


def _pane(title: str, key: str, placeholder: str) -> tuple[gr.HTML, gr.HTML]:
    """A token pane (``#{key}-output``) under its title, with its stats line below."""
    with gr.Column(elem_classes="mv-pane"):
        gr.HTML(f'<div class="mv-pane-title">{title} {explain.explain(key)}</div>', padding=False)
        pane = gr.HTML(tokens.placeholder_html(placeholder), elem_id=f"{key}-output", padding=False)
        line = gr.HTML(stats.stats_html(stats.RunStats()), elem_id=f"{key}-stats", padding=False)
    return pane, line


def _panes(figures: dict, beside: list[charts.Chart]) -> dict[str, Any]:
    """The speedup, then the race: both token panes and the legend, beside the first row
    of charts, stacked (``#live-charts``: the ones drawn while a run streams)."""
    compare = gr.HTML(stats.compare_html(stats.RunStats(), stats.RunStats(), greedy=True),
                      elem_id="compare-panel", padding=False)
    with gr.Row(equal_height=False, elem_id="race"):
        with gr.Column(scale=7, min_width=480):
            with gr.Row(equal_height=False, elem_id="panes"):
                spec, spec_stats = _pane("Speculative · drafter proposes, target verifies", "spec",
                                         "Tokens appear here as they are verified.")
                ar, ar_stats = _pane("Autoregressive · one target forward per token", "ar",
                                     "The baseline takes turns with the speculative run.")
            gr.HTML(tokens.legend_html() + explain.explain("legend", corner=True), elem_id="legend", padding=False)
        with gr.Column(scale=3, min_width=300, elem_id="live-charts"):
            plots = _plots(figures, beside)
    return dict(compare=compare, spec=spec, spec_stats=spec_stats, ar=ar, ar_stats=ar_stats, plots=plots)


def _traces(h: Handlers) -> dict[str, Any]:
    """Example traces, upload, the downloads and the scrubber, on Decode below the panes
    they change (the first screen stays the run's)."""
    with gr.Row(elem_id="trace-row", equal_height=True):
        trace_example = Dropdown(h.traces.example_traces(), value=None, label="Example trace (no model needed)",
                                    elem_id="trace-examples", scale=3, filterable=False)
        trace_upload = gr.File(label="Replay a trace (.jsonl)", file_types=[".jsonl", ".json", ".txt"],
                               type="filepath", elem_id="trace-upload", height=100, scale=3)
        with gr.Column(scale=1, min_width=150):
            downloads = dict(
                trace_download=gr.DownloadButton("Download trace", value=None, interactive=False,
                                                 elem_id="trace-download", size="sm"),
                export_html=gr.DownloadButton("Page (HTML)", value=None, interactive=False,
                                              elem_id="export-html", size="sm"),
                export_csv=gr.DownloadButton("Steps (CSV)", value=None, interactive=False,
                                             elem_id="export-csv", size="sm"))
    scrub = gr.Slider(0, 1, value=0, step=1, interactive=False, elem_id="scrub",
                      label="Scrub: the state after step… (after a run or a replay)")
    return dict(trace_example=trace_example, trace_upload=trace_upload, **downloads, scrub=scrub)


def _engines_info(allow: deploy.AllowList) -> str:
    left_out = [e.label for n, e in ENGINES.items() if n not in allow.engines]
    return ("each engine is a pair of its own; one that compiles does so once per pair, one compile at a "
            "time, its time reported apart, never in a run's timing"
            + (f" (not offered on this deployment: {', '.join(left_out)})" if left_out else ""))


def _settings(first: FirstPair, allow: deploy.AllowList, peers: str = "") -> dict[str, Any]:
    """More settings, collapsed: what a first-time user does not need."""
    with gr.Accordion("More settings", open=False, elem_id="settings"):
        with gr.Row():
            c = dict(
                schedule=Dropdown(list(SCHEDULES), value="constant", label="Draft-length schedule",
                                     elem_id="schedule"),
                drafter_kind=gr.Radio([(d.label, name) for name, d in DRAFTERS.items()], value="mtp",
                                      label="Drafter", elem_id="drafter-kind"),
                chat=gr.Checkbox(first.key not in ("tiny",), label="Chat template", elem_id="chat"),
                baseline=gr.Checkbox(True, label="Then run autoregressive", elem_id="baseline"),
                # on offer once a mixture-of-experts pair is loaded (Handlers.experts_switch)
                experts=gr.Checkbox(False, label="Count experts", elem_id="experts", interactive=False,
                                    info=EXPERTS_WAITING))
        with gr.Row():
            c.update(
                decoding=gr.Radio(["greedy", "sampling"], value="greedy", label="Decoding", elem_id="decoding"),
                temperature=gr.Slider(0.05, 2.0, value=0.8, step=0.05, label="Temperature",
                                      elem_id="temperature"),
                top_p=gr.Slider(0.05, 1.0, value=0.95, step=0.05, label="Top-p", elem_id="top-p"),
                top_k=gr.Number(0, precision=0, label="Top-k (0 = off)", elem_id="top-k"),
                seed=gr.Number(0, precision=0, label="Seed", elem_id="seed"))
        with gr.Row():  # part of which pair is loaded: another precision is another pair
            # a locked-down deployment offers only what it lists (MTP_VIZ_PRECISIONS, MTP_VIZ_COMPILE)
            choices = [("default", "default"), *((p, p) for p in allow.precisions)]
            info = "default: MTP_VIZ_DTYPE, else float32 on a CPU, bfloat16 on a GPU; int8/int4 need torchao"
            info += "" if (best := fastest("cpu")).native_bfloat16 else f". {best.why}"   # and what is fastest
            c.update(
                target_precision=Dropdown(choices, value="default", label="Target precision", info=info,
                                             elem_id="target-precision", filterable=False),
                drafter_precision=Dropdown(choices, value="default", label="Drafter precision",
                                              info="each precision of a pair loads (and is kept) as a pair of its own",
                                              elem_id="drafter-precision", filterable=False),
                # the table of engines (engine.engines.ENGINES), every one listed so a link to one
                # this deployment leaves out is a choice the run refuses in one sentence
                engine=gr.Radio([(e.label, n) for n, e in ENGINES.items()], value=default_engine(),
                                label="Engine", elem_id="engine", interactive=len(allow.engines) > 1,
                                info=_engines_info(allow)))
        with gr.Row():
            c.update(
                repeats=gr.Slider(2, 15, value=5, step=1, label="Measure: repeats of each mode", elem_id="repeats"),
                # what Measure times beside the pair, each against the fastest plain decoder (handlers.beside):
                # another engine of the table offered here, none by default (it follows #engine: wiring)
                measure_beside=gr.Radio(engine_choices(allow.engines, default_engine()), value=NO_ENGINE,
                                        label="Measure beside: another engine", elem_id="measure-beside",
                                        interactive=len(allow.engines) > 1, info="its plain decoding of the same "
                                        "models (one that compiles: compiled before any timing)"
                                        if len(allow.engines) > 1 else "not offered on this deployment"),
                measure_peers=gr.Textbox(peers, label="Measure beside: servers of this model",
                                         placeholder="http://127.0.0.1:8080, http://127.0.0.1:8081",
                                         elem_id="measure-peers",
                                         info="llama.cpp or vLLM servers, comma-separated (MTP_VIZ_PEERS fills it)"),
                speed=Dropdown([("real time", 1.0), ("½× speed", 0.5), ("¼× speed", 0.25), ("⅒× speed", 0.1)],
                                  value=0.25, label="Race replay speed", elem_id="replay-speed"))
    return c


def _plots(figures: dict, row: list[charts.Chart]) -> dict[str, gr.Plot]:
    """The plots of ``row``; the experts chart only once a mixture-of-experts pair is
    loaded (``Handlers.experts_switch``): on a dense pair it cannot apply."""
    return {c.id: gr.Plot(figures[c.id], elem_id=c.id, show_label=False,
                          visible="hidden" if c.id == EXPERTS_PLOT else True) for c in row}


MEASURE_WAITING = ("Press Measure (here, or beside Run on Decode) for the speedup over repeats: both modes "
                   "in turns, the median and range, and a call only when every repeat agrees.")


def _theory() -> gr.HTML:
    gr.Markdown("### Measured vs theory", elem_id="theory-title")
    gr.HTML(explain.explanations(["theory"], "About this panel:"), padding=False)
    return gr.HTML(tokens.placeholder_html("Appears after a run."), elem_id="theory-panel")


def _servers(app: AppState, policy: ServerPolicy) -> None:
    vllm.dashboard_section(app.vllm)
    vllm.traffic_section(TrafficHandlers(policy))


def _page(app: AppState, first: FirstPair, choices: list, policy: ServerPolicy) -> tuple[wiring.Page, list]:
    """The main page's components, tab by tab (the tabs returned, for their script)."""
    h = app.handlers
    gr.HTML(f'<div class="mv-title"><b>mtp-viz</b> · speculative decoding, made visible: '
            f'<span>{INTRO}</span> {explain.header_links()}</div>', elem_id="header", padding=False)
    shown = [tabs.DECODE, tabs.INSIDE, tabs.MEASURE, *([tabs.SERVERS] if policy.offered else []), tabs.LEARN]
    tabs.bar(shown)
    first_row, *rows = charts.rows()  # the first beside the panes, the rest on Inside a step
    with tabs.panel(tabs.DECODE):  # the first screen: a 1280x720 projector, its charts included
        with gr.Row(elem_id="top-row", equal_height=False):
            with gr.Column(scale=6, min_width=440):
                c = _prompt_column(first)
            with gr.Column(scale=4, min_width=360):
                c.update(_model_column(first, choices, policy, h.cap))
        c.update(_panes(h.empty_figures, first_row))
        c["hint"] = gr.HTML(wiring.hint_html(h.presets, first.key, first.note), elem_id="model-hint")
        # the traces and the scrubber beside what they change: the panes, the badge, the status
        c.update(_traces(h))
        c.update(_settings(first, app.loader.allow, h.peers.default), timer=gr.Timer(1.0, active=False))
    with tabs.panel(tabs.INSIDE):
        gr.Markdown("### What happened, step by step", elem_id="charts-title")
        gr.HTML(explain.explanations([ch.id for ch in charts.CHARTS], "About the charts:"), padding=False)
        for row in rows:
            with gr.Row():
                c["plots"].update(_plots(h.empty_figures, row))
        c["anatomy_panel"] = inspector.anatomy_panel()
    with tabs.panel(tabs.MEASURE):
        # Measure's result where its numbers are read (its badge also on Decode, in #compare)
        c["measure_here"] = gr.Button("Measure", variant="primary", elem_id="measure-here", scale=0, min_width=90,
                                      size="sm")   # the same as Decode's #measure, where its numbers are read
        c["measured"] = gr.HTML(tokens.placeholder_html(MEASURE_WAITING), elem_id="measure-result", padding=False)
        c.update(theory=_theory(), what_if=teach.measure_sections())
        c.update(profile.section(h))
    if policy.offered:
        with tabs.panel(tabs.SERVERS):
            _servers(app, policy)
    with tabs.panel(tabs.LEARN):
        teach.learn_section([t.id for t in shown])
    c["inspector_panel"] = inspector.floating()  # floats over whichever tab is open
    return wiring.Page(**c, session=gr.State(None)), shown


def _in_memory(pair: Any, loader: service.PairLoader, presets: dict) -> FirstPair:
    """``pair``, already in memory and warmed, as the page opens on it: ready in the loader
    at once (no load message), under its preset (the bundled pair: its code prompts) or an
    entry named after its models (:func:`deploy.in_memory_key`)."""
    key = deploy.in_memory_key(presets, pair.name, pair.drafter_name)
    loader.put(pairs.PairSpec(presets[key]["target"], presets[key]["drafter"]), pair)
    return FirstPair(key, presets[key]["target"], presets[key]["drafter"], "Already in memory: no second load.")


class App(gr.Blocks):
    """The page; its ``close()`` first stops the model work in progress (:mod:`mtp_viz.app.runtime.work`)."""

    def close(self, verbose: bool = True) -> None:
        work.stop_all()
        super().close(verbose)


def build_demo(loader: service.PairLoader | None = None, target: str | None = None,
               drafter: str | None = None, pair: Any = None) -> gr.Blocks:
    """The whole page. Loads no model; ``demo.mtp_app`` (an :class:`AppState`) holds the
    pair cache and the handlers it uses. The pair selected at start is ``pair`` (one
    already in memory, served as it is), else ``target``/``drafter`` if given, else
    :func:`deploy.default_pair` (environment, cached E2B, bundled tiny pair)."""
    if pair is not None:
        loader = service.PairLoader(loading.preloaded(pair))
    loader = loader or service.PairLoader(loading.load_and_warm)
    presets = deploy.presets(loader.allow)
    first = _first_pair(presets, loader.allow, target, drafter) if pair is None else _in_memory(pair, loader, presets)
    choices = [(p["label"], k) for k, p in presets.items()]
    if not loader.allow.active:
        choices.append(("Custom hub id or folder", CUSTOM))
    policy = ServerPolicy(loader.allow)
    choices += vllm.choices(policy)
    h = Handlers(loader, presets, (first.target, first.drafter), deploy.env_cap(), deploy.env_prompt_cap(),
                 empty_figures=charts.all_figures([]), peers=Peers(policy))
    app = AppState(loader, h, ServerHandlers(h, policy))
    # delete_cache: uploads and downloads leave Gradio's cache after an hour (a Space runs for weeks)
    with App(title="mtp-viz: speculative decoding, made visible", delete_cache=(1800, 3600)) as demo:
        page, shown = _page(app, first, choices, policy)
        tabs.wire(demo, shown)  # before the page script: the tour and in-page links open tabs
        wiring.wire(demo, page, h, app.vllm, tuple(t.id for t in shown))
        gr.api(h.api_generate, api_name="generate", concurrency_id="local", concurrency_limit=deploy.WAITING)
    demo.mtp_app = app  # type: ignore[attr-defined]
    return demo


def _report_load(loader: service.PairLoader, spec: pairs.PairSpec) -> None:
    """One line on stderr once the pair loaded at launch is ready (or failed)."""
    st = loader.wait(spec)
    took = time.monotonic() - st.started
    msg = f"model pair ready in {took:.1f} s" if st.status == service.Load.READY else st.message
    print(f"mtp-viz: {spec.target}{' + ' + spec.drafter if spec.drafter else ''}: {msg}", file=sys.stderr, flush=True)


def launch(demo: gr.Blocks, *, host: str | None = None, port: int | None = None, **kwargs: Any):
    """Start loading the default pair in the background, then serve (Gradio's own
    ``GRADIO_SERVER_NAME``/``GRADIO_SERVER_PORT`` apply when host/port are not given).
    ``MTP_VIZ_CONCURRENCY`` runs at once (default 1, so timings never share the CPU)
    and ``MTP_VIZ_QUEUE_SIZE`` waiting requests at most. Gradio keeps a copy of the
    page's config (~0.15 MB here) for every session, and every plain HTTP API call is a
    session: ``MTP_VIZ_MAX_SESSIONS`` bounds them (least recently used out). A bad
    ``MTP_VIZ_DTYPE``, or too many ``MTP_VIZ_PEERS``, is one sentence before anything serves."""
    deploy.env_dtype()
    app: AppState = demo.mtp_app  # type: ignore[attr-defined]
    app.handlers.peers.check_deployment()
    loader, spec = app.loader, pairs.PairSpec(*app.default)
    if loader.start(spec).busy:  # a pair given in memory is ready: nothing to report
        threading.Thread(target=_report_load, args=(loader, spec), daemon=True).start()
    work.stop_at_exit()
    demo.queue(default_concurrency_limit=deploy.env_int("MTP_VIZ_CONCURRENCY", 1),
               max_size=deploy.env_int("MTP_VIZ_QUEUE_SIZE", 32))
    kwargs.setdefault("max_file_size", Traces.MAX_UPLOAD_BYTES)  # a larger upload is refused as it arrives
    return demo.launch(server_name=host, server_port=port,
                       **{**launch_kwargs(), "state_session_capacity": deploy.env_sessions(), **kwargs})


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
