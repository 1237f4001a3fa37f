"""Traffic: does speculation still pay off when many requests share a vLLM server?

``mtp-viz bench --server URL --baseline-server URL --concurrency 1,2,4,8`` and the app's
Traffic panel run this sweep: at each level N, N closed-loop clients against the speculating
server and then against the baseline (which goes first flips from level to level, so
drift of the machine falls on both alike): each client sends its next request as soon as
its last one ended, until the level's ``requests`` are done. A level's throughput is all
its output tokens over its wall time (first request sent to last response ended).

Per request, from its own stream (:mod:`mtp_viz.sources.vllm.stream`): time to first
token (the prefill's token, step 1's ``t``), time per output token after it ((whole
request − TTFT) ÷ (tokens − 1)), and, on the speculating server, its per-step arrays
(acceptance = accepted ÷ drafted, τ = tokens per verify step after the prefill, bonus
included). Speedup at a level: the speculating server's throughput over the baseline's;
``tpot_ratio``: the baseline's p50 time per output token over the speculating one's
(above 1: each user's stream is faster with speculation).

A sweep is bounded: levels from 1 to ``highest`` (:data:`MAX_CONCURRENCY` unless the
caller asks fewer; the app's Traffic panel does on a locked-down deployment) and at most
``max_requests`` requests per level (:data:`MAX_REQUESTS`), so at most ``highest`` levels
× 2 servers × ``max_requests`` requests in all; a level whose client fails stops taking
new requests.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Sequence

from mtp_viz.engine.events import Done, Error, Event, Step
from mtp_viz.errors import UserError
from mtp_viz.sources import open_server
from mtp_viz.sources.servers import Servers
from mtp_viz.sources.settings import RunSettings

MAX_CONCURRENCY = 16   # the most clients at once a sweep may ask for (the app's limit too)
MAX_REQUESTS = 256     # requests per level at most
ROLE = {"speculative": "speculative", "autoregressive": "baseline"}  # mode -> the row's `server`


def parse_levels(text: str, highest: int = MAX_CONCURRENCY) -> list[int]:
    """``"1,2,4,8"`` -> [1, 2, 4, 8], each from 1 to ``highest`` (so at most ``highest``
    levels); one sentence for anything else."""
    try:
        levels = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or any(not 1 <= n <= highest for n in levels):
        raise UserError(f"Concurrency levels must be whole numbers from 1 to {highest}, "
                        f"separated by commas (like {example_levels(highest)}).")
    return sorted(set(levels))


def example_levels(highest: int) -> str:
    """Powers of two up to 8 and ``highest``: the levels a form starts with."""
    return ",".join(str(n) for n in (1, 2, 4, 8) if n <= highest)


@dataclass
class Request:
    """One finished request of a level."""
    prompt: int
    tokens: int
    seconds: float
    ttft: float
    ids: tuple[int, ...] = ()
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0


@dataclass
class Level:
    concurrency: int
    server: str                     # "speculative" or "baseline"
    wall: float = 0.0
    done: list[Request] = field(default_factory=list)


def pct(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank q-quantile; None when empty."""
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)] if v else None


def _request(events: list[Event], prompt: int) -> Request | None:
    """One finished request's measurements; None for one Stop cut (it ended "stopped", or
    Stop came before its first token): a cut request is not a measurement."""
    errors = [e for e in events if isinstance(e, Error)]
    if errors:
        raise UserError(errors[0].message)
    if not events or (isinstance(events[-1], Done) and events[-1].stop_reason == "stopped"):
        return None
    done = events[-1]
    if not isinstance(done, Done):
        raise UserError("A server's stream ended without its last chunk.")
    steps = [e for e in events if isinstance(e, Step)]
    ttft = steps[0].t if steps else done.seconds
    return Request(prompt, done.new_tokens, done.seconds, ttft, tuple(done.generated_ids),
                   sum(s.draft_tokens for s in steps), sum(s.accepted for s in steps),
                   sum(1 for s in steps if s.step > 1))


def run_level(servers: Servers, mode: str, prompts: Sequence[str], concurrency: int, requests: int,
              settings: Callable[[str, str], RunSettings], stop: threading.Event | None = None) -> Level:
    """``requests`` requests by ``concurrency`` closed-loop clients to one server; request
    i takes prompt i mod len(prompts). Stops taking new requests when ``stop`` is set."""
    source, level = open_server(servers), Level(concurrency, ROLE[mode])
    lock, taken, failed = threading.Lock(), [0], threading.Event()

    def client() -> list[Request]:
        mine = []
        while not (stop is not None and stop.is_set()) and not failed.is_set():
            with lock:
                i = taken[0]
                if i >= requests:
                    return mine
                taken[0] += 1
            p = i % len(prompts)
            try:
                request = _request(list(source.events(settings(prompts[p], mode), stop)), p)
            except BaseException:
                failed.set()   # the other clients send no more: the level has failed
                raise
            if request is None:
                return mine
            mine.append(request)
        return mine

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency, thread_name_prefix="mtp-viz-traffic") as pool:
        futures = [pool.submit(client) for _ in range(concurrency)]
        for f in futures:
            level.done += f.result()   # a client's failure is the level's: its sentence
    level.wall = time.perf_counter() - t0
    return level


@dataclass(frozen=True)
class TrafficRow:
    """One level on one server: a ``traffic`` row of bench.json (:meth:`as_dict`)."""
    concurrency: int
    server: str                       # "speculative" or "baseline"
    requests: int
    tokens_per_second: float | None   # all output tokens ÷ the level's wall time
    ttft_ms_p50: float | None
    ttft_ms_p90: float | None
    tpot_ms_p50: float | None
    tpot_ms_p90: float | None
    acceptance_rate: float | None     # speculative: accepted ÷ drafted
    tau: float | None                 # speculative: tokens per verify step after the prefill
    speedup: float | None = None      # speculative: throughput over the baseline's at this level
    tpot_ratio: float | None = None   # speculative: the baseline's p50 TPOT over its own

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def row(level: Level) -> TrafficRow:
    """One level's row (speedup filled in by :func:`pair_rows`)."""
    r, tokens = level.done, sum(q.tokens for q in level.done)
    tpot = [(q.seconds - q.ttft) / (q.tokens - 1) * 1000 for q in r if q.tokens > 1]
    drafted, accepted = sum(q.drafted for q in r), sum(q.accepted for q in r)
    steps = sum(q.verify_steps for q in r)
    spec = level.server == "speculative"
    return TrafficRow(
        level.concurrency, level.server, len(r), tokens / level.wall if level.wall > 0 else None,
        _ms(pct([q.ttft for q in r], 0.5)), _ms(pct([q.ttft for q in r], 0.9)), pct(tpot, 0.5), pct(tpot, 0.9),
        acceptance_rate=accepted / drafted if spec and drafted else None,
        # τ after the prefill: each verify step's tokens (its kept drafts + the target's one)
        tau=(tokens - len(r)) / steps if spec and steps else None)


def _ms(s: float | None) -> float | None:
    return None if s is None else s * 1000


def pair_rows(rows: Sequence[TrafficRow]) -> list[TrafficRow]:
    """Each speculative row with its level's speedup over the baseline row (throughput)
    and the baseline's p50 time per output token over its own."""
    base = {r.concurrency: r for r in rows if r.server == "baseline"}
    out = []
    for r in rows:
        b = base.get(r.concurrency)
        if r.server == "speculative" and b:
            r = dataclasses.replace(
                r, speedup=r.tokens_per_second / b.tokens_per_second
                if r.tokens_per_second and b.tokens_per_second else None,
                tpot_ratio=b.tpot_ms_p50 / r.tpot_ms_p50 if r.tpot_ms_p50 and b.tpot_ms_p50 else None)
        out.append(r)
    return out


@dataclass(frozen=True)
class TrafficResult:
    """A sweep so far: its rows (speedups paired) and, greedy only, whether each prompt's
    output was the same on the two servers at every level (None when sampling)."""
    rows: tuple[TrafficRow, ...] = ()
    same_tokens: bool | None = None

    @property
    def summary(self) -> list[TrafficRow]:
        """The speculative rows, one per level: what the charts draw."""
        return [r for r in self.rows if r.server == "speculative"]

    def as_dict(self) -> dict[str, Any]:
        """bench.json's ``traffic`` and ``same_tokens``."""
        return {"traffic": [r.as_dict() for r in self.rows], "same_tokens": self.same_tokens}


def sweeping(servers: Servers, prompts: Sequence[str], levels: Sequence[int], requests: int,
             settings: Callable[[str, str], RunSettings], *, greedy: bool,
             stop: threading.Event | None = None, highest: int = MAX_CONCURRENCY,
             max_requests: int = MAX_REQUESTS) -> Iterator[tuple[str, TrafficResult]]:
    """Every level on both servers, as it goes: before each level ``(what runs next, the
    result so far)``, and at the end ``("", the result)``. ``highest`` and ``max_requests``
    bound the levels and the requests per level (never
    past :data:`MAX_CONCURRENCY` and :data:`MAX_REQUESTS`)."""
    highest, max_requests = min(highest, MAX_CONCURRENCY), min(max_requests, MAX_REQUESTS)
    if not 1 <= requests <= max_requests:
        raise UserError(f"Requests per level must be a whole number from 1 to {max_requests}.")
    levels = sorted(set(levels))
    if not levels or any(not 1 <= n <= highest for n in levels):
        raise UserError(f"Concurrency levels must be whole numbers from 1 to {highest}, "
                        f"separated by commas (like {example_levels(highest)}).")
    if servers.baseline is None:
        raise UserError("A traffic sweep compares two servers: give the baseline server's URL too.")
    rows: list[TrafficRow] = []
    outputs: dict[tuple[str, int], set] = {}

    def result() -> TrafficResult:
        same = None
        if greedy and outputs:
            same = all(outputs.get(("speculative", p)) == outputs.get(("autoregressive", p))
                       and len(outputs.get(("speculative", p), ())) == 1 for p in {p for _, p in outputs})
        return TrafficResult(tuple(pair_rows(rows)), same)
    for k, n in enumerate(levels):
        for mode in (("speculative", "autoregressive") if k % 2 == 0 else ("autoregressive", "speculative")):
            if stop is not None and stop.is_set():
                yield "", result()
                return
            yield f"{n} at once on the {ROLE[mode]} server", result()
            level = run_level(servers, mode, prompts, n, requests, settings, stop)
            rows.append(row(level))
            for q in level.done:
                outputs.setdefault((mode, q.prompt), set()).add(q.ids)
    yield "", result()


def sweep(*args, progress: Callable[[str], None] | None = None, **kwargs) -> TrafficResult:
    """:func:`sweeping` to its end; ``progress`` gets each level's line."""
    for line, out in sweeping(*args, **kwargs):
        if line and progress:
            progress(line)
    return out


__all__ = ["MAX_CONCURRENCY", "MAX_REQUESTS", "Level", "Request", "TrafficResult", "TrafficRow", "example_levels",
           "pair_rows", "parse_levels", "row", "run_level", "sweep", "sweeping"]
