"""The main page's events: which handler each control calls, with which inputs and
outputs. :mod:`.layout` draws the components and hands them over as a :class:`Page`;
the sections with events of their own (:mod:`.teach`, :mod:`.inspector`, the
:mod:`.vllm` dashboard) wire themselves, called from here or from the layout.

:class:`Page` is defined here, not in the layout, because the layout calls :func:`wire`:
the wiring must not import the layout back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from mtp_viz.app.handlers import beside, links
from mtp_viz.app.handlers.local import CUSTOM, OUTPUTS, Handlers
from mtp_viz.app.handlers.servers import HINT, ServerHandlers, capabilities
from mtp_viz.app.runtime import deploy
from mtp_viz.prompts import Prompt, category_suite, code_suite, load_prompts
from mtp_viz.views import charts, tokens

from . import inspector, teach, vllm

PROFILE_REMOTE = ("Profile times this app's own engine forward by forward; a server's are not ours to time "
                  "one by one: pick a local pair of the same model, or press Measure for the server's speedup.")
HIDDEN = dict(api_visibility="private")  # the page's own events; /generate is the one public API

# The run form's fields: each is a Page attribute and the name its value goes by in
# Handlers.settings and in links (the vLLM source's two URL fields are added in Page.form).
FORM = ("prompt", "model", "custom_target", "custom_drafter", "max_new_tokens", "draft_tokens", "schedule",
        "drafter_kind", "decoding", "temperature", "top_p", "top_k", "seed", "chat", "baseline", "experts",
        "step_mode", "target_precision", "drafter_precision", "engine")


@dataclass(frozen=True, eq=False)
class Page:
    """The components the events connect, by role (``eq=False``: compared, and hashed,
    as the one page they are)."""
    # the prompt and its buttons
    prompt: gr.Textbox
    run_btn: gr.Button
    stop_btn: gr.Button
    measure_btn: gr.Button
    measure_here: gr.Button     # the Measure tab's own Measure button: the same event as measure_btn
    replay_btn: gr.Button
    example: gr.Dropdown
    step_mode: gr.Checkbox
    next_btn: gr.Button
    status: gr.HTML
    caption: gr.HTML
    # the model pair
    model: gr.Dropdown
    load_btn: gr.Button
    custom_row: gr.Row
    custom_target: gr.Textbox
    custom_drafter: gr.Textbox
    server: vllm.SourceControls
    model_status: gr.HTML
    hint: gr.HTML
    timer: gr.Timer          # ticks while a pair loads
    # the run's settings
    max_new_tokens: gr.Slider
    draft_tokens: gr.Slider
    schedule: gr.Dropdown
    drafter_kind: gr.Radio
    chat: gr.Checkbox
    baseline: gr.Checkbox
    experts: gr.Checkbox     # count experts: a mixture-of-experts target only
    decoding: gr.Radio
    temperature: gr.Slider
    top_p: gr.Slider
    top_k: gr.Number
    seed: gr.Number
    target_precision: gr.Dropdown   # with the picker, which pair is loaded
    drafter_precision: gr.Dropdown
    engine: gr.Radio                # the engine (engine.engines.ENGINES): another pair too, the page's one control
    repeats: gr.Slider
    measure_beside: gr.Radio        # another engine Measure times beside the pair (or none)
    measure_peers: gr.Textbox
    speed: gr.Dropdown
    # what a run shows
    compare: gr.HTML
    spec: gr.HTML
    spec_stats: gr.HTML
    ar: gr.HTML
    ar_stats: gr.HTML
    plots: dict[str, gr.Plot]  # by chart id (charts.CHARTS)
    theory: gr.HTML
    measured: gr.HTML
    what_if: gr.HTML
    # the cost profile, on the Measure tab (handlers.profile)
    profile_btn: gr.Button
    profile_stop: gr.Button
    profile_status: gr.HTML
    profile_result: gr.HTML
    profile_plot: gr.Plot
    inspector_panel: gr.HTML
    anatomy_panel: gr.HTML
    # recorded runs
    trace_example: gr.Dropdown
    trace_upload: gr.File
    trace_download: gr.DownloadButton
    export_html: gr.DownloadButton
    export_csv: gr.DownloadButton
    scrub: gr.Slider
    session: gr.State

    def form(self) -> dict[Any, str]:
        """The run's inputs: component -> the name of its value."""
        return {**{getattr(self, name): name for name in FORM},
                self.server.url: "vllm_url", self.server.baseline: "vllm_baseline_url"}

    def pair(self) -> list[Any]:
        """What names the pair to load: the picker, the custom fields, the precisions, then
        the engine (``#engine``)."""
        return [self.model, self.custom_target, self.custom_drafter, self.target_precision,
                self.drafter_precision, self.engine]

    def outputs(self) -> list[Any]:
        """What a frame fills, in :data:`OUTPUTS` order, then the session and Race replay."""
        slots = {"status": self.status, "caption": self.caption, "spec": self.spec, "spec_stats": self.spec_stats,
                 "ar": self.ar, "ar_stats": self.ar_stats, "compare": self.compare, "theory": self.theory,
                 "measured": self.measured,
                 "model_status": self.model_status, **self.plots}
        return [slots[s] for s in OUTPUTS] + [self.session, self.replay_btn]


# ---------------------------------------------------------------- what the picker shows

def examples_for(key: str) -> list[Prompt]:
    """Prompts that suit the pair: held-out code for the bundled code model, the
    category suite (code, JSON, chat, …) for instruction models."""
    return load_prompts(code_suite(), default_category="code") if key == "tiny" else load_prompts(category_suite())


def prompt_choices(prompts: list[Prompt]) -> list[tuple[str, str]]:
    return [(p.label, p.text) for p in prompts]


def hint_html(presets: dict, key: str, note: str = "") -> str:
    hint = presets.get(key, {}).get(
        "hint", "A hub id or a local folder; Gemma 4 targets find their -assistant drafter.")
    return tokens.message_html(hint + (f" {note}" if note else ""))


# ---------------------------------------------------------------- events

def beside_follows(offered: tuple[str, ...], engine: str, picked: str) -> dict:
    """``#measure-beside`` once ``#engine`` is ``engine``: the engines of ``offered`` (the deployment's)
    but the run's own, and ``picked`` kept unless it is the run's engine now (then none)."""
    choices = beside.engine_choices(offered, engine)
    return gr.update(choices=choices, value=picked if picked in {v for _, v in choices} else choices[0][1])


def wire_beside(page: Page, offered: tuple[str, ...]) -> None:
    """``#measure-beside`` follows ``#engine`` (:func:`beside_follows`)."""
    page.engine.change(lambda engine, picked: beside_follows(offered, engine, picked),
                       [page.engine, page.measure_beside], page.measure_beside, queue=False, **HIDDEN)


def wire(demo: gr.Blocks, page: Page, h: Handlers, vh: ServerHandlers, tabs: tuple[str, ...] = ()) -> None:
    """Every event of the main page (``tabs``: the page's tab ids, which a link may name)."""
    loads = _wire_model(demo, page, h, vh, tabs)
    started = _wire_runs(page, h, vh)
    for ev in started.values():  # download and scrub what the panes show
        ev.then(h.traces.download_files, page.session, [page.trace_download, page.export_html, page.export_csv],
                queue=False, **HIDDEN).then(
            h.traces.scrub_range, page.session, page.scrub, queue=False, **HIDDEN).then(
            teach.what_if_update, page.session, page.what_if, queue=False, **HIDDEN)
    # a run may have loaded its pair: the model status then says what it runs in
    started["run"].then(h.gate.status_line, page.pair(), page.model_status, queue=False, show_progress="hidden",
                        **HIDDEN)
    inspector.attach(h, page.session, page.inspector_panel, page.anatomy_panel, page.pair(), loads,
                     [started["run"]])
    # Count experts and its chart follow the pair once it is loaded (a dense pair: neither)
    for ev in [*loads, started["run"]]:
        ev.then(h.experts_switch, page.pair(), [page.experts, page.plots[charts.EXPERTS_PLOT]], queue=False,
                show_progress="hidden", **HIDDEN)
    # a new run, a measurement, a race replay or a trace: the old token's inspector goes
    gr.on([page.run_btn.click, page.measure_btn.click, page.measure_here.click, page.replay_btn.click,
           page.trace_upload.upload,
           page.trace_example.change], lambda: "", None, page.inspector_panel, queue=False, **HIDDEN)
    # input, not change: the range set after a run must not re-render the panes
    page.scrub.input(h.traces.scrub, [page.session, page.scrub], page.outputs(), trigger_mode="always_last",
                     show_progress="hidden", concurrency_limit=8, **HIDDEN)
    page.stop_btn.click(h.stop, page.session, None, queue=False, **HIDDEN,
                        cancels=[started["replay"], started["upload"], started["example"]])
    # queue=False: both must reach a run that holds the model's queue slot
    page.step_mode.change(h.step_mode, [page.session, page.step_mode], None, queue=False, **HIDDEN)
    page.next_btn.click(h.next_step, page.session, page.status, queue=False, **HIDDEN)


def _wire_model(demo: gr.Blocks, page: Page, h: Handlers, vh: ServerHandlers, tabs: tuple[str, ...]) -> list:
    """The picker, Load, the deep link (which sets the controls and says where the pair it
    names stands, never loading or compiling it: the visitor presses Load or Run) and the
    loading timer. Returns the events that report a pair's loading, for what follows them."""
    def on_model(key: str):
        prompts, server = examples_for(key), capabilities(key).remote  # a server's chat template is unknown
        return (gr.update(visible=key == CUSTOM),
                tokens.message_html(HINT) if server else hint_html(h.presets, key),
                gr.update(choices=prompt_choices(prompts), value=None),
                gr.skip() if server else gr.update(value=key != "tiny"), gr.update(visible=server))

    page.model.change(on_model, page.model, [page.custom_row, page.hint, page.example, page.chat,
                                             page.server.row], queue=False, **HIDDEN)
    # the picked pair's line when the visitor picks: not when a failed load puts the picker
    # back (its sentence says why), nor on a link's restore (its tick below says where it stands)
    page.model.input(vh.picked, page.model, page.model_status, queue=False, **HIDDEN)
    pair = page.pair()
    shown = [page.model_status, page.timer, page.chat, page.model]
    pressed = page.load_btn.click(vh.load, pair[:3] + [page.server.url, page.server.baseline] + pair[3:], shown,
                                  **HIDDEN)
    # another precision, or the other engine, is another pair: its line (loaded, loading,
    # or loads on first run)
    gr.on([page.target_precision.change, page.drafter_precision.change, page.engine.change], h.gate.tick, pair,
          shown, queue=False,
          show_progress="hidden", **HIDDEN)
    wire_beside(page, h.loader.allow.engines)
    limits = links.Limits(tuple(h.presets), h.cap, 16 * h.prompt_cap, tabs=tabs)
    restored = teach.wire(demo, page.form(), page.status, limits)  # deep link, Copy link, tour, presenter mode
    # Three triggers, but not one gr.on: the link's status line must follow its restore (a
    # .then is no trigger gr.on takes); the link and the timer only report, never load.
    loads = [pressed, restored.then(h.gate.tick, pair, shown, **HIDDEN),
             page.timer.tick(h.gate.poll, pair, shown, show_progress="hidden", **HIDDEN)]
    page.example.change(lambda p: p or gr.skip(), page.example, page.prompt, queue=False, **HIDDEN)
    return loads


def _wire_runs(page: Page, h: Handlers, vh: ServerHandlers) -> dict[str, Any]:
    """Run and Measure (on the picked source), Race replay and the two ways to replay a
    trace. Returns the events that fill the panes, by name.

    Run is routed before any queue: a local run waits for its pair (loading or
    compiling, holding nothing), then for its turn on the engine (``Handlers.engine``,
    shared with Measure and ``/generate``: ``MTP_VIZ_CONCURRENCY`` at once, in order of
    arrival, with its place shown); a run on a vLLM server waits for a slot of its own
    (``MTP_VIZ_VLLM_CONCURRENCY``), so a slow or silent server never holds the local engine.
    The route bumps a counter of the picked source
    on the page, and that counter's change starts the run (a hidden Number, not a State:
    a State's change does not fire on an unqueued event's output)."""
    form, outputs = page.form(), page.outputs()
    local_go, remote_go = (gr.Number(0, visible="hidden", elem_classes="mv-route") for _ in range(2))

    def values(data: dict) -> dict[str, Any]:
        return {name: data[c] for c, name in form.items()}

    def route(key: str, local: int, remote: int):
        return (gr.skip(), remote + 1) if capabilities(key).remote else (local + 1, gr.skip())

    def run(data: dict):
        yield from h.run(values(data), data[page.session])

    def run_remote(data: dict):
        yield from vh.run(values(data), data[page.session])

    def measure(data: dict):
        v = values(data)
        if capabilities(v["model"]).repeatable:
            yield from h.measuring.measure(v, data[page.repeats], data[page.session], data[page.measure_beside],
                                           data[page.measure_peers])
        else:  # says how to measure a server
            yield from vh.measure(v, data[page.repeats], data[page.session])

    shown = dict(show_progress="minimal", show_progress_on=page.status, **HIDDEN)
    model_slot = dict(concurrency_id="local", concurrency_limit=deploy.WAITING, **shown)
    page.run_btn.click(route, [page.model, local_go, remote_go], [local_go, remote_go], queue=False, **HIDDEN)
    run_ev = local_go.change(run, set(form) | {page.session}, outputs, **model_slot)
    remote_ev = remote_go.change(run_remote, set(form) | {page.session}, outputs, concurrency_id="vllm",
                                 concurrency_limit=deploy.env_int("MTP_VIZ_VLLM_CONCURRENCY", 4), **shown)
    gr.on([page.measure_btn.click, page.measure_here.click], measure,
          set(form) | {page.session, page.repeats, page.measure_beside, page.measure_peers}, outputs, **model_slot)

    def profile(data: dict):
        v = values(data)
        if capabilities(v["model"]).remote:   # a server's forwards are not ours to time one by one
            yield tokens.message_html(PROFILE_REMOTE, level="warn"), gr.skip(), gr.skip(), gr.skip()
            return
        yield from h.profiling.profile(v, data[page.session])
    page.profile_btn.click(profile, set(form) | {page.session},
                           [page.profile_status, page.profile_result, page.profile_plot, page.session], **model_slot)
    page.profile_stop.click(h.stop, page.session, None, queue=False, **HIDDEN)
    recorded = dict(concurrency_limit=8, show_progress="hidden", **HIDDEN)  # no model: many at once
    trace = [page.session, page.speed]
    replay_ev = page.replay_btn.click(h.traces.replay, trace, outputs, **recorded)
    upload_ev = page.trace_upload.upload(h.traces.replay_trace, [page.trace_upload, *trace], outputs, **recorded)
    example_ev = page.trace_example.change(h.traces.replay_example, [page.trace_example, *trace], outputs, **recorded)
    return {"run": run_ev, "remote": remote_ev, "upload": upload_ev, "example": example_ev, "replay": replay_ev}


__all__ = ["FORM", "HIDDEN", "Page", "beside_follows", "examples_for", "hint_html", "prompt_choices", "wire"]
