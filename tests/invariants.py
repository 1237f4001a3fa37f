"""The contract every event stream keeps (docs/events.md), checked on a finished run:
the engine's tests and its property tests run it on every stream they generate."""
from __future__ import annotations

from mtp_viz.engine.events import Accepted, Bonus, Done, Drafted, Rejected, Start, Step, Token


def generated(events):
    return [e.token_id for e in events if isinstance(e, (Accepted, Bonus, Token))]


def check_invariants(events, max_new_tokens):
    assert isinstance(events[0], Start) and isinstance(events[-1], Done)
    done = events[-1]
    assert list(done.generated_ids) == generated(events)
    assert done.new_tokens <= max_new_tokens
    steps = [e for e in events if isinstance(e, Step)]
    assert done.target_forwards == len(steps)
    # per step: drafted* accepted* rejected* bonus? step, indices in order
    order = {"drafted": 0, "accepted": 1, "token": 1, "rejected": 2, "bonus": 3, "step": 4}
    cur, rank, counts = [], -1, {}
    for e in events[1:-1]:
        r = order[e.type]
        assert r >= rank, f"{e.type} after rank {rank}"
        rank = r
        counts[e.type] = counts.get(e.type, 0) + 1
        cur.append(e)
        if isinstance(e, Step):
            drafted = [x for x in cur if isinstance(x, Drafted)]
            acc = [x for x in cur if isinstance(x, Accepted)]
            rej = [x for x in cur if isinstance(x, Rejected)]
            assert [x.index for x in drafted] == list(range(len(drafted)))
            assert [x.index for x in acc] == list(range(len(acc)))
            assert all(x.step == e.step for x in drafted + acc + rej)
            assert e.draft_tokens == len(drafted)
            assert e.accepted == len(acc) and e.agreed >= e.accepted  # one meaning everywhere
            if not e.cut:
                assert len(acc) + len(rej) == len(drafted) and e.agreed == e.accepted
            # rejected from the first disagreement on: an end-of-sequence token among the agreed drafts
            # cuts the step after it, and the agreed drafts past the cut are neither kept nor rejected
            assert [x.index for x in rej] == list(range(e.agreed, e.agreed + len(rej)))
            for a in acc + rej:
                assert a.token_id == drafted[a.index].token_id
            cur, rank = [], -1
    check_experts(events[0], steps)
    return steps


def check_experts(start, steps):
    """Counted experts (docs/events.md): one count per MoE layer on every step; a plain
    step's single token goes to exactly top_k experts, a forward over n tokens to at
    least top_k and at most min(num_experts, top_k · n)."""
    moe = start.settings.get("experts") or {}
    if not moe.get("counted"):
        assert all(not s.experts_per_layer for s in steps)
        return
    k, experts = moe["top_k"], moe["num_experts"]
    for s in steps:
        tokens = start.prompt_tokens if s.step == 1 else s.draft_tokens + 1
        assert len(s.experts_per_layer) == moe["layers"]
        assert all(k <= n <= min(experts, k * tokens) for n in s.experts_per_layer), s
