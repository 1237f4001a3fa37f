"""Which pair, as one value (runtime.pairs.PairSpec): made once by the gate from the form,
keyed the way the loader keys its pairs, and taken as it is by the loader and the status
line. And the app's handler object stays small."""
from __future__ import annotations

import ast

import pytest

from locations import ROOT
from mtp_viz.app.handlers import local
from mtp_viz.app.runtime import deploy, pairs, service
from mtp_viz.app.runtime.pairs import PairSpec
from mtp_viz.errors import UserError
from mtp_viz.sources.precision import Precision


def test_a_spec_is_a_frozen_value_with_the_loaders_key(tmp_path):
    (tmp_path / "m").mkdir()
    spellings = [PairSpec(str(tmp_path / "m")), PairSpec(str(tmp_path / "m") + "/")]
    assert spellings[0].key == spellings[1].key   # one pair however its folder is written
    assert PairSpec("tiny").key == (*pairs.pair_key("tiny", None), None, None, "eager")
    assert PairSpec("tiny", precision=Precision("int8")).key[2:] == ("int8", None, "eager")
    assert {PairSpec("tiny"), PairSpec.of("tiny", None, None, None)} == {PairSpec("tiny")}   # hashable, equal
    with pytest.raises(AttributeError):
        PairSpec("tiny").engine = "compiled"   # frozen


def test_of_reads_the_loose_values_the_loader_took():
    assert PairSpec.of("tiny") == PairSpec("tiny", None, Precision(), "eager")
    assert PairSpec.of("tiny", engine="compiled") == PairSpec("tiny", engine="compiled")
    with pytest.raises(UserError, match="Unknown engine 'warp'"):
        PairSpec.of("tiny", engine="warp")


def test_what_a_spec_asks_besides_the_defaults():
    plain, asked = PairSpec("tiny"), PairSpec("tiny", "d", Precision("int8", "float32"), "compiled")
    assert plain.load_keywords() == {} and plain.asked_words() == ""
    assert asked.load_keywords() == {"precision": Precision("int8", "float32"), "engine": "compiled"}
    assert asked.asked_words() == " in int8/float32, compiled"
    assert asked.weights == ("tiny", "d", Precision("int8", "float32")) == asked.on("eager").weights
    assert asked.on("eager").key != asked.key


def test_the_gate_makes_the_spec_the_loader_and_the_status_line_take():
    loader = service.PairLoader(lambda target, drafter, **asked: object())
    h = local.Handlers(loader, deploy.presets(loader.allow), ("tiny", None), cap=16, prompt_cap=64, empty_figures={})
    spec = h.gate.asked("tiny", "", "", "int8", "default", "compiled")
    assert spec == PairSpec(*h.gate.pick("tiny"), Precision("int8"), "compiled")
    assert h.gate.asked_by({"model": "tiny", "custom_target": "", "custom_drafter": "", "engine": "compiled"}) == \
        PairSpec(*h.gate.pick("tiny"), engine="compiled")
    assert h.gate.asked_by({"model": "tiny", "custom_target": "", "custom_drafter": "", "compile": True}) == \
        PairSpec(*h.gate.pick("tiny"))   # the switch the engine replaced names nothing past the links and the CLI
    assert loader.state(spec).status == service.Load.IDLE
    assert "in int8/default, compiled loads on first run" in h.gate.model_line(spec)
    assert loader.wait(spec, timeout=5).status == service.Load.READY
    assert "Ready: the bundled tiny pair" in h.gate.model_line(spec)
    assert loader.state(spec.on("eager")).status == service.Load.IDLE   # another engine: another pair


def _class_lengths(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {c.name: c.end_lineno - c.lineno + 1 for c in tree.body if isinstance(c, ast.ClassDef)}


def test_every_handler_object_of_the_app_is_under_150_lines():
    """Run's, the gate's, the recorded runs', the servers'…: helpers and formatting live
    beside them, not in them (issue 41's "largest handler object under 150 lines")."""
    lengths = {f"{p.name}:{name}": n for p in (ROOT / "mtp_viz" / "app" / "handlers").glob("*.py")
               for name, n in _class_lengths(p).items()}
    assert lengths["local.py:Handlers"] < 150 and lengths["gate.py:Gate"] < 150
    assert {k: n for k, n in lengths.items() if n >= 150} == {}


def _raw_state_comparisons(path):
    """(line, name) of each comparison with a loader state's plain name (``"ready"``…)."""
    names = {s.value for s in service.Load}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
                found += [(node.lineno, i.value) for i in items if isinstance(i, ast.Constant) and i.value in names]
    return found


def test_the_app_reads_a_pairs_state_through_the_loaders_enum():
    """``Load.READY``, never ``"ready"``: a renamed state cannot leave a comparison behind."""
    found = {str(p.relative_to(ROOT)): _raw_state_comparisons(p) for p in (ROOT / "mtp_viz" / "app").rglob("*.py")}
    assert {p: f for p, f in found.items() if f} == {}
