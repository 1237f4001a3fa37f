"""HTTP to a llama.cpp server (``llama-server``), on :mod:`mtp_viz.sources.http`'s bounded
transport: what it is (``/props``, ``/slots``), how it tokenizes (``/tokenize``,
``/apply-template``), a streamed ``/completion`` and the ``/metrics`` scrape.

A llama.cpp server is recognised by what it answers: ``/props`` is a JSON object with
``default_generation_settings`` and ``build_info`` (vLLM has no ``/props``). ``/props``
also holds the model file's path on the server's disk: it is never shown. Whether the
server speculates is read from ``/slots`` (each slot's ``speculative``), how many
requests it serves at once from their number (``-np``).
"""
from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
from dataclasses import dataclass
from typing import Any, Iterator

from mtp_viz.errors import UserError, clip

from ..http import (
    CONNECT_TIMEOUT,
    MAX_LINE_BYTES,
    Deadlines,
    ServerError,
    Stopped,
    env_seconds,
    explain,
    lines,
    open_url,
    page,
    page_clock,
    read_page,
    sse_chunks,
)
from ..prometheus import Family, SpecDecodeCounters, parse, spec_decode

SOFTWARE = "llama.cpp"
NOT_LLAMACPP = "{server} is not a llama.cpp server."
COUNTERS = Family("llamacpp:spec_decode_num_", "llamacpp:tokens_predicted_total")
MAX_SLOTS = 1024          # parallel slots a server may report (llama.cpp's -np)
MAX_PROMPT_TOKENS = 1 << 20
DEADLINE = 300.0          # seconds one streamed request may take in all (MTP_VIZ_LLAMACPP_DEADLINE)
FIRST_TOKEN_DEADLINE = 60.0   # seconds until its first token (MTP_VIZ_LLAMACPP_FIRST_TOKEN_DEADLINE)
LINE_BYTES = 64 * 1024    # one streamed token's chunk: its piece, timings and top candidates


def _json(url: str, path: str, body: dict | None = None, stop=None) -> Any:
    text = page(url, path, body, CONNECT_TIMEOUT, SOFTWARE, NOT_LLAMACPP, stop)
    try:
        return json.loads(text)
    except ValueError:
        raise ServerError(url, f"{{url}} is not a llama.cpp server: its {path} is not JSON.",
                          NOT_LLAMACPP) from None


def model_shape(url: str, stop=None) -> tuple[int, int] | None:
    """(vocabulary, width) of the model the server serves, as its ``/v1/models`` page's
    ``meta`` says (``n_vocab``, ``n_embd``); None where it does not say."""
    try:
        meta = _json(url, "/v1/models", stop=stop)["data"][0]["meta"]
        return int(meta["n_vocab"]), int(meta["n_embd"])
    except (ServerError, KeyError, IndexError, TypeError, ValueError):
        return None


def recognise(url: str, stop=None) -> bool:
    """Whether a llama.cpp server answers at ``url``: one that answers ``/props`` with an
    HTTP error or anything else is not one; one that cannot be reached is its sentence
    (within the page's deadline, :data:`~..http.PAGE_DEADLINE`)."""
    try:
        with open_url(url, "/props", None, page_clock(url, "/props", stop=stop), "vLLM or llama.cpp") as r:
            data = read_page(r)
        props = json.loads(data)
    except (urllib.error.HTTPError, ValueError):
        return False
    except (OSError, http.client.HTTPException) as e:
        raise explain(url, e, CONNECT_TIMEOUT) from None
    return isinstance(props, dict) and isinstance(props.get("default_generation_settings"), dict) \
        and "build_info" in props


def build_info(url: str) -> str | None:
    """What ``/props`` says of the build (``b<number>-<commit>``), clipped; None without one."""
    props = _json(url, "/props")
    info = props.get("build_info") if isinstance(props, dict) else None
    return clip(info, 80) if isinstance(info, str) else None


@dataclass(frozen=True)
class Slots:
    """What ``/slots`` says: how many requests at once, and whether they speculate."""
    count: int
    speculative: bool
    context: int          # tokens one slot holds (prompt and generation)


def slots(url: str, stop=None) -> Slots:
    data = _json(url, "/slots", stop=stop)
    if not isinstance(data, list) or not 0 < len(data) <= MAX_SLOTS or not all(isinstance(s, dict) for s in data):
        raise ServerError(url, "{server} lists no slots mtp-viz can read (start it with its /slots on).")
    n_ctx = data[0].get("n_ctx")
    context = n_ctx if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0 else 0
    return Slots(len(data), all(s.get("speculative") is True for s in data), context)


def tokenize(url: str, text: str, stop=None) -> list[int]:
    """The server's own ids for ``text``, special tokens (BOS) added as for a prompt."""
    data = _json(url, "/tokenize", {"content": text, "add_special": True}, stop)
    ids = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(ids, list) or len(ids) > MAX_PROMPT_TOKENS or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**31 for i in ids):
        raise ServerError(url, "{server} answered /tokenize with something that is not token ids.")
    return ids


def chat_prompt(url: str, text: str, stop=None) -> str:
    """``text`` as a user's turn in the model's chat template (the server's ``/apply-template``)."""
    data = _json(url, "/apply-template", {"messages": [{"role": "user", "content": text}]}, stop)
    prompt = data.get("prompt") if isinstance(data, dict) else None
    if not isinstance(prompt, str):
        raise ServerError(url, "{server} cannot apply its model's chat template; send the raw prompt.")
    return prompt


def scrape(url: str, timeout: float = CONNECT_TIMEOUT) -> SpecDecodeCounters:
    """The server's cumulative spec-decode counters (``/metrics``: start it with ``--metrics``)."""
    text = page(url, "/metrics", None, timeout, SOFTWARE,
                "{server} does not export /metrics; start it with --metrics.")
    try:
        return spec_decode(parse(text), None, who=url, family=COUNTERS)
    except UserError as e:
        raise ServerError(url, str(e), "{server} reports speculative decoding counters that are not "
                          "sensible.") from None
    except ValueError:
        raise ServerError(url, "{url}'s /metrics is not a Prometheus page.", NOT_LLAMACPP) from None


def stream_caps(body: dict) -> tuple[int, int]:
    """``(line, body)`` bytes a streamed answer to ``body`` may take: one token per chunk,
    each at most :data:`LINE_BYTES`, plus the last chunk's settings (which repeat the prompt's
    text and ids)."""
    n = body.get("n_predict")
    n = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
    prompt = len(json.dumps(body.get("prompt", "")))
    line = min(MAX_LINE_BYTES, LINE_BYTES + 8 * prompt)
    return line, line + 2 * LINE_BYTES * n


def post_stream(url: str, body: dict, *, stop=None, deadline: float | None = None,
                first_token_deadline: float | None = None) -> Iterator[tuple[float, dict]]:
    """POST ``/completion`` streamed; yield ``(arrival time, chunk)`` per server-sent event,
    each line and the whole body capped (:func:`stream_caps`), within a deadline for the
    first token and one for all of it (``MTP_VIZ_LLAMACPP_FIRST_TOKEN_DEADLINE``, 60 s;
    ``MTP_VIZ_LLAMACPP_DEADLINE``, 300 s). A set ``stop`` closes the connection."""
    deadlines = Deadlines(
        url,
        deadline if deadline is not None else env_seconds("MTP_VIZ_LLAMACPP_DEADLINE", DEADLINE),
        first_token_deadline if first_token_deadline is not None
        else env_seconds("MTP_VIZ_LLAMACPP_FIRST_TOKEN_DEADLINE", FIRST_TOKEN_DEADLINE),
        names=("MTP_VIZ_LLAMACPP_FIRST_TOKEN_DEADLINE", "MTP_VIZ_LLAMACPP_DEADLINE"))
    clock = deadlines.clock(stop)
    try:
        resp = open_url(url, "/completion", body, clock, SOFTWARE)
    except urllib.error.HTTPError as e:
        raise ServerError(url, f"{{server}} answered HTTP {e.code} to /completion: the prompt plus "
                          f"{body.get('n_predict')} new tokens may not fit a slot, or a setting is out of range.",
                          "{server} refused the request: the prompt plus the new tokens may not fit, or a "
                          "setting is out of range.") from None
    except Stopped:
        return
    with resp:
        try:
            for chunk in sse_chunks(lines(resp, url, clock, stream_caps(body)), url):
                deadlines.token_seen = deadlines.token_seen or bool(chunk.get("tokens"))
                yield time.perf_counter(), chunk
        except Stopped:
            return
        except (socket.timeout, TimeoutError) as e:
            raise explain(url, e, clock.silence, SOFTWARE) from None
        except (ConnectionError, http.client.HTTPException) as e:
            raise ServerError(url, "{server} closed the connection while generating.") from e

__all__ = ["COUNTERS", "NOT_LLAMACPP", "Slots", "chat_prompt", "post_stream", "recognise", "scrape", "slots",
           "stream_caps", "tokenize"]
