"""The compiled engine (``--engine compiled``): the same decoding, without Python's overhead.

At the widths of the bundled pair a forward pass costs mostly per-layer overhead: the
Python of 24 decoder layers, the cache's bookkeeping, the masks built each step. The
compiled engine removes it the way gpt-fast does: a static KV cache and one compiled
graph per forward shape (``torch.compile``, inductor), with speculative decoding on top.

- **Static cache.** transformers' ``StaticCache``, its sliding-window layers held at
  full length too (``StaticLayer``): a ring buffer of one window cannot take back the
  entries of rejected drafts once it has wrapped, and a verification must be undone up
  to γ positions. The window is applied by the mask instead: key j is visible from
  query q when j <= q, and for sliding layers also q - j < W, the same rule transformers'
  masks follow. Rejected entries need no erasing: the next forward writes over them, and
  no query ever sees a key beyond its own position.
- **Shapes.** A verification of k drafts sends k + 1 tokens; it is padded to the next
  width of :data:`WIDTHS` (1, 2, 3, 5, 9, 17), or to a wider one already compiled
  (:meth:`FastTarget.width`), so a run compiles a handful of graphs, not one per draft
  length. A prompt goes through a compiled graph that holds it (else eagerly: a new
  prompt length never waits for a compile); one longer than 17 tokens runs eagerly, where
  its cost is the arithmetic (about 0.3 ms a token on the bundled pair), which a graph
  does not cut, while chunks of 17 would each pay a step's fixed cost again (a graph costs
  3.4 ms at width 1 and 9.7 ms at 17 there; eagerly, 17 tokens take 18.9 ms and 76 take
  35 ms, where chunks of 17 took 48). Padding
  sits after the real tokens, so causality keeps it out of their attention; its cache
  entries are cropped straight away. The cache length
  is a capacity of :data:`CAPACITIES`, the smallest holding prompt + new tokens + 17.
- **Attention.** The twin (below) runs scaled-dot-product attention with grouped-query
  heads left to the kernel (``enable_gqa``) instead of copying every KV head out to its
  query heads, which at a full-length cache would copy the whole cache every layer.
- **Twin.** The compiled forward runs on a twin of the target that shares its weights
  (no copy) but has a config of its own, so the eager target keeps transformers'
  attention and everything else that holds it (hooks, ``generate``) is untouched.
- **MTP drafter.** The drafter's step is compiled too: the target's shared K/V go in at
  fixed shapes (full attention: the capacity, padded and masked; sliding: the last W
  entries, which are all the drafter's window sees) so one graph serves every step.
- **Compile time** is measured per shape and kept off the engine's clock: a step whose
  graph was compiled reports its compile seconds apart (``Forward.compile_seconds``).
- **Mode.** ``mode`` is torch.compile's: None (inductor's kernels) by default;
  ``"reduce-overhead"`` on a GPU records each graph as a CUDA graph
  (``benchmarks/gpu_compiled.py`` checks it where a GPU is lent).
- **Guards.** Each instance compiles a code object of its own (:func:`own_graph`), so its
  graphs serve it alone, and dynamo checks before a call only what the call is given
  (token ids, positions, masks, the cache), not the ~3,000 attributes and parameters of
  a model that never changes after its twin is made: a tenth of a plain step. On a CPU
  the graph's wrapper is C++, not Python (the tensor views and library calls of a step
  are a quarter of it at these widths).
- **Fallback.** If a graph cannot be compiled (no C++ compiler, a model the graph
  cannot be captured for, a graph break: ``fullgraph=True`` refuses one rather than run
  a slower, broken-up graph), the engine says so in one sentence (``FastTarget.graph.note``)
  and decodes eagerly. It never falls back silently.

Still lossless: the verification rule is the loop's, unchanged; the compiled target
computes the same logits as the eager one up to float rounding (tests/engine/test_compiled.py).
"""
from __future__ import annotations

import re
import threading
import time
import types
from dataclasses import dataclass, field

import torch

from .build import turn
from .config import text_config
from .decoder import EagerDecoder, Forward, Mounted, RunCache, with_state
from .events import Ran
from .static import StaticKV, twin, visible

WIDTHS = (1, 2, 3, 5, 9, 17)          # compiled forward widths: k + 1 tokens round up to one
CAPACITIES = (256, 512, 1024, 2048, 4096, 8192)
GRAPH_LIMIT = 128                     # graphs per compiled method (dynamo's default, 8, is per thread)
GEMMA4_CLASSES = ("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration",               # E2B ... 31B, 26B-A4B
                  "Gemma4UnifiedForCausalLM", "Gemma4UnifiedForConditionalGeneration")  # the 12B family


@dataclass(frozen=True, order=True)
class Graph:
    """One compiled graph: ``verify`` (the target with the state an MTP drafter reads), ``step`` (the target
    without it) or ``draft`` (the MTP drafter's step), at a cache capacity and a width (:mod:`.graphs`)."""
    kind: str
    capacity: int
    width: int = 1

    def describe(self) -> str:
        tokens = f"{self.width} token{'s' if self.width != 1 else ''}"
        return {"verify": f"the target over {tokens}, with the drafter's state",
                "step": f"the target over {tokens}",
                "draft": "the MTP drafter's step"}[self.kind] + f" ({self.capacity}-position cache)"


def width_for(n: int) -> int:
    """The compiled width a forward of n tokens is padded to (n itself past the largest)."""
    return next((w for w in WIDTHS if w >= n), n)


def capacity_for(need: int) -> int | None:
    """The smallest cache capacity holding ``need`` positions; None past the largest."""
    return next((c for c in CAPACITIES if c >= need), None)


def _given(entries) -> list[bool]:
    """Dynamo's guard filter: keep a guard unless it reads the compiled method's own
    instance (``self``: the twin's modules, parameters and config) or a module's globals
    (transformers' registries, ``torch``). What stays is every guard on the call's own
    arguments (their shapes, dtypes, strides; the cache's layers; ``want_state``) and the
    global state (grad mode, default dtype and device), which is what picks a graph."""
    return [not (re.search(r"\bself\b", e.name) or "G[" in e.name) for e in entries]


def own_graph(method, mode: str | None = None, cpu: bool = False):
    """``torch.compile`` of a bound method, for its instance alone. Dynamo keeps graphs
    per code object, so every instance of a class would share them, and before each call
    it would check every attribute and parameter the trace read (about 3,000 guards on
    the bundled pair, 0.3-0.65 ms a call) to tell the instances apart. Here the method
    runs a copy of its code made for this instance, so none of those checks is needed
    (:func:`_given` drops them). ``size_asserts`` off: inductor's per-call check of each
    input's size and stride repeats the argument guards (417 checks a plain step).
    ``cpu``: the graph's wrapper is C++ (``cpp_wrapper``), not Python, so its ~840
    tensor views and ~170 library calls a step are made without the interpreter; its
    wrapper is built apart from the kernels at -O1 (``cpp_wrapper_build_separate``), which
    halves the first compile (both measured in docs/compiled.md)."""
    from torch._inductor import list_mode_options
    f = method.__func__
    code = f.__code__.replace(co_name=f"{f.__name__}_{id(method.__self__):x}")  # a code object of its own
    own = types.MethodType(types.FunctionType(code, f.__globals__, code.co_name, f.__defaults__, f.__closure__),
                           method.__self__)
    options = {**list_mode_options(mode or "default"), "guard_filter_fn": _given, "size_asserts": False,
               **({"cpp_wrapper": True, "cpp_wrapper_build_separate": True} if cpu else {})}
    # widths x capacities x (with or without the target's state) exceed dynamo's default
    # of 8 graphs, past which it would fail (fullgraph); its config is per thread, so the
    # limit goes with the function, for whichever thread compiles
    return torch.compile(own, dynamic=False, fullgraph=True, options=options, recompile_limit=GRAPH_LIMIT)


@dataclass
class Shapes:
    """The graphs compiled so far: (capacity, width, with target state) -> compile seconds."""
    seconds: dict[tuple, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


class Compiled:
    """One function compiled (:func:`own_graph`) beside its eager self, for the target and
    the drafter alike: a call takes the build turn (its wait kept off the clock), times
    each shape's first call as that shape's compile (``shapes``), and where the graph
    cannot be compiled runs the eager function and says why in one sentence (``note``)."""

    def __init__(self, fn, mode: str | None, cpu: bool, who: str):
        self.eager, self.who, self.note, self.shapes = fn, who, "", Shapes()
        self._graph = own_graph(fn, mode, cpu=cpu)

    def __call__(self, shape: tuple, *args) -> tuple:
        """(the function's outputs, the seconds spent compiling or waiting for the turn)."""
        if self.note:
            return self.eager(*args), 0.0
        first = shape not in self.shapes.seconds
        with turn() as waited:  # its guards read the default dtype a load changes (engine.build)
            t = time.perf_counter()
            try:
                out = self._graph(*args)
            except Exception as e:  # noqa: BLE001 - any failure to compile is the fallback's sentence
                # a graph that fails fails while it is traced or built, on fake tensors: the
                # cache is as it was, and the same call runs eagerly
                self.note = fallback_sentence(e, self.who)
                return self.eager(*args), waited
        if first:
            self.shapes.seconds[shape] = time.perf_counter() - t
        return out, waited + (self.shapes.seconds[shape] if first else 0.0)


class FastTarget:
    """The target, compiled: a :class:`~.decoder.Decoder` the loop runs instead of the
    eager one. ``model`` is the eager target (config, device, dtype are its); ``graph``
    its compiled forward (:class:`Compiled`: the shapes compiled, and ``graph.note``, the one
    sentence saying why decoding fell back to eager, "" while compiled)."""
    ran = Ran("compiled", "compiled engine", routing=False)  # hooks see no compiled graph

    def __init__(self, model, mode: str | None = None):
        self.model = model
        self.config, self.device = model.config, model.device
        self.twin = twin(model)
        self.window = getattr(text_config(model.config), "sliding_window", None)
        self.pad = int(getattr(text_config(model.config), "pad_token_id", None) or 0)
        self.graph = Compiled(self._step, mode, self.device.type == "cpu", "the target")
        self._lock = threading.Lock()
        self._free: dict[int, list[StaticKV]] = {}

    def open(self, need: int) -> RunCache:
        """A run's session: a static cache from the pool, or, past the largest capacity,
        the eager model's (the start event's ``engine`` then says "eager")."""
        cache = self.new_cache(need)
        return RunCache(self, cache) if cache is not None else EagerDecoder(self.model).open(need)

    # -- the cache pool: one run's cache goes back for the next run (same buffers, same graphs)
    def new_cache(self, need: int) -> StaticKV | None:
        """A cache for a run of ``need`` positions; None when no capacity holds them."""
        capacity = capacity_for(need)
        if capacity is None:
            return None
        with self._lock:
            free = self._free.setdefault(capacity, [])
            cache = free.pop() if free else None
        if cache is None:  # an eager forward sets a new one's layers up (transformers' lazy init)
            cache = StaticKV(self.twin.config, capacity)  # and the hooks that capture the state (on first use)
            self.eager(cache, [self.pad], True, 1)
        cache.reset()
        return cache

    def release(self, cache: StaticKV) -> None:
        with self._lock:
            self._free.setdefault(cache.capacity, []).append(cache)

    def _step(self, ids, positions, full, sliding, cache, want_state: bool, keep: int = 0):
        """The twin's forward: every position's logits in a graph (``keep`` 0), the last
        ``keep`` outside one (a long prompt's prefill: the vocabulary's logits at one
        position, not at each, and E2B's KV-shared layers over that position alone)."""
        inputs = {"input_ids": ids, "position_ids": positions, "cache": cache, "use_cache": True,
                  "attention_mask": {"full_attention": full, "sliding_attention": sliding}}
        if not want_state:
            return self.twin(logits_to_keep=keep, **inputs).logits, None, None
        logits, hidden, shared = with_state(self.twin, keep, **inputs)
        return logits, hidden, dict(shared)

    @torch.inference_mode()
    def forward(self, kv: StaticKV, tokens: list[int], want_state: bool, keep: int, prefill: bool = False) -> Forward:
        """The loop's target forward over ``tokens`` appended to ``kv`` (see
        :class:`~.decoder.Forward`), through a graph (:meth:`width`). ``prefill``: the
        prompt, through a compiled graph that holds it, else eagerly: a new prompt length
        never stalls a run on a compile."""
        width = self.width(kv.capacity, len(tokens), want_state, prefill)
        if width is None:
            return self.eager(kv, tokens, want_state, keep)
        start = kv.length
        logits, hidden, shared, compile_s = self._run(kv, tokens, want_state, width, graph=True)
        return self._reduce(kv, start, len(tokens), logits, hidden, shared, keep, compile_s)

    def width(self, capacity: int, n: int, want_state: bool, prefill: bool = False) -> int | None:
        """The graph width ``n`` tokens go through: their own (:func:`width_for`) where it is
        compiled, else the narrowest compiled width that holds them (a run planned for
        verifications of 4 drafts pads its last, shorter ones to 5: one graph fewer to
        compile for each width it skips, a few tenths of a millisecond more for those
        steps), else their own, compiled now; for the prompt (``prefill``) None instead,
        and eagerly past the widest graph."""
        own = width_for(n)
        if self.has_graph((capacity, own, want_state)):
            return own
        wider = [w for c, w, s in self.graph.shapes.seconds if (c, s) == (capacity, want_state) and w >= n]
        if wider:
            return min(wider)
        return None if prefill or n > WIDTHS[-1] else own

    @torch.inference_mode()
    def build(self, kv: StaticKV, width: int, want_state: bool) -> None:
        """Compile the graph of ``width`` at ``kv``'s capacity (a run's forward would pad to
        a wider one already compiled: :meth:`width`), through the call a run makes."""
        self._run(kv, [self.pad] * width, want_state, width, graph=True)

    def graphs(self) -> dict[Graph, float]:
        """The graphs compiled so far and what compiling each took (wall seconds)."""
        return {Graph("verify" if s else "step", c, w): t for (c, w, s), t in self.graph.shapes.seconds.items()}

    def has_graph(self, shape: tuple) -> bool:
        """Whether the graph of ``shape`` (capacity, width, with the state) is compiled."""
        return shape in self.graph.shapes.seconds

    @torch.inference_mode()
    def eager(self, kv: StaticKV, tokens: list[int], want_state: bool, keep: int) -> Forward:
        """The same forward without a graph (what sets a new cache's layers up)."""
        start = kv.length
        logits, hidden, shared, _ = self._run(kv, tokens, want_state, len(tokens), graph=False, keep=keep)
        return self._reduce(kv, start, len(tokens), logits, hidden, shared, keep, 0.0)

    def _run(self, kv: StaticKV, tokens: list[int], want_state: bool, width: int, graph: bool, keep: int = 0):
        """One forward of ``tokens`` padded to ``width``; the padding's cache entries
        dropped at once. Returns the padded outputs (outside a graph the last ``keep``
        positions', 0: all) and the seconds spent compiling."""
        n, start = len(tokens), kv.length
        ids = torch.tensor([tokens + [self.pad] * (width - n)], device=self.device)
        positions = torch.arange(start, start + width, device=self.device)
        args = (ids, positions[None], visible(positions, kv.capacity, None),
                visible(positions, kv.capacity, self.window), kv.cache, want_state)
        if graph:
            (logits, hidden, shared), compile_s = self.graph((kv.capacity, width, want_state), *args)
        else:
            (logits, hidden, shared), compile_s = self._step(*args, keep=keep), 0.0
        if width > n:  # the padding's entries go at once
            kv.cache.crop(-(width - n))
        kv.length = start + n
        return logits, hidden, shared, compile_s

    def _reduce(self, kv, start, n, logits, hidden, shared, keep, compile_s) -> Forward:
        """The Forward of the ``n`` tokens from ``start``: their last ``keep`` logits and
        states (the padding's dropped), the shared K/V up to them."""
        logits = logits[0, :n][-keep:].float()
        hidden = hidden[:, :n][:, -keep:] if hidden is not None else None
        return Forward(logits, hidden, self._verified_kv(shared, start + n, n), compile_s)

    def _verified_kv(self, shared: dict | None, end: int, n: int) -> dict | None:
        """The shared K/V as the eager target returns them: full attention every position
        up to ``end``; sliding attention the last W - 1 + n (what a sliding cache layer
        hands its attention), as views of the static buffers."""
        if shared is None:
            return None
        out = {}
        for kind, (k, v) in shared.items():
            lo = max(0, end - (self.window - 1 + n)) if kind == "sliding_attention" and self.window else 0
            out[kind] = (k[:, :, lo:end], v[:, :, lo:end])
        return out


class FastDraftStep:
    """The MTP drafter's forward, compiled at fixed shapes. The target's shared K/V go
    in as full attention: ``capacity`` positions, the first S real and the rest masked;
    sliding attention: the last W real entries (all the drafter's window sees; fewer,
    padded and masked, before the window fills). The eager assistant attends to the same
    keys with no mask at all (one query), so its drafts differ only by rounding. Its
    eager counterpart is :class:`~.decoder.EagerDraftStep`."""

    def __init__(self, assistant, window: int, mode: str | None = None):
        self.twin = twin(assistant)
        self.window = window
        self.graph = Compiled(self._step, mode, assistant.device.type == "cpu", "the drafter")

    def _step(self, x, position, full_kv, sliding_kv, full_mask, sliding_mask):
        a = self.twin
        out = a.model(inputs_embeds=a.pre_projection(x), position_ids=position, use_cache=False,
                      attention_mask={"full_attention": full_mask, "sliding_attention": sliding_mask},
                      shared_kv_states={"full_attention": full_kv, "sliding_attention": sliding_kv})
        h = out.last_hidden_state
        logits = a.masked_embedding(h, a.lm_head.weight) if a.masked_embedding is not None else a.lm_head(h)
        return logits[0, -1], a.post_projection(h)

    def inputs(self, shared_kv: dict, dtype) -> tuple:
        """The fixed-shape K/V and masks of one drafting step (shared by its k drafts);
        full attention padded to the capacity holding its S positions."""
        (fk, fv), (sk, sv) = shared_kv["full_attention"], shared_kv["sliding_attention"]
        capacity = capacity_for(fk.shape[2]) or fk.shape[2]
        full = [torch.zeros(*fk.shape[:2], capacity, fk.shape[3], dtype=dtype, device=fk.device) for _ in "kv"]
        full[0][:, :, :fk.shape[2]], full[1][:, :, :fk.shape[2]] = fk, fv
        m = min(sk.shape[2], self.window)
        sliding = [torch.zeros(*sk.shape[:2], self.window, sk.shape[3], dtype=dtype, device=sk.device) for _ in "kv"]
        sliding[0][:, :, :m], sliding[1][:, :, :m] = sk[:, :, -m:], sv[:, :, -m:]
        j_full, j_slide = torch.arange(capacity, device=fk.device), torch.arange(self.window, device=fk.device)
        return (tuple(full), tuple(sliding), (j_full < fk.shape[2])[None, None, None],
                (j_slide < m)[None, None, None])

    def graphs(self) -> dict[Graph, float]:
        """The graphs compiled so far (one per capacity) and what compiling each took (wall seconds)."""
        return {Graph("draft", shape[2]): t for shape, t in self.graph.shapes.seconds.items()}

    def __call__(self, x, position, inputs) -> tuple[torch.Tensor, torch.Tensor, float]:
        """(logits [V], the next state [1, 1, H], compile seconds) for one draft."""
        shape = tuple(inputs[0][0].shape)
        if shape[2] not in CAPACITIES:  # past the largest capacity: one shape per step, eager
            return (*self._step(x, position, *inputs), 0.0)
        (logits, h), compile_s = self.graph(shape, x, position, *inputs)
        return logits, h, compile_s


def fallback_sentence(error: Exception, who: str = "the target") -> str:
    """Why the compiled engine cannot run here, in one sentence (never a path or a trace)."""
    name, text = type(error).__name__, str(error).lower()
    if "CppCompileError" in name or ("compiler" in text and ("c++" in text or "cxx" in text)):
        why = "no working C++ compiler was found"
    elif "Unsupported" in name or "graph break" in text:
        why = "its graph breaks (torch.compile cannot capture it in one piece)"
    else:
        why = f"torch.compile failed ({name})"
    return f"Compiling {who} failed: {why}, so it decodes eagerly."


def compile_support(model) -> str:
    """"" if the compiled engine can take ``model``; else the sentence saying why not."""
    name = type(model).__name__
    if name not in GEMMA4_CLASSES:
        return f"The compiled engine takes Gemma 4 targets; {name} decodes eagerly."
    if str(model.device).startswith("meta"):
        return "The compiled engine needs the target's weights in memory; it decodes eagerly."
    return ""


def mount(target, assistant=None, mode: str | None = None):
    """The compiled engine (:data:`mtp_viz.engine.engines.ENGINES`): ``target`` and its MTP
    ``assistant`` (or None) as graphs, none compiled yet; eager with the sentence saying
    why where it cannot take them."""
    note = compile_support(target)
    if note:
        return Mounted(EagerDecoder(target), note=note)
    fast = FastTarget(target, mode=mode)
    return Mounted(fast, FastDraftStep(assistant, fast.window, mode=mode) if assistant is not None else None)


__all__ = ["CAPACITIES", "Compiled", "FastDraftStep", "FastTarget", "Graph", "WIDTHS", "capacity_for",
           "compile_support", "fallback_sentence", "mount", "own_graph", "width_for"]
