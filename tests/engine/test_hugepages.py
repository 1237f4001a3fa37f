"""The compiled engine's weights in huge pages: collapsed in place, values unchanged."""
import sys
from pathlib import Path

import pytest
import torch

from mtp_viz.engine import hugepages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def anon_huge_kb() -> int:
    line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("AnonHugePages"))
    return int(line.split()[1])


@pytest.mark.skipif(not sys.platform.startswith("linux") or not THP.exists() or "[never]" in THP.read_text(),
                    reason="Linux with transparent huge pages")
def test_collapse_in_place_keeps_values():
    w = torch.randn(4096, 1536)          # 25 MB: at least 11 whole 2 MB pages inside it
    before, ptr, huge0 = w.clone(), w.data_ptr(), anon_huge_kb()
    done = hugepages.collapse([w, w[:10]])   # a view of the same storage counts once
    assert done >= 11 * hugepages.HUGE and done % hugepages.HUGE == 0
    assert done <= w.numel() * 4
    assert w.data_ptr() == ptr and torch.equal(w, before)
    assert anon_huge_kb() - huge0 >= done // 1024 // 2   # the system sees them (other memory may move)


def test_collapse_skips_what_it_cannot():
    assert hugepages.collapse([torch.ones(10), torch.empty(0)]) == 0
