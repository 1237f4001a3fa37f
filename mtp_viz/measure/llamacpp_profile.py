"""llama.cpp's cost profile: :mod:`.profile`'s study, measured on a ``llama-server``.

Every figure is the server's own (its ``timings``, its clock, milliseconds), from greedy
``/completion`` requests of token ids, medians of repeats:

- ``plain``: a plain run's seconds per token (``predicted_ms / predicted_n``) on a server
  of the target alone;
- ``verify[w]``: the target over w tokens after a cached prefix, what a verification of
  w − 1 drafts costs it: the prefix is sent once (``cache_prompt``), then the prefix and w
  new ids, whose ``prompt_n`` must be w (the cache reused) and whose ``prompt_ms`` is the
  cost. (A prompt's logits are kept at its last position, a verification's at every one:
  the head is read once either way; a few rows more of arithmetic.)
- ``draft``: one draft of the MTP drafter, by difference, on a server with
  ``--spec-type draft-mtp`` and γ = ``calibrate`` drafts a step (``--spec-draft-p-min 0``:
  every step drafts them all): a step costs γ·t_draft + t_verify(γ + 1), so

      t_draft = (predicted_ms / steps − verify[γ + 1]) / γ,   steps = predicted_n − draft_n_accepted

  (each step writes its accepted drafts and one token of the target's own).

The prediction is :func:`mtp_viz.analysis.payoff.speedup` over these costs. It is checked
against runs the same server measures: MTP with the exported pair's own (random) drafter,
whose drafts are rejected (α ≈ 0: the cost side alone), and, where the profile starts the
servers, MTP at each set acceptance α through llama.cpp's synthetic acceptance
(``--spec-synth-rates α, α², …``: every forward real, each draft kept with probability α,
the text not the model's; llama.cpp marks it "benchmarking only"). Each check's measured
speedup is the run's decode rate over the plain server's (the server's ``predicted_per_second``,
prompt left out, as the prediction is), beside the prediction at the acceptance the run
realised (τ = predicted_n / steps → α, :func:`mtp_viz.engine.theory.alpha_from_tau`).
"""
from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from mtp_viz.errors import UserError

KEPT_SERVER = Path("~/.cache/mtp-viz/llama.cpp-11434/build/bin/llama-server")   # scripts/llamacpp.sh's build
START_SECONDS = 600        # a server may take this long to load a real shape from a cold disk
CALIBRATE_DRAFTS = 2       # γ of the run the drafter's cost is taken from (the checks run at other γ)


@dataclass(frozen=True)
class Timings:
    """One request's ``timings``: milliseconds and counts on the server's clock."""
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    draft_n: int = 0
    draft_n_accepted: int = 0

    @classmethod
    def of(cls, chunk: Any) -> "Timings":
        """The last streamed chunk's ``timings``, checked (a server's reply is untrusted)."""
        t = chunk.get("timings") if isinstance(chunk, dict) else None
        if not isinstance(t, dict):
            raise UserError("The llama.cpp server sent no timings with its answer.")
        out = {}
        for name, kind in (("prompt_n", int), ("prompt_ms", float), ("predicted_n", int), ("predicted_ms", float),
                           ("draft_n", int), ("draft_n_accepted", int)):
            v = t.get(name, 0 if name.startswith("draft") else None)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v or v > 1e12:
                raise UserError(f"The llama.cpp server's timings hold no usable {name}.")
            out[name] = kind(v)
        return cls(**out)

    @property
    def steps(self) -> int:
        """Target forwards after the prompt's: each writes its accepted drafts and one token."""
        return max(self.predicted_n - self.draft_n_accepted, 1)

    @property
    def per_token(self) -> float:
        return self.predicted_ms / 1e3 / max(self.predicted_n, 1)


def completion(url: str, ids: Sequence[int], n: int, *, cache: bool = False, stop=None) -> Timings:
    """One greedy streamed ``/completion`` of ``n`` tokens after ``ids``; its timings."""
    from mtp_viz.sources.llamacpp.client import post_stream
    body = {"prompt": list(ids), "n_predict": n, "temperature": 0, "top_k": 1, "cache_prompt": cache,
            "ignore_eos": True, "stream": True}
    last = None
    for _, chunk in post_stream(url, body, stop=stop):
        last = chunk
    if last is None:
        raise UserError("The llama.cpp server closed the stream before its answer.")
    return Timings.of(last)


def verify_cost(url: str, prefix: list[int], width: int, vocab: int, rng: random.Random, stop=None) -> float:
    """Seconds the server takes over ``width`` new ids after ``prefix`` (cached first). The
    same width goes once untimed first: ggml builds a graph for each new batch shape, a cost a
    verification of that width pays once in a run, not at every step."""
    completion(url, prefix, 1, cache=True, stop=stop)
    for timed in (False, True):
        new = [rng.randrange(3, vocab) for _ in range(width)]
        t = completion(url, prefix + new, 1, cache=True, stop=stop)
        if t.prompt_n != width:
            raise UserError(f"The llama.cpp server evaluated {t.prompt_n} prompt tokens where {width} were new: "
                            "it does not reuse its prompt cache, so a verification's cost cannot be read.")
    return t.prompt_ms / 1e3


@dataclass(frozen=True)
class Costs:
    """llama.cpp's per-forward costs, seconds (medians), as :class:`.profile.Costs`."""
    engine: str
    plain: float
    verify: dict[int, float]
    draft: float | None
    calibrate_drafts: int
    samples: dict[str, list[float]]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verify"] = {str(w): s for w, s in self.verify.items()}
        return d


def measure_costs(plain_url: str, mtp_url: str | None, ids: list[int], vocab: int, *, new_tokens: int,
                  max_draft_tokens: int, repeats: int, engine: str, stop=None, seed: int = 0) -> Costs:
    """Plain step and verification widths 1 … γ_max + 1 on ``plain_url``, widths in turns
    rotated each repeat; the drafter by difference on ``mtp_url`` (γ = :data:`CALIBRATE_DRAFTS`)."""
    rng = random.Random(seed)
    widths = list(range(1, max_draft_tokens + 2))
    samples: dict[str, list[float]] = {"plain": [], "draft_step": [], **{f"verify{w}": [] for w in widths}}
    completion(plain_url, ids, 4, stop=stop)    # untimed warm-up (weights paged in)
    order: list[int] = [0] + widths
    for r in range(repeats):
        for w in order[r % len(order):] + order[:r % len(order)]:
            if w == 0:
                samples["plain"].append(completion(plain_url, ids, new_tokens, stop=stop).per_token)
            else:
                samples[f"verify{w}"].append(verify_cost(plain_url, ids, w, vocab, rng, stop))
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    verify = {w: med[f"verify{w}"] for w in widths}
    draft = None
    if mtp_url is not None:
        completion(mtp_url, ids, 4, stop=stop)
        g = CALIBRATE_DRAFTS
        for _ in range(repeats):
            t = completion(mtp_url, ids, new_tokens, stop=stop)
            samples["draft_step"].append(t.predicted_ms / 1e3 / t.steps)
        draft = max((statistics.median(samples["draft_step"]) - verify[g + 1]) / g, 0.0)
    return Costs(engine, med["plain"], verify, draft, CALIBRATE_DRAFTS, samples)


@dataclass(frozen=True)
class Check:
    """One measured MTP run set beside the prediction from :class:`Costs`."""
    label: str
    draft_tokens: int
    set_alpha: float | None           # None: the pair's own drafter (random weights: α ≈ 0)
    realized_alpha: float
    tau: float
    decode_tokens_per_second: float   # the server's own, prompt left out
    measured: float                   # over the plain server's decode rate
    predicted: float                  # at the realised α
    measured_over_predicted: float


def check(label: str, runs: list[Timings], plain_tps: float, costs: Costs, draft_tokens: int,
          set_alpha: float | None) -> Check:
    """A run set's medians beside the prediction at the α they realised."""
    from mtp_viz.analysis import payoff
    from mtp_viz.engine import theory
    tps = statistics.median(r.predicted_n / (r.predicted_ms / 1e3) for r in runs)
    tau = sum(r.predicted_n for r in runs) / sum(r.steps for r in runs)
    alpha = theory.alpha_from_tau(min(max(tau, 1.0), draft_tokens + 1.0), draft_tokens)
    predicted = payoff.speedup(alpha, draft_tokens, costs.plain, costs.verify, costs.draft or 0.0)
    measured = tps / plain_tps
    return Check(label, draft_tokens, set_alpha, alpha, tau, tps, measured, predicted, measured / predicted)


def synth_rates(alpha: float, draft_tokens: int) -> str:
    """llama.cpp's ``--spec-synth-rates``: the unconditional chance that draft i is kept,
    α^i, for per-token acceptance α (each kept draft's successor kept with probability α)."""
    return ",".join(f"{alpha ** i:.6f}" for i in range(1, draft_tokens + 1))


def server_path(given: str | None = None) -> str:
    """The ``llama-server`` to start: ``given``, ``MTP_VIZ_LLAMA_SERVER``, or scripts/llamacpp.sh's build."""
    path = Path(given or os.environ.get("MTP_VIZ_LLAMA_SERVER") or KEPT_SERVER).expanduser()
    if not os.access(path, os.X_OK):
        raise UserError("No llama-server to start: build one with `bash scripts/llamacpp.sh`, or name it with "
                        "--llama-server (or MTP_VIZ_LLAMA_SERVER).")
    return str(path)


def file_type(path: Path) -> str:
    """The GGUF's weight type as llama.cpp names it (``bf16``, ``q8_0``, ``f32``), from its
    ``general.file_type``; "unknown" where the header does not say."""
    import gguf
    field = gguf.GGUFReader(str(path)).fields.get("general.file_type")
    if field is None:
        return "unknown"
    name = gguf.LlamaFileType(int(field.parts[field.data[0]][0])).name   # e.g. MOSTLY_Q8_0, ALL_F32
    return name.split("_", 1)[1].lower() if "_" in name else name.lower()


def build_line(server: str) -> str:
    """``llama-server --version``'s line naming its build (version and commit), or ''."""
    try:
        out = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return next((ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.startswith("version")), "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(server: str, folder: Path, threads: int, extra: Sequence[str] = (), stop=None) -> Iterator[str]:
    """A ``llama-server`` on ``folder``'s target.gguf (``extra``: more flags), ready; its URL.
    Stopped (its own process group) on the way out."""
    from mtp_viz.sources.llamacpp.client import _json
    port = _free_port()
    log = tempfile.TemporaryFile("w+")
    cmd = [server, "-m", str(folder / "target.gguf"), "-t", str(threads), "-tb", str(threads), "-c", "2048",
           "-np", "1", "--host", "127.0.0.1", "--port", str(port), *extra]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if proc.poll() is not None:
                raise UserError(f"llama-server stopped while loading the exported pair (exit {proc.returncode}).")
            with contextlib.suppress(Exception):
                if _json(url, "/health").get("status") == "ok":
                    break
            if time.monotonic() > deadline or (stop is not None and stop.is_set()):
                raise UserError(f"llama-server did not load the exported pair within {START_SECONDS} s.")
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()


def study(folder: Path, ids: list[int], vocab: int, *, server: str, threads: int, label: str, new_tokens: int = 64,
          draft_tokens: int = 4, max_draft_tokens: int = 8, alphas: Sequence[float] = (0.5, 0.7, 0.9),
          repeats: int = 3, random_weights: bool = True, extra: Sequence[str] = (), size: str | None = None,
          stop=None,
          log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The whole llama.cpp profile of an exported pair (``folder``: target.gguf, drafter.gguf),
    every server started and stopped here (at most two at once, the plain one and the one the
    drafter's cost is taken from, both mapping the same target file; ``extra``: more flags for each):
    JSON-ready costs, predictions over α (:func:`mtp_viz.analysis.payoff.curves`), at each published
    acceptance (:func:`mtp_viz.analysis.published.rows`; ``size``: the pair's Gemma 4 size) and the checks."""
    from mtp_viz.analysis import payoff
    mtp = [*extra, "-md", str(folder / "drafter.gguf"), "--spec-type", "draft-mtp", "-td", str(threads), "-tbd",
           str(threads), "--spec-draft-p-min", "0"]
    log(f"{label}: the plain step and verifications of 1-{max_draft_tokens + 1} tokens")
    # --swa-full: sliding-window layers keep every position, so a cached prefix is reused whole
    # (else llama.cpp re-evaluates the last few positions of a prefix it cached: not w tokens)
    with serving(server, folder, threads, [*extra, "--swa-full"], stop=stop) as plain_url:
        with serving(server, folder, threads, [*mtp, "--spec-draft-n-max", str(CALIBRATE_DRAFTS)],
                     stop=stop) as calib_url:
            costs = measure_costs(plain_url, calib_url, ids, vocab, new_tokens=new_tokens,
                                  max_draft_tokens=max_draft_tokens, repeats=repeats, engine=label, stop=stop)
        plain_runs = [completion(plain_url, ids, new_tokens, stop=stop) for _ in range(repeats)]
    plain_tps = statistics.median(r.predicted_n / (r.predicted_ms / 1e3) for r in plain_runs)
    checks = []
    for a in (None, *alphas):
        flags = [*mtp, "--spec-draft-n-max", str(draft_tokens)] + ([] if a is None else
                                                                   ["--spec-synth-rates", synth_rates(a, draft_tokens)])
        log(f"{label}: MTP, {draft_tokens} drafts, " + ("its own drafter" if a is None else f"set acceptance {a:g}"))
        with serving(server, folder, threads, flags, stop=stop) as url:
            completion(url, ids, 4, stop=stop)
            runs = [completion(url, ids, new_tokens, stop=stop) for _ in range(repeats)]
        checks.append(check(("its own drafter" + (" (random weights: α ≈ 0)" if random_weights else ""))
                            if a is None else f"set acceptance {a:g}", runs, plain_tps, costs, draft_tokens, a))
    from mtp_viz.analysis import published
    at = published.rows(costs.plain, costs.verify, costs.draft or 0.0, draft_tokens, size)
    return {"engine": label, "threads": threads, "costs": costs.as_dict(), "published": [r.as_dict() for r in at],
            "prediction": payoff.curves(costs.plain, costs.verify, costs.draft or 0.0, payoff.grid()),
            "plain_decode_tokens_per_second": plain_tps, "checks": [asdict(c) for c in checks]}


__all__ = ["CALIBRATE_DRAFTS", "Check", "Costs", "Timings", "build_line", "check", "completion", "file_type",
           "measure_costs", "server_path", "serving", "study", "synth_rates", "verify_cost"]
