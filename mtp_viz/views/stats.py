"""The numbers of a run, as HTML: each pane's stats, the speedup of the two runs
(``#compare``) with its basis, Measure's result, and the greedy identity check.

Pure functions of events, like the rest of :mod:`mtp_viz.views`; no gradio, no torch. ``#compare`` carries
the figure as data attributes (``data-speedup``, ``data-spec-tps``, ``data-ar-tps``,
``data-basis``, ``data-threads``, ``data-clock``, and ``data-engine``: what decoded, as the
start event says (:class:`mtp_viz.engine.events.Ran`: "compiled", "eager", "vllm", ...;
"eager" for a run that does not say), a contract tests and scripts read.
A run's times are on the clock its source names in ``Start.settings["clock"]``: "wall"
or "cpu" (the engine thread's CPU time; :mod:`mtp_viz.sources.interleave`), and the labels
say which.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Iterable

from mtp_viz.engine.events import Accepted, Bonus, Done, Error, Event, Ran, Start, Step, Token, tau_of

from .explain import explain
from .tokens import escape_token


@dataclass
class RunStats:
    mode: str = ""
    tokens: int = 0                # generated tokens (accepted + bonus, or token)
    forwards: int = 0              # target forwards (one per step)
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0           # elapsed, from the last step's timestamp or Done
    clock: str = "wall"            # what the seconds read: "wall" or "cpu" (Start.settings)
    threads: int = 0               # torch's CPU threads during the run (Start.settings; 0: unknown, a server)
    target_precision: str = ""     # what each model ran in (Start.settings; "" where unknown
    drafter_precision: str = ""    # or, for the drafter, no drafter model)
    engine: str = ""               # what decoded, Start's Ran.engine ("" before a Start)
    engine_label: str = ""         # and how it is named ("compiled engine", "vLLM server", ...)
    compile_seconds: float = 0.0   # graphs compiled during the run, not in ``seconds`` (Done)
    done: bool = False
    stop_reason: str = ""
    error: str = ""
    ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tau(self) -> float | None:
        """τ: tokens per target forward after the prefill (:func:`~mtp_viz.engine.events.tau_of`)."""
        return tau_of(self.tokens, self.forwards)

    def add(self, e: Event) -> "RunStats":
        """Fold one more event in (streaming keeps one RunStats instead of recounting)."""
        if isinstance(e, Start):
            self.mode, self.clock = e.mode, str(e.settings.get("clock", "wall"))
            self.threads = int(e.settings.get("threads") or 0)
            self.target_precision = str(e.settings.get("target_precision") or "")
            self.drafter_precision = str(e.settings.get("drafter_precision") or "")
            self.engine, self.engine_label = e.ran.engine, e.ran.label
        elif isinstance(e, (Accepted, Bonus, Token)):
            self.tokens += 1
            self.ids.append(e.token_id)
            self.texts.append(e.text)
            if isinstance(e, Accepted):
                self.accepted += 1
            if isinstance(e, Token):
                self.seconds = max(self.seconds, e.t)
        elif isinstance(e, Step):
            self.forwards += 1
            self.drafted += e.draft_tokens
            self.seconds = max(self.seconds, e.t)
        elif isinstance(e, Done):
            self.done, self.stop_reason, self.seconds = True, e.stop_reason, e.seconds
            self.compile_seconds = float(getattr(e, "compile_seconds", 0.0) or 0.0)
        elif isinstance(e, Error):
            self.error = e.message
        return self


def run_stats(events: Iterable[Event], *, now: float | None = None) -> RunStats:
    """Counts and timings of one run; ``now`` (seconds since its start) overrides the
    elapsed time for a run still in progress (live or replayed)."""
    s = RunStats()
    for e in events:
        s.add(e)
    if now is not None and not s.done:
        s.seconds = now
    return s


def stats_html(stats: RunStats) -> str:
    """The line under a pane: tokens, target forwards, tokens/s, elapsed."""
    items = [(f"{stats.tokens}", "tokens"), (f"{stats.forwards}", "target forwards")]
    if stats.mode == "speculative":
        if stats.tau is not None:
            items.append((f"{stats.tau:.2f}", "τ (tokens / verify)"))
        if stats.drafted:
            items.append((f"{100 * stats.accepted / stats.drafted:.0f}%", "drafts accepted"))
    items += [(f"{stats.tokens_per_second:.1f}", "tokens/s"),
              (f"{stats.seconds:.2f} s", "of engine CPU time" if stats.clock == "cpu" else "elapsed")]
    cells = "".join(f'<span class="mv-stat"><b>{v}</b> {html.escape(k)}</span>' for v, k in items)
    cells += precision_html(stats)
    state = ""
    if stats.error:
        state = '<span class="mv-stat mv-bad">error</span>'
    elif stats.done and stats.stop_reason == "stopped":
        state = '<span class="mv-stat mv-warn">stopped</span>'
    elif stats.done:
        state = '<span class="mv-stat mv-ok">done</span>'
    return f'<div class="mv-stats">{cells}{state}</div>'


def precision_html(stats: RunStats) -> str:
    """What the run's models ran in (``data-target-precision``, ``data-drafter-precision``),
    or nothing for a source that does not say (a server, an older trace)."""
    if not stats.target_precision:
        return ""
    t, d = html.escape(stats.target_precision), html.escape(stats.drafter_precision)
    words = f"target <b>{t}</b>" + (f" · drafter <b>{d}</b>" if d else "")
    return (f'<span class="mv-stat mv-precision" data-target-precision="{t}" data-drafter-precision="{d}">'
            f'{words}</span>')


def engine_label(words: str, compile_seconds: float = 0.0) -> str:
    """The small label saying what decoded (``mv-engine``), with the graphs compiled during
    the runs, kept out of their timings; "" when no run says."""
    if not words:
        return ""
    extra = (f' · <small>compile {compile_seconds:.1f} s, not in the timings</small>'
             if compile_seconds > 0 else "")
    return f'<span class="mv-badge mv-neutral mv-engine">{html.escape(words)}{extra}</span>'


def engine_both(spec: RunStats, ar: RunStats) -> tuple[str, str]:
    """The engine of the runs shown and its name: one, "mixed" when two runs differ, "" for none."""
    engines = {(s.engine, s.engine_label) for s in (spec, ar) if s.engine}
    return engines.pop() if len(engines) == 1 else (("mixed", "mixed engines") if engines else ("", ""))


def _compare_div(speedup: float | None, spec_tps: float, ar_tps: float, basis: str, threads: int,
                 body: str, clock: str = "wall", engine: tuple[str, str] = ("", ""),
                 compile_seconds: float = 0.0) -> str:
    """``#compare``: the figure's hooks as data attributes, the badges inside, then the engine."""
    attrs = ""
    if speedup is not None:
        attrs = (f' data-speedup="{speedup:.4f}" data-spec-tps="{spec_tps:.3f}" data-ar-tps="{ar_tps:.3f}"'
                 f' data-basis="{html.escape(basis)}" data-threads="{threads}"'
                 f' data-clock="{html.escape(clock)}"')
    if engine[0]:
        attrs += f' data-engine="{html.escape(engine[0])}"'
    body += engine_label(engine[1], compile_seconds) if body or speedup is not None else ""
    # before the runs end, the badges' place says what will come there (not a lone ⓘ)
    body = body or f'<span class="mv-empty">{WAITING}</span>'
    return f'<div id="compare" class="mv-compare"{attrs}>{body}</div>' + explain("compare", corner=True)


WAITING = "The speedup, and whether both texts match, appear here once a run and its baseline have ended."
CPU_NOTE = (". Timed on the engine thread's CPU clock: with one torch thread that is all of a "
            "run's work, and time spent waiting for a core or for the server is left out")


def _threads(threads: int) -> str:
    return f", {threads} torch thread{'s' if threads != 1 else ''}" if threads else ""


def measured_over(spec_tps: float, ar_tps: float, clock: str, threads: int, how: str) -> str:
    """What a local speedup was measured over, worded once for every surface (Run,
    Measure, a notebook): both rates, their clock, how many runs, torch's threads."""
    of = " of engine CPU time" if clock == "cpu" else " of wall time" if clock == "wall" else ""
    return f"{spec_tps:.1f} vs {ar_tps:.1f} tokens/s{of} · {how}{_threads(threads)}"


def compare_html(spec: RunStats, ar: RunStats, *, greedy: bool, faster: Iterable = ()) -> str:
    """The speedup of one run of each mode and, under greedy decoding, whether both
    outputs are token-identical. One run each cannot name a winner: the figure says
    what it is and points to Measure. ``faster``: plain decoders of the same model a
    Measure timed in this session (:class:`mtp_viz.measure.compare.DecoderRow`); the fastest
    that beats this run's plain decoding is named in one sentence (:func:`faster_plain_html`)."""
    engine, compiling = engine_both(spec, ar), spec.compile_seconds + ar.compile_seconds
    threads = spec.threads   # as the run recorded them: what torch had, not what was asked
    if not (spec.done and ar.done) or not spec.tokens or not ar.tokens \
            or not (spec.tokens_per_second and ar.tokens_per_second):
        return _compare_div(None, 0, 0, "", threads, identity_badge(spec, ar) if greedy and spec.done
                            and ar.done and spec.tokens and ar.tokens else "", engine=engine,
                            compile_seconds=compiling)
    x = spec.tokens_per_second / ar.tokens_per_second
    clock = spec.clock if spec.clock == ar.clock else "mixed"
    parts = [f'<span class="mv-badge mv-speedup" title="Measure repeats both modes and names a winner '
             f'only when every repeat agrees{CPU_NOTE if clock == "cpu" else ""}">'
             + ran_at(x, _over(spec, ar), bold=True) + '<small>('
             f'{measured_over(spec.tokens_per_second, ar.tokens_per_second, clock, threads, "one run each, in turns")})'
             f'</small></span>']
    best = faster_plain(faster, ar.engine, ar.tokens_per_second)
    if best is not None:
        parts.append(faster_plain_html(best, "measured in Measure"))
    if greedy:
        parts.append(identity_badge(spec, ar))
    return _compare_div(x, spec.tokens_per_second, ar.tokens_per_second, "single run", threads,
                        "".join(parts), clock, engine, compiling)


def ran_at(x: float, over: str, bold: bool = False) -> str:
    """The one wording of a speedup on every surface (Run's badge, Measure's, a notebook's
    line, the terminal): "speculative ran at ×1.79 the speed of …", never "×1.79 faster"
    (which many read as ×2.79). ``over``: what it is over, as :func:`_over` words it;
    ``bold``: the figure in ``<b>`` (HTML: ``over`` must be escaped already)."""
    figure = f"<b>×{x:.2f}</b>" if bold else f"×{x:.2f}"
    return f"speculative ran at {figure} the speed {over}"


CALLS = {"faster": "faster in every repeat", "slower": "slower in every repeat",
         "too close to call": "too close to call: the repeats fall either side of ×1"}


def measurement_sentence(m, engine_label: str, bold: bool = False) -> str:
    """Measure's result in words: :func:`ran_at` over the engine's own plain decoding, the
    median and range of the repeats, and the call (:func:`mtp_viz.measure.reduce.verdict`).
    Plain text, or HTML with ``bold`` (``engine_label`` then escaped by the caller)."""
    lo, hi = min(m.ratios), max(m.ratios)
    return (ran_at(m.median, f"of the {engine_label}'s own plain decoding ", bold)
            + f"(median of {m.repeats} repeats, range ×{lo:.2f}–×{hi:.2f}): {CALLS.get(m.verdict, m.verdict)}")


def compare_text(spec: RunStats, ar: RunStats) -> str:
    """:func:`compare_html`'s speedup as one line of text (a terminal, a notebook's
    print): the same figure, worded the same way; "" until both runs have tokens."""
    if not (spec.tokens_per_second and ar.tokens_per_second):
        return ""
    clock = spec.clock if spec.clock == ar.clock else "mixed"
    over = html.unescape(_over(spec, ar))
    measured = measured_over(spec.tokens_per_second, ar.tokens_per_second, clock, spec.threads,
                             "one run each, in turns")
    return ran_at(spec.tokens_per_second / ar.tokens_per_second, over) + f"({measured})"


def _over(spec: RunStats, ar: RunStats) -> str:
    """What the speedup is over: the plain decoding of the same engine (or server), named."""
    if spec.engine_label and spec.engine_label == ar.engine_label:
        return f"of the {html.escape(spec.engine_label)}'s own plain decoding "
    return f"of the plain decoding of the {html.escape(ar.engine_label)} " if ar.engine_label else ""


def faster_plain(decoders: Iterable, engine: str, plain_tps: float):
    """The fastest plain decoder of ``decoders`` (:class:`mtp_viz.measure.compare.DecoderRow`)
    other than ``engine`` and faster than its plain decoding's ``plain_tps``; None if none is.
    One that wrote other tokens than the pair's plain decoding is never named."""
    fast = [d for d in decoders if d.setting == "plain" and d.engine != engine
            and d.same_tokens_as_plain is not False and (d.tokens_per_second or 0) > plain_tps > 0]
    return max(fast, key=lambda d: d.tokens_per_second, default=None)


def faster_plain_html(d, where: str) -> str:
    """The one sentence naming a faster plain decoder of the same model and its rate
    (``#fastest-plain``, with ``data-fastest-plain``: its name, ``data-fastest-plain-tps``
    and ``data-fastest-plain-engine``); ``where``: where it was measured."""
    name, engine = html.escape(d.name), html.escape(d.engine)
    clock = " of engine CPU time" if d.clock == "cpu" else " of wall time" if d.clock == "wall" else ""
    return (f'<span id="fastest-plain" class="mv-badge mv-neutral mv-fastest-plain" data-fastest-plain="{name}" '
            f'data-fastest-plain-tps="{d.tokens_per_second:.3f}" data-fastest-plain-engine="{engine}">'
            f'{name} decodes this pair plain at <b>{d.tokens_per_second:.0f}</b> tokens/s{clock} here '
            f'({html.escape(where)})</span>')


def measurement_html(m, engine: Ran = Ran()) -> str:
    """Measure's result (:class:`mtp_viz.measure.compare.Measurement`): the median of the
    repeats, their range, and a winner only when every repeat agrees; ``engine``: what
    decoded them. With decoders timed beside it: the faster plain one's sentence and a
    table of every decoder against the fastest plain one (:func:`decoders_html`)."""
    cls = {"faster": "mv-ok", "slower": "mv-warn"}.get(m.verdict, "mv-neutral")
    head = measurement_sentence(m, html.escape(engine.label, quote=False), bold=True)
    body = (f'<span class="mv-badge {cls} mv-speedup">{head}<small> · '
            f'{measured_over(m.spec_tps, m.ar_tps, m.clock, m.threads, f"medians of {m.repeats} repeats, alternating")}'
            f'</small></span>')
    best = faster_plain(m.beside, engine.engine, m.ar_tps)
    if best is not None:
        body += faster_plain_html(best, f"medians of the same {m.repeats} repeats")
    body += decoders_html(m, engine)
    return _compare_div(m.median, m.spec_tps, m.ar_tps, f"median of {m.repeats}", m.threads, body,
                        m.clock, engine=(engine.engine, engine.label))


def measure_result_html(m, engine: Ran = Ran()) -> str:
    """Measure's result as the Measure tab shows it (``#measure-result``): its sentence and
    basis, carrying ``data-speedup`` and ``data-basis`` like ``#compare``, and no element id
    of its own (the badge on Decode holds ``#compare`` and its tables)."""
    head = measurement_sentence(m, html.escape(engine.label, quote=False), bold=True)
    over = measured_over(m.spec_tps, m.ar_tps, m.clock, m.threads, f"medians of {m.repeats} repeats, alternating")
    return (f'<div class="mv-measure-result" data-speedup="{m.median:.4f}" data-basis="median of {m.repeats}">'
            f'<h3>Measured</h3><p>{head}.</p><p><small>{over}</small></p></div>')


def decoders_html(m, engine: Ran = Ran()) -> str:
    """Every decoder a Measure timed, against the fastest plain one, as the bench's table
    "Against the fastest plain decoder measured here" (``#measure-decoders``; each row
    ``data-decoder``, ``data-setting``, ``data-tps``, ``data-over-fastest``, and
    ``data-fastest`` on the fastest plain one); "" when only the pair's two modes ran."""
    if not m.beside:
        return ""
    best = (m.fastest_plain or {}).get("decoder")
    own = f"this {engine.label}"
    rows = [(own, engine.engine, "mtp", m.spec_tps, m.clock, None, False, ""),
            (own, engine.engine, "plain", m.ar_tps, m.clock, None, best == m.engine, "")]
    rows += [(d.name, d.engine, d.setting, d.tokens_per_second, d.clock, d.same_tokens_as_plain,
              d.setting == "plain" and best == d.name, d.failed) for d in m.beside]
    cells = []
    for name, eng, setting, tps, clock, same, fastest, failed in rows:
        over = m.over_fastest_plain(tps)
        same_text = "failed" if failed else "–" if same is None else "yes" if same else "no"
        note = f' data-failed="{html.escape(failed)}" title="{html.escape(failed)}"' if failed else ""
        cells.append(f'<tr data-decoder="{html.escape(name)}" data-engine="{html.escape(eng)}" '
                     f'data-setting="{html.escape(setting)}" data-tps="{(tps or 0):.3f}" '
                     f'data-over-fastest="{(over or 0):.4f}"{" data-fastest" if fastest else ""}{note}>'
                     f'<td>{html.escape(name)}</td><td>{html.escape(setting)}</td>'
                     f'<td>{"–" if tps is None else f"{tps:.1f}"}</td><td>{html.escape(clock)}</td>'
                     f'<td>{"–" if over is None else f"×{over:.2f}"}</td><td>{same_text}</td></tr>')
    head = "".join(f"<th>{h}</th>" for h in ("decoder", "setting", "tokens/s", "clock", "vs fastest plain",
                                              "same tokens as plain"))
    return (f'<details id="measure-decoders" class="mv-decoders"><summary>Every decoder measured '
            f'({len(rows)} rows), against the fastest plain one</summary><table><tr>{head}</tr>{"".join(cells)}'
            f'</table><small>medians of {m.repeats} repeats in one rotation; a local engine on its thread\'s CPU '
            'clock (cpu), a server on wall time through HTTP (wall)</small></details>')


def identity_badge(spec: RunStats, ar: RunStats) -> str:
    n = min(len(spec.ids), len(ar.ids))
    first = next((i for i in range(n) if spec.ids[i] != ar.ids[i]), None)
    if first is None and len(spec.ids) == len(ar.ids):
        return f'<span class="mv-badge mv-ok">✓ token-identical ({n} tokens)</span>'
    if first is None:
        return (f'<span class="mv-badge mv-warn">identical for the first {n} tokens; '
                f'lengths differ ({len(spec.ids)} vs {len(ar.ids)})</span>')
    a, _ = escape_token(spec.texts[first], spec.ids[first])
    b, _ = escape_token(ar.texts[first], ar.ids[first])
    low = spec.target_precision if spec.target_precision in ("bfloat16", "float16") else ""
    why = (f"in {low}, verifying several tokens in one forward rounds differently from one token at a time, "
           "and a near-tie can flip a greedy choice" if low else "numerical ties can flip a greedy choice")
    return (f'<span class="mv-badge mv-bad">✗ outputs first differ at token {first + 1}: '
            f'<code>{a}</code> vs <code>{b}</code> ({why})</span>')
