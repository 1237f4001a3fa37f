"""A bench's runs, interleaved: every mode and setting of every arm on every prompt,
repeat after repeat, with greedy parity against transformers.

Within each repeat, each prompt runs every task once, in an order rotated from prompt to
prompt and repeat to repeat (:func:`rotated`, Measure's rotation too), so slow drift of
the machine (thermal, other jobs) falls on all modes alike; before the first timed run
each task runs once, untimed and short (first calls pay for lazy initialisation). Greedy
runs must reproduce the reference token for token (:func:`check_parity`).

A task runs an arm (:class:`Measured`): a local precision pair on an engine
(:class:`mtp_viz.measure.arms.Arm`), a peer server (:class:`mtp_viz.measure.peers.PeerArm`),
Measure's pair (:class:`mtp_viz.measure.runner.Runner`) or an engine beside it
(:class:`mtp_viz.measure.compare.PlainArm`). Each returns its records placed: what ran,
in which precisions, on which engine; the session adds where (prompt, repeat).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from mtp_viz.prompts import Prompt
from mtp_viz.sources.base import WARM_UP_TOKENS

from .records import AUTOREGRESSIVE, REFERENCE, SPECULATIVE, Record, RunKey, Setting


class Measured(Protocol):
    """What a task runs: one arm of a bench or a Measure; ``local``: it runs on this
    machine's engine (a peer runs on its server)."""
    local: bool

    def run(self, mode: str, prompt: str, setting: Setting | None = None, n: int | None = None
            ) -> tuple[Record, list | None]:
        """One timed run of ``mode`` (``n`` new tokens, else the arm's own): its record,
        placed (its mode as the arm ran it, its engine, precisions and prompt length), and
        its events where kept."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Task:
    """One kind of run a bench, or a Measure, repeats on every prompt."""
    mode: str
    arm: Measured
    setting: Setting | None = None

    def run(self, prompt: str, n: int | None = None) -> tuple[Record, list | None]:
        return self.arm.run(self.mode, prompt, self.setting, n)


def rotated(todo: Sequence[Task], turn: int) -> list[Task]:
    """The tasks in the order turn ``turn`` runs them: shifted one place a turn, so each
    goes first as often as the others and slow drift of the machine falls on all alike
    (the bench's turns are prompts within repeats; Measure's, its repeats)."""
    shift = turn % len(todo)
    return list(todo[shift:]) + list(todo[:shift])


def tasks(arms: Sequence[Any], settings: Sequence[Setting], greedy: bool, peers: Sequence[Any] = ()) -> list[Task]:
    """One plain run per distinct target, then each arm's reference (greedy, constant
    schedules, where transformers runs the pair) and its settings, then each peer's run
    (:mod:`.peers`)."""
    plain = {(a.precision.target, a.engine): a for a in arms}
    out = [Task(AUTOREGRESSIVE, a) for a in plain.values()]
    for a in arms:
        if greedy and a.has_reference and a.baseline:  # transformers' run: one per pair, not per engine
            out += [Task(REFERENCE, a, s) for s in settings if s.schedule == "constant"]
        out += [Task(SPECULATIVE, a, s) for s in settings]
    return out + [Task(p.mode, p) for p in peers]


@dataclass
class Runs:
    """What a bench's runs gave: their records, each run's events by kind, and the greedy
    runs that differ from transformers' (where parity is enforced)."""
    records: list[Record] = field(default_factory=list)
    events: dict[RunKey, list] = field(default_factory=dict)   # key -> [(prompt, repeat, events)]
    mismatches: int = 0


def interleaved(arms: Sequence[Any], settings: Sequence[Setting], prompts: Sequence[Prompt], repeats: int,
                greedy: bool, n: int, *, peers: Sequence[Any] = (), done: Callable[[], None] = lambda: None,
                warn: Callable[[str], None] = lambda line: None) -> Runs:
    """Every task on every prompt (``peers``' too), ``repeats`` times, rotated; ``done``
    after each timed run (a progress bar's tick), ``warn`` with each parity sentence."""
    todo = tasks(arms, settings, greedy, peers)
    for task in todo:
        task.run(prompts[0].text, min(n, WARM_UP_TOKENS))
    out = Runs()
    for r in range(repeats):
        for i, prompt in enumerate(prompts):
            ran: dict[RunKey, Record] = {}
            for task in rotated(todo, r * len(prompts) + i):
                rec, ev = task.run(prompt.text)
                rec = dataclasses.replace(rec, prompt_id=prompt.id, category=prompt.category, repeat=r)
                ran[rec.key] = rec
                if ev is not None:
                    out.events.setdefault(rec.key, []).append((prompt, r, ev))
                done()
            if greedy:
                for a in arms:
                    mine = {(k.mode, k.setting): k for k in ran if a.owns(k)}
                    checked, failures, lines = check_parity({m: ran[k] for m, k in mine.items()}, a.exact,
                                                            f"{a.label} on {prompt.id} (repeat {r})")
                    ran.update({mine[m]: rec for m, rec in checked.items()})
                    out.mismatches += failures
                    for line in lines:
                        warn(line)
            out.records.extend(ran.values())
    return out


def check_parity(runs: dict[tuple[str, str], Record], exact: bool = True, where: str = ""
                 ) -> tuple[dict[tuple[str, str], Record], int, list[str]]:
    """Each greedy speculative run must equal the reference with the same draft length.

    ``runs``: one prompt's runs by (mode, setting). Returns them marked with ``parity``
    (True/False, or None where no reference ran) and ``matches_autoregressive``, the
    number of failures, and a sentence per difference (``where``: which arm, prompt and
    repeat, for it). With ``exact=False`` (a target computing in bfloat16 or
    float16, where verification rounds differently from one token at a time) a
    difference is marked and reported, not counted."""
    ar = runs.get((AUTOREGRESSIVE, ""))
    out, failures, lines = dict(runs), 0, []
    for (mode, name), rec in runs.items():
        if mode != SPECULATIVE:
            continue
        rec = dataclasses.replace(rec, matches_autoregressive=ar is not None and rec.ids == ar.ids)
        ref = runs.get((REFERENCE, name))
        if ref is not None:
            rec = dataclasses.replace(rec, parity=rec.ids == ref.ids)
        if ref is not None and not rec.parity:
            failures += exact
            first = next((k for k, (a, b) in enumerate(zip(rec.ids, ref.ids)) if a != b),
                         min(len(rec.ids), len(ref.ids)))
            rec = dataclasses.replace(rec, first_difference=first)
            what = "MISMATCH" if exact else "differs (rounding of a non-float32 target, not a failure)"
            lines.append(f"{what} {name}{' ' + where if where else ''}: ours differs from "
                         f"transformers at new token {first}: {list(rec.ids[first:first + 5])} vs "
                         f"{list(ref.ids[first:first + 5])}")
        out[(mode, name)] = rec
    return out, failures, lines


__all__ = ["Measured", "Runs", "Task", "check_parity", "interleaved", "rotated", "tasks"]
