"""/metrics in memory in proportion to the page: the parser holds at most ~10x a page's
bytes however its labels are written, and the dashboard's history keeps counts, not every
scrape's model names. Before: one 4 MiB label grew the process by 683 MB (the label regex
backtracking), and 27,000 model names were kept in each of 900 history entries."""
import tracemalloc

import pytest

from mtp_viz.app.handlers import servers as server_handlers
from mtp_viz.sources import prometheus

PAGE = 4 * 1024 * 1024 - 4096
COUNTERS = 'vllm:spec_decode_num_drafts_total{model_name="m"} 3\n'


def peak(call):
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# the escaped labels (the slower parses) in the slow tier, the plain one in the quick tier
@pytest.mark.parametrize("label", ["x", pytest.param('x\\"', marks=pytest.mark.slow),
                                   pytest.param("x\\\\", marks=pytest.mark.slow)],
                         ids=["plain", "quotes", "backslashes"])
def test_one_long_label_is_parsed_in_linear_memory(label):
    long = label * ((PAGE - 100) // len(label))
    page = COUNTERS + f'info{{build="{long}"}} 1\n'
    samples, most = peak(lambda: prometheus.parse(page))
    assert most < 10 * len(page), f"{most / len(page):.1f}x the page"
    assert len(samples[1].label("build")) == 1024
    assert prometheus.spec_decode(samples).drafts == 3


def test_many_model_names_keep_sixteen_and_a_count():
    names = 27_000
    page = COUNTERS + "".join(f'vllm:generation_tokens_total{{model_name="model-{i:06d}-{"n" * 100}"}} 1\n'
                              for i in range(names))
    counters, most = peak(lambda: prometheus.spec_decode(prometheus.parse(page)))
    assert most < 10 * len(page), f"{most / len(page):.1f}x the page"
    assert len(counters.models) == 16 and counters.model_count == names + 1
    watch = server_handlers.Watch("http://x", 0.0, type("Source", (), {"counters": lambda self, url: counters})())
    for _ in range(3):
        server_handlers.ServerHandlers.poll(watch)
    assert [c.models for _, c in watch.history] == [(), (), ()]
    assert {c.drafts for _, c in watch.history} == {3}


@pytest.mark.parametrize("page", [
    "m{" + ",".join(f'l{i}="v"' for i in range(65)) + "} 1\n",     # 64 labels a sample at most
    "m 1\n" * 100_001,                                                # 100,000 samples a page at most
    'm{a="never ends} 1\n',
    "m{" + "a" * 5000 + '="v"} 1\n',
], ids=["65 labels", "100,001 samples", "a value that never ends", "a 5,000-character label name"])
def test_pages_past_the_bounds_are_not_metrics_pages(page):
    with pytest.raises(ValueError):
        prometheus.parse(page)
