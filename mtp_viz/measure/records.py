"""What a measurement is made of: a setting, one timed run's record, and the key that
groups runs of one kind. Frozen values: a record is made once, and a later finding (its
parity with transformers, say) makes a new one."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

# Modes of a timed run: the sources' two, and transformers' own assisted generate.
SPECULATIVE, AUTOREGRESSIVE, REFERENCE = "speculative", "autoregressive", "reference"
# bench.json's local runs call our engine's speculative runs "ours" (beside transformers'
# "reference"), a name older than the sources' modes and kept as the file's contract.
LOCAL_LABELS = {SPECULATIVE: "ours"}


@dataclass(frozen=True)
class Setting:
    """One draft-length setting of a bench: a schedule and its (first) length."""
    schedule: str
    draft_tokens: int   # constant draft length, or the adaptive schedule's first length

    @property
    def name(self) -> str:
        return f"{self.schedule}-{self.draft_tokens}"


def settings_grid(draft_tokens_list: Sequence[int], schedules: Sequence[str]) -> list[Setting]:
    """The settings a bench runs: the constant schedule at every length, each adaptive
    schedule once, starting from the median length (it finds its own from there)."""
    draft_tokens_list = sorted(set(draft_tokens_list))
    start = draft_tokens_list[len(draft_tokens_list) // 2]
    out: list[Setting] = []
    for s in schedules:
        out += [Setting(s, g) for g in draft_tokens_list] if s == "constant" else [Setting(s, start)]
    return out


@dataclass(frozen=True)
class Record:
    """One timed run, as bench.json's ``runs`` lists it."""
    mode: str                  # speculative | autoregressive | reference (transformers')
    seconds: float             # the run's time on its clock (`clock`; a server's: request to last chunk)
    new_tokens: int
    target_forwards: int
    ids: tuple[int, ...] = ()  # the generated tokens, for the parity checks (not written)
    setting: str = ""          # speculative and reference: "<schedule>-<γ>"
    schedule: str = ""
    draft_tokens: int = 0
    prompt_id: str = ""
    category: str = ""
    repeat: int = 0
    prompt_tokens: int | None = None
    cpu_seconds: float | None = None       # process CPU time of the call (local)
    prefill_seconds: float | None = None   # step 1's time (our engine's modes)
    parity: bool | None = None             # speculative: equals transformers' output (greedy; None: no reference)
    first_difference: int | None = None    # where it first differs, when it does
    matches_autoregressive: bool | None = None
    same_tokens: bool | None = None        # server: both servers wrote the same tokens (greedy)
    target_precision: str | None = None    # local: what each model ran in (autoregressive: the target only)
    drafter_precision: str | None = None
    engine: str | None = None              # local: "eager" or "compiled" (engine.compiled)
    clock: str = "wall"                    # what `seconds` reads: "cpu" (the engine thread's) or "wall"

    @property
    def key(self) -> "RunKey":
        return RunKey(self.mode, self.setting, self.target_precision, self.drafter_precision, self.engine)

    def as_dict(self, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """The fields that apply to this run (unset ones and the tokens left out);
        ``labels`` renames modes as the file names them (:data:`LOCAL_LABELS`)."""
        out = {k: v for k, v in asdict(self).items() if v is not None and k != "ids"}
        out["mode"] = (labels or {}).get(self.mode, self.mode)
        return out


@dataclass(frozen=True)
class RunKey:
    """Which runs belong together: one mode and setting of one precision pair on one engine
    (autoregressive runs: the target's precision only; reference runs: no engine)."""
    mode: str
    setting: str = ""
    target_precision: str | None = None
    drafter_precision: str | None = None
    engine: str | None = None


__all__ = ["AUTOREGRESSIVE", "LOCAL_LABELS", "REFERENCE", "Record", "RunKey", "SPECULATIVE", "Setting",
           "settings_grid"]
