"""The compiled engine's weights in huge pages: collapsed in place, values unchanged."""
import sys
from pathlib import Path

import pytest
import torch

from mtp_viz.engine import hugepages

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_kb_at(address: int) -> int:
    """AnonHugePages of this process's mapping that holds ``address`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:   # a mapping's first line: start-end perms ...
            lo, hi = (int(v, 16) for v in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(not sys.platform.startswith("linux") or not THP.exists() or "[never]" in THP.read_text(),
                    reason="Linux with transparent huge pages")
def test_collapse_in_place_keeps_values():
    w = torch.randn(4096, 1536)          # 25 MB: at least 11 whole 2 MB pages inside it
    before, ptr = w.clone(), w.data_ptr()
    done = hugepages.collapse([w, w[:10]])   # a view of the same storage counts once
    assert done >= 11 * hugepages.HUGE and done % hugepages.HUGE == 0
    assert done <= w.numel() * 4
    assert w.data_ptr() == ptr and torch.equal(w, before)
    assert huge_kb_at(ptr) * 1024 >= done   # the kernel holds them in huge pages (this mapping, not the system's)


def test_collapse_skips_what_it_cannot():
    assert hugepages.collapse([torch.ones(10), torch.empty(0)]) == 0
