"""The engine's own CPU kernel (``torch.ops.mtp_viz.rows``, mtp_viz/engine/kernels): x·Wᵀ for
1 to 16 rows in float32, bfloat16 and int8 weights on every instruction set this CPU has,
each output's value independent of the number of rows (what makes a verification's logits
the plain step's), and the compiled engine's linear layers on it inside a graph."""
from __future__ import annotations

import pytest
import torch

from mtp_viz.engine import kernels, static

pytestmark = pytest.mark.skipif(not kernels.load(), reason="the kernel needs an x86-64 CPU with AVX2 and a compiler")

ISAS = [n for n in kernels.ISAS.values() if n <= (kernels.isa() if kernels.load() else 0)]


def _weights(kind: str, n: int, k: int):
    """(W as the kernel takes it, scale or None, W in float64 for the reference)."""
    g = torch.Generator().manual_seed(n * 1000 + k)
    w = torch.randn(n, k, generator=g)
    if kind == "float32":
        return w, None, w.double()
    if kind == "bfloat16":
        w = w.bfloat16()
        return w, None, w.double()
    q = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, generator=g) / 64 + 1e-3
    return q, scale, q.double() * scale.double()[:, None]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("kind", ["float32", "bfloat16", "int8"])
def test_rows_is_x_times_w_transposed_and_each_output_is_the_same_for_any_number_of_rows(isa, kind):
    n, k = 200, 96 + 7   # rows of W past whole tiles and blocks; K past whole vectors (and AMX's 32)
    for k in (96, 103):
        w, scale, ref_w = _weights(kind, n, k)
        x = torch.randn(16, k, dtype=torch.bfloat16 if kind == "bfloat16" else torch.float32)
        bias = torch.randn(n)
        ref = x.double() @ ref_w.T + bias.double()
        all_rows = torch.ops.mtp_viz.rows(x, w, scale, bias, isa)
        assert all_rows.shape == (16, n) and all_rows.dtype == x.dtype
        tol = {"atol": 1e-3, "rtol": 1e-4} if x.dtype == torch.float32 else {"atol": 0.3, "rtol": 1e-2}
        torch.testing.assert_close(all_rows.double(), ref, **tol)
        for m in (1, 2, 5, 9, 15):   # the first m rows alone: bit for bit the same outputs
            assert torch.equal(torch.ops.mtp_viz.rows(x[:m], w, scale, bias, isa), all_rows[:m]), (k, m)


def test_rows_refuses_what_it_cannot_compute():
    w = torch.randn(8, 32)
    with pytest.raises(RuntimeError, match="1 to 16 rows"):
        torch.ops.mtp_viz.rows(torch.randn(17, 32), w, None, None, ISAS[0])
    with pytest.raises(RuntimeError, match="disagree on K"):
        torch.ops.mtp_viz.rows(torch.randn(2, 31), w, None, None, ISAS[0])
    with pytest.raises(RuntimeError, match="need a scale"):
        torch.ops.mtp_viz.rows(torch.randn(2, 32), w.to(torch.int8), None, None, ISAS[0])


def test_the_twins_linear_layers_run_the_kernel_inside_a_graph_and_nn_linear_outside():
    """float32, bfloat16 and torchao's int8 weight-only layers: inside a compiled graph a product
    of up to 16 rows is the kernel (no BLAS call) and equals torchao's or ATen's to rounding;
    17 rows go back to ATen; outside a graph the layer is what it was. int8 stays on the kernel
    at any number of rows, in a graph or not (torchao's CPU product widens all of W per call),
    each row's outputs what that row alone gives."""
    torchao = pytest.importorskip("torchao.quantization")

    class Holder(torch.nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer, self.config = layer, type("Config", (), {})()

        def forward(self, x):
            return self.layer(x)

    for kind in ("float32", "bfloat16", "int8"):
        torch.manual_seed(0)
        model = Holder(torch.nn.Linear(64, 40))
        dtype = torch.bfloat16 if kind == "bfloat16" else torch.float32
        model.to(dtype)
        if kind == "int8":
            torchao.quantize_(model, torchao.Int8WeightOnlyConfig())
        fast = static.twin(model)
        torch._dynamo.reset()   # the same forward's code, compiled again for each kind
        assert type(fast.layer) is static.StreamedLinear and fast.layer.isa == kernels.isa()
        assert (fast.layer.int8 is not None) == (kind == "int8")
        assert fast.layer.weight is model.layer.weight   # shared, not copied
        graph = torch.compile(fast, fullgraph=True, dynamic=False)
        for rows, on_kernel in ((1, True), (5, True), (16, True), (17, kind == "int8"), (40, kind == "int8")):
            x = torch.randn(1, rows, 64, dtype=dtype)
            with torch.no_grad():
                want = model(x)
                eager = fast(x)
                if kind == "int8":   # the kernel, 16 rows a call: a prompt's last row is a step's row
                    torch.testing.assert_close(eager, want)
                    assert torch.equal(eager[:, -1:], fast(x[:, -1:]))
                else:
                    assert torch.equal(eager, want)   # eager: the layer's own product
                got = graph(x)
                with torch.profiler.profile() as prof:
                    graph(x)
            names = {e.name for e in prof.events()}
            assert ("mtp_viz::rows" in names) == on_kernel, (kind, rows, names & {"mtp_viz::rows", "aten::mm"})
            tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
            torch.testing.assert_close(got.float(), want.float(), **tol)
