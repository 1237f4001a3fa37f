"""The line every study carries: what torch's build says of its BLAS, and what the CPU says
of itself, never a guess where a field is missing."""
from mtp_viz.measure import machine

CONFIG = """PyTorch built with:
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64 architecture applications
  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)
  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release
"""


def test_blas_and_onednn_come_from_torchs_build_text():
    assert machine._blas(CONFIG) == {"blas": "mkl", "mkl": "2024.2", "onednn": "3.12.0"}
    assert machine._blas("BLAS_INFO=open") == {"blas": "open"}


def test_the_line_names_the_cpu_isa_threads_blas_and_load():
    m = {"cpu": "AMD EPYC", "isa": ["avx2", "avx512f"], "cores": 2, "torch_threads": 1, "blas": "mkl",
         "mkl": "2024.2", "onednn": "3.12.0", "torch": "2.13.0", "transformers": "5.24.0", "load": 0.5}
    assert machine.line(m) == ("AMD EPYC (avx2, avx512f), 2 cores, 1 torch thread, BLAS mkl 2024.2, oneDNN 3.12.0, "
                               "torch 2.13.0, transformers 5.24.0, load 0.5")
    assert "GPU" not in machine.line(m) and "load" not in machine.line({**m, "load": None})


def test_this_machine_reads_itself():
    m = machine.machine()
    assert m["cores"] >= 1 and m["cpu"] and set(m["isa"]) <= set(machine.ISA)
    assert machine.line(m).startswith(m["cpu"])
