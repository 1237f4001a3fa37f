"""`mtp-viz profile --engine llama.cpp` against a real llama-server on the bundled pair (marked
``llamacpp``; llama-server from scripts/llamacpp.sh, see tests/real_llamacpp.py): the servers are
started and stopped by the profile, every cost is read from the server's own timings, the
verifications grow with their width, and each measured MTP run sits beside its prediction."""
import json
import math

import pytest

pytest.importorskip("gguf")

from mtp_viz.cli.main import main  # noqa: E402
from mtp_viz.sources.llamacpp.gguf import export_pair  # noqa: E402
from real_llamacpp import kept_folder, llama_server  # noqa: E402

pytestmark = pytest.mark.llamacpp


def test_the_profile_measures_llamacpp_and_checks_its_prediction(tmp_path, capsys):
    server = llama_server()
    export_pair("tiny", None, tmp_path / "gguf", "f32")   # the bundled pair, its drafter with it
    out = tmp_path / "out"
    assert main(["profile", "--target", "tiny", "--engine", "llama.cpp", "--gguf", str(tmp_path / "gguf"),
                 "--llama-server", server, "--repeats", "2", "--max-new-tokens", "32", "--max-draft-tokens", "4",
                 "--draft-tokens", "4", "--alphas", "0.7", "--out", str(out)]) == 0
    result = json.loads((out / "profile.json").read_text())
    c = result["costs"]
    assert result["engine"] == "llama.cpp f32" and result["meta"]["gguf_type"] == "f32"
    assert sorted(int(w) for w in c["verify"]) == [1, 2, 3, 4, 5]
    assert all(0 < c["verify"][str(w)] < 1 for w in range(1, 6)) and 0 < c["plain"] < 1
    assert c["verify"]["5"] > c["verify"]["1"]          # five tokens cost more than one
    assert c["draft"] is not None and 0 <= c["draft"] < c["plain"]   # the assistant is smaller than the target
    labels = [k["label"] for k in result["checks"]]
    assert labels == ["its own drafter", "set acceptance 0.7"]   # the bundled pair's weights are real
    for k in result["checks"]:
        assert k["draft_tokens"] == 4 and 1 <= k["tau"] <= 5 and 0 <= k["realized_alpha"] <= 1
        assert math.isfinite(k["predicted"]) and 0.3 < k["measured_over_predicted"] < 3
    md = (out / "profile.md").read_text()
    assert "Cost profile on llama.cpp f32: tiny" in md and "Measured on llama.cpp f32" in md
    # the answer first: MTP over llama.cpp's own plain decoding at the chat figure, labelled E4B's
    assert md.splitlines()[2].startswith("On this machine, TINY with its assistant on llama.cpp f32: MTP with 4")
    assert "published for E4B on MT-Bench" in md.splitlines()[2]
    assert any(r["id"] == "vllm-e4b-mt-bench" and not r["same_model"] for r in result["published"])
    assert str(tmp_path) not in md and str(kept_folder()) not in md   # no paths of this machine's
