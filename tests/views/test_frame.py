"""The frame-to-outputs adapter beside Frame: one output per text part and chart, in the
page's order, None where the frame leaves an output as it is."""
from mtp_viz.views.frame import OUTPUTS, PLOTS, SLOTS, Frame


def test_parts_are_the_outputs_in_order_none_where_left_as_they_are():
    fig = {"data": []}
    f = Frame(status="s", model_status="m", figures={PLOTS[0]: fig})
    parts = f.parts()
    assert len(parts) == len(OUTPUTS) == len(SLOTS) + len(PLOTS)
    by_name = dict(zip(OUTPUTS, parts))
    assert by_name["status"] == "s" and by_name["model_status"] == "m" and by_name[PLOTS[0]] is fig
    assert all(v is None for k, v in by_name.items() if k not in ("status", "model_status", PLOTS[0]))
    assert {k for k, v in by_name.items() if v is not None} == f.shown()


def test_the_app_maps_what_a_frame_leaves_to_gradios_skip_and_nothing_else():
    import gradio as gr

    from mtp_viz.app.handlers.frames import outputs
    out = outputs(Frame(status="s"), sess="the session")
    assert len(out) == len(OUTPUTS) + 2 and out[OUTPUTS.index("status")] == "s" and out[-2] == "the session"
    skip = gr.skip()
    assert out[-1] == skip and out[OUTPUTS.index("caption")] == skip
