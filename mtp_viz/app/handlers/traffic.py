"""The Traffic panel's handlers: a concurrency sweep against two vLLM servers (the one
that speculates and a baseline), level by level, with progress and Stop; the sweep
itself is :mod:`mtp_viz.measure.traffic`, as ``mtp-viz bench --concurrency`` runs it, and
its charts :mod:`mtp_viz.views.traffic`.
No torch here. Both URLs go through the deployment's :class:`ServerPolicy` first.

A sweep is bounded by :func:`limits`: the highest concurrency level (so the most levels)
and the most requests per level, from ``MTP_VIZ_TRAFFIC_LEVELS`` and
``MTP_VIZ_TRAFFIC_REQUESTS``; unset, 4 and 8 on a locked-down deployment
(``MTP_VIZ_ALLOWED_MODELS`` set), else the sweep's own maxima (16 and 256), and never more
than those. A server's failure is told by its role ("the baseline server …"), never with
its address, an HTTP status or a path (:func:`mtp_viz.sources.servers.by_role`)."""
from __future__ import annotations

import threading
from typing import Any

from mtp_viz.app.runtime import deploy
from mtp_viz.app.runtime.guard import ServerPolicy
from mtp_viz.engine.decoding import Sampling
from mtp_viz.errors import UserError
from mtp_viz.measure import traffic
from mtp_viz.measure.traffic import TrafficResult, TrafficRow
from mtp_viz.prompts import code_suite, load_prompts
from mtp_viz.sources.servers import Servers, by_role
from mtp_viz.sources.settings import RunSettings
from mtp_viz.sources.vllm.client import ServerError
from mtp_viz.views import tokens
from mtp_viz.views.traffic import figures

MAX_TOKENS = 256   # new tokens per request at most, in the panel
LOCKED_LEVELS = 4    # locked down: the highest level (MTP_VIZ_TRAFFIC_LEVELS), so at most 4 levels
LOCKED_REQUESTS = 8  # locked down: requests per level at most (MTP_VIZ_TRAFFIC_REQUESTS)


def limits(policy: ServerPolicy) -> tuple[int, int]:
    """``(highest level, most requests per level)`` for this deployment's sweeps:
    ``MTP_VIZ_TRAFFIC_LEVELS`` and ``MTP_VIZ_TRAFFIC_REQUESTS`` when set (whole numbers,
    at least 1), else :data:`LOCKED_LEVELS` and :data:`LOCKED_REQUESTS` when locked down
    and the sweep's maxima when not; never past those maxima. One click sends at most
    highest × 2 servers × requests requests."""
    highest = deploy.env_int("MTP_VIZ_TRAFFIC_LEVELS",
                              LOCKED_LEVELS if policy.locked else traffic.MAX_CONCURRENCY)
    most = deploy.env_int("MTP_VIZ_TRAFFIC_REQUESTS",
                           LOCKED_REQUESTS if policy.locked else traffic.MAX_REQUESTS)
    return min(highest, traffic.MAX_CONCURRENCY), min(most, traffic.MAX_REQUESTS)


class Sweep:
    """One visitor's sweep in progress: Stop sets ``stop``."""

    def __init__(self):
        self.stop = threading.Event()


def _whole(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) \
            or not low <= value <= high:
        raise UserError(f"{name} must be a whole number from {low} to {high}.")
    return int(value)


class TrafficHandlers:
    def __init__(self, policy: ServerPolicy):
        self.policy = policy
        self.highest, self.max_requests = limits(policy)

    def figures(self, rows: tuple[TrafficRow, ...] | list[TrafficRow]) -> list:
        return figures(rows)

    def sweep(self, url: str, baseline: str, levels: str, requests: Any, max_tokens: Any, sweep: Sweep | None):
        """Yields ``(status, speedup, throughput, acceptance, table)`` as each level starts
        and once at the end; a bad value or an unreachable server is one sentence."""
        sweep = sweep or Sweep()
        sweep.stop.clear()
        empty = self.figures(())
        try:
            servers = Servers(self.policy.check(url), self.policy.check(baseline))
            levels_ = traffic.parse_levels(levels, self.highest)
            requests_ = _whole(requests, "Requests per level", 1, self.max_requests)
            n = _whole(max_tokens, "New tokens per request", 1, MAX_TOKENS)
        except UserError as e:
            yield (tokens.message_html(str(e), level="error"), *empty, "")
            return
        prompts = [p.text for p in load_prompts(code_suite())]

        def settings(prompt: str, mode: str) -> RunSettings:
            return RunSettings(prompt, modes=(mode,), max_new_tokens=n, chat=False, sampling=Sampling())
        result = TrafficResult()
        try:
            for line, result in traffic.sweeping(servers, prompts, levels_, requests_, settings,
                                                 greedy=True, stop=sweep.stop, highest=self.highest,
                                                 max_requests=self.max_requests):
                if line:
                    yield (tokens.message_html(f"Running: {line} ({requests_} requests)…"),
                           *self.figures(result.rows), self._table(result))
        except UserError as e:
            said = by_role(servers)(e) if isinstance(e, ServerError) else str(e)
            yield (tokens.message_html(said, level="error"), *self.figures(result.rows), self._table(result))
            return
        stopped = sweep.stop.is_set()
        yield (tokens.message_html(("Stopped: " if stopped else "Done: ") + self._line(result),
                                   level="warn" if stopped else "info"),
               *self.figures(result.rows), self._table(result))

    @staticmethod
    def stop(sweep: Sweep | None) -> None:
        if sweep is not None:
            sweep.stop.set()

    @staticmethod
    def _line(result: TrafficResult) -> str:
        spec = result.summary
        if not spec:
            return "no level finished."
        same = result.same_tokens
        parts = [f"{r.concurrency} at once ×{r.speedup:.2f}" for r in spec if r.speedup is not None]
        return ("speedup " + ", ".join(parts) + "; greedy outputs "
                + ("identical on both servers." if same else "DIFFER between the servers." if same is False
                   else "not compared."))

    @staticmethod
    def _table(result: TrafficResult) -> str:
        """The rows as a small escaped HTML table (``#traffic-table``)."""
        import html
        head = ("concurrency", "server", "requests", "tok/s", "TTFT p50 ms", "TPOT p50 ms", "TPOT p90 ms",
                "accept", "τ", "speedup")
        keys = ("concurrency", "server", "requests", "tokens_per_second", "ttft_ms_p50", "tpot_ms_p50",
                "tpot_ms_p90", "acceptance_rate", "tau", "speedup")

        def cell(k, v):
            if v is None:
                return "–"
            if k == "acceptance_rate":
                return f"{v:.1%}"
            return f"{v:.2f}" if isinstance(v, float) else html.escape(str(v))
        rows = "".join("<tr>" + "".join(f"<td>{cell(k, getattr(r, k))}</td>" for k in keys) + "</tr>"
                       for r in result.rows)
        return (f'<table class="mv-traffic"><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>{rows}</table>'
                if rows else "")


__all__ = ["LOCKED_LEVELS", "LOCKED_REQUESTS", "MAX_TOKENS", "Sweep", "TrafficHandlers", "limits"]
