"""Notebooks run on a real Jupyter kernel (nbclient + ipykernel), as a reader's are."""
from __future__ import annotations

import os
from pathlib import Path

from locations import ROOT

TIMEOUT = 600

# a cell that loads the bundled pair as a reader loads theirs, as ``pair``
TINY_PAIR = """
import json, torch, mtp_viz
from transformers import AutoModelForCausalLM, AutoTokenizer
from mtp_viz.sources.presets import resolve
torch.set_num_threads(1)
TARGET, ASSISTANT = resolve("tiny")
target_model = AutoModelForCausalLM.from_pretrained(TARGET)
assistant_model = AutoModelForCausalLM.from_pretrained(ASSISTANT)
pair = mtp_viz.from_models(target_model, assistant_model, AutoTokenizer.from_pretrained(TARGET))
"""


def execute(nb, folder: Path):
    """Run every cell of ``nb`` (an nbformat notebook) in a fresh python3 kernel whose
    working folder is ``folder``; returns the notebook with its outputs (a cell's
    ``update_display_data`` already applied to the output it updates)."""
    import nbclient
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "MTP_VIZ_THREADS": "1"}
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(folder)}})
    return client.execute(env=env)  # the kernel's environment: this checkout's mtp_viz, offline


def outputs(nb, kind: str) -> list:
    """Every output of ``kind`` (a MIME type, or "stream"/"error"), in cell order."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if kind in ("stream", "error"):
                if out.output_type == kind:
                    found.append(out)
            elif kind in out.get("data", {}):
                found.append(out.data[kind])
    return found


def code_cell(source: str):
    import nbformat
    return nbformat.v4.new_code_cell(source)
