"""Which pair: the models, the precision asked of each and the engine, as one value.

The gate (:class:`mtp_viz.app.handlers.gate.Gate`) makes a :class:`PairSpec` once from
the form's fields, each checked; the loader (:class:`.service.PairLoader`), the handlers
and the status line take it as it is. No torch here.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mtp_viz.engine import engines
from mtp_viz.sources.precision import Precision
from mtp_viz.sources.presets import PRESETS, canonical, resolve


def pair_key(target: str, drafter: str | None) -> tuple[str, str | None]:
    """One key per pair of models however they are written (see
    :func:`mtp_viz.sources.presets.canonical`): ``tiny``, its folder and ``./its/folder/``
    are one pair, and a preset's drafter is its own."""
    target_spec, preset_drafter = resolve(target.strip())
    drafter = drafter or preset_drafter
    if drafter and drafter.strip().lower() in PRESETS:
        drafter = resolve(drafter.strip())[1]
    return canonical(target_spec), canonical(drafter) if drafter else None


@dataclass(frozen=True)
class PairSpec:
    """A pair as asked: ``target`` and ``drafter`` as the form or a preset names them (a
    preset key, hub id or folder; None: the target's own assistant, if any),
    ``precision`` (``Precision()``: the deployment's default, ``MTP_VIZ_DTYPE`` or the
    device's) and ``engine``, a name of :data:`mtp_viz.engine.engines.ENGINES`."""
    target: str
    drafter: str | None = None
    precision: Precision = Precision()
    engine: str = field(default_factory=engines.default_engine)

    def __post_init__(self) -> None:
        engines.check_engine(self.engine)   # a spec names an engine of the table, or is not made

    @classmethod
    def of(cls, target: str, drafter: str | None = None, precision: Precision | None = None,
           engine: str | None = None) -> "PairSpec":
        """From loose values, as the loader's methods took them: ``precision`` None for
        the default, ``engine`` None for the table's first."""
        return cls(target, drafter, precision or Precision(), engine or engines.default_engine())

    @property
    def key(self) -> tuple:
        """The loader's key: the models however they are written (:func:`pair_key`,
        so ``tiny``, its folder and ``./its/folder/`` are one pair), the precision asked of
        each, and the engine."""
        return (*pair_key(self.target, self.drafter), self.precision.target, self.precision.drafter, self.engine)

    @property
    def weights(self) -> tuple:
        """(target, drafter, precision): the same models in the same precisions on any
        engine (what a Measure's decoders are kept beside, :meth:`.runs.Session.remember`)."""
        return self.target, self.drafter, self.precision

    def on(self, engine: str) -> "PairSpec":
        """The same models in the same precisions on ``engine``."""
        return replace(self, engine=engine)

    def load_keywords(self) -> dict[str, Any]:
        """What the loader's work is passed besides (target, drafter): ``precision`` and
        ``engine`` only where not the defaults, so a load function that takes neither
        (a test's) serves the default pair."""
        asked: dict[str, Any] = {"precision": self.precision} if self.precision != Precision() else {}
        if self.engine != engines.default_engine():
            asked["engine"] = self.engine
        return asked

    def asked_words(self) -> str:
        """What was asked besides the defaults, as the status line says it after the
        pair's name: " in int8/float32, compiled", or ""."""
        return (f" in {self.precision.label}" if self.precision != Precision() else "") + \
            (f", {self.engine}" if self.engine != engines.default_engine() else "")


__all__ = ["PairSpec", "pair_key"]
