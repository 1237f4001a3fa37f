"""Decoding at a real Gemma 4 shape, ours beside llama.cpp, every decoder in one interleaved run.

    python benchmarks/real_scale.py --target e2b --gguf-bf16 DIR --gguf-q8 DIR [--threads 1,2] [--out DIR]

The target is built at its real shape with random weights (``load_pair(..., weights="random")``)
and timed greedy beside llama.cpp's ``llama-server`` on the same shape exported by ``mtp-viz
gguf --weights random`` (bf16 and q8_0). One block per llama.cpp type, each beside ours in the
precision that stores weights alike: bf16 beside our bfloat16, q8_0 beside our int8 (torchao's
weight-only, one scale a row, computed in float32). A block loads its pair once (only one
pair and one server resident: both precisions and a server do not fit in 24 GB), compiles it,
and at each thread count starts its server and times, in turns rotated each repeat: ours eager
and compiled plain, the compiled engine with the MTP drafter at each set acceptance α (γ
drafts a step, each kept with probability α: every forward real, since a random drafter's own
drafts are noise), transformers' ``generate`` where asked, and llama.cpp. Every rate is
tokens ÷ wall seconds of the whole request (prompt included), medians of repeats; llama.cpp's
own decode-only rate is kept beside it.

The memory bandwidth each plain decoder reaches is the weights a plain step reads (every
parameter but the lookup tables a step reads one row of: the per-layer embeddings, and the
input embedding where the head is not tied to it, as in int8; in the bytes each stores them
in) ÷ seconds per token, beside this machine's own: a plain streaming read (a sum) of a
buffer larger than the caches, at the same threads. Writes real_scale.json
and real_scale.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def stream_bandwidth(threads: int, gb: float = 2.0, repeats: int = 5) -> float:
    """Bytes per second of a sum over a float32 buffer of ``gb`` GB (median of repeats)."""
    import torch
    torch.set_num_threads(threads)
    x = torch.ones(int(gb * 1e9 / 4), dtype=torch.float32)
    x.sum()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t)
    return x.numel() * 4 / statistics.median(times)


def prompt_ids(args, config) -> list[int]:
    """The prompt every decoder is given: ``args.prompt_tokens`` ids drawn with a fixed seed
    from the vocabulary (``config``: the target's; None: the shape's, read without a build)."""
    import torch

    from mtp_viz.engine.config import text_config
    if config is None:
        from mtp_viz.sources.shapes import shape
        config = shape(args.target).target
    g = torch.Generator().manual_seed(7)
    return torch.randint(3, text_config(config).vocab_size, (args.prompt_tokens,), generator=g).tolist()


def serve(server: str, gguf: Path, threads: int, port: int, log: Path, extra: list[str] = ()):
    cmd = [server, "-m", str(gguf / "target.gguf"), "-t", str(threads), "-tb", str(threads), "-c", "1024",
           "-np", "1", "--host", "127.0.0.1", "--port", str(port), *extra]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(900):
        try:
            OPENER.open(url + "/health", timeout=5).read()
            return proc, url
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"llama-server exited; see {log}")
            time.sleep(1)
    raise SystemExit(f"llama-server did not start; see {log}")


def llamacpp(url: str, ids: list[int], n: int) -> dict:
    body = json.dumps({"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1, "cache_prompt": False,
                       "ignore_eos": True, "return_tokens": True}).encode()
    req = urllib.request.Request(url + "/completion", body, {"Content-Type": "application/json"})
    t = time.perf_counter()
    out = json.loads(OPENER.open(req, timeout=3600).read())
    wall = time.perf_counter() - t
    return {"seconds": wall, "tokens": len(out.get("tokens") or []) or n, "ids": out.get("tokens") or [],
            "decode_tps": out.get("timings", {}).get("predicted_per_second")}


BLOCKS = {"bf16": "bfloat16", "q8_0": "int8", "f32": "float32"}   # llama.cpp's type -> ours, weights alike
BYTES = {"bf16": 2, "q8_0": 34 / 32, "f32": 4}   # llama.cpp's bytes a weight (q8_0: 34 for a block of 32)
APART = {"f32"}   # blocks whose pair and server do not fit in 24 GB together: :func:`apart`


def study(args, pair, precision: str, llama_type: str, folder: Path | None, server: str, out: Path,
          results: dict, turn: int = 0) -> None:
    """One block: ``pair`` in ``precision`` beside llama.cpp's ``llama_type``, at each thread count.
    ``folder`` None: ours alone (a child of :func:`apart`), its repeats rotated from ``turn``;
    the runs and the compiled plain run's tokens go in ``results["runs"]`` for the parent."""
    import torch

    from mtp_viz.engine import loop
    from mtp_viz.engine.config import text_config
    from mtp_viz.engine.drafters.scripted import ScriptedDrafter
    from mtp_viz.measure import machine
    from mtp_viz.measure.precisions import step_bytes, step_params
    from mtp_viz.sources.settings import RunSettings
    n, repeats, gamma = args.new_tokens, 1 if args.child else args.repeats, args.draft_tokens
    vocab = text_config(pair.target.config).vocab_size
    ids = prompt_ids(args, pair.target.config)
    t = time.perf_counter()
    plan = RunSettings("x" * len(ids), modes=("speculative", "autoregressive"), max_new_tokens=n, chat=False,
                       drafter="mtp", draft_tokens=gamma)
    compiled_pair = pair.on("compiled", settings=[plan])   # its graphs now, before any timing
    compile_s = time.perf_counter() - t
    print(f"{precision}: compiled in {compile_s:.0f} s ({compiled_pair.compile_note or compiled_pair.engine})",
          file=sys.stderr)
    meta = results["meta"].setdefault("blocks", {})
    meta[llama_type] = {"precision": precision, "step_bytes": step_bytes(pair.target), "compile_seconds": compile_s,
                        "compile_note": compiled_pair.compile_note, "kernel": kernel_line(),
                        # llama.cpp's (its norms, a sliver, aside)
                        "llama_step_bytes": step_params(pair.target) * BYTES[llama_type]}

    def timed(fn):
        t = time.perf_counter()
        done = list(fn())[-1]
        return {"seconds": time.perf_counter() - t, "tokens": done.new_tokens, "ids": list(done.generated_ids)}

    def plain(p):
        return lambda: timed(lambda: loop.autoregressive(p.decoder, ids, max_new_tokens=n))

    script = plain(compiled_pair)()["ids"]   # the compiled target's own greedy path, untimed

    def mtp(alpha):
        # one drafter per α: its draws go on from run to run, so repeats average their luck
        d = ScriptedDrafter(compiled_pair.make_drafter("mtp"), script, len(ids), alpha, vocab, 0)
        return lambda: timed(lambda: loop.speculative(compiled_pair.decoder, d, ids, max_new_tokens=n,
                                                      draft_tokens=gamma))

    def transformers_generate():
        x = torch.tensor([ids])
        t = time.perf_counter()
        with torch.inference_mode():
            o = pair.target.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                                     min_new_tokens=n, eos_token_id=None, pad_token_id=0)
        return {"seconds": time.perf_counter() - t, "tokens": o.shape[1] - len(ids), "ids": o[0, len(ids):].tolist()}

    log = out / "llama-server.log"
    for threads in [int(x) for x in args.threads.split(",")]:
        torch.set_num_threads(threads)
        m = machine.machine()
        entry = results["threads"].setdefault(str(threads), {"machine": m, "machine_line": machine.line(m),
                                                            "stream_GBps": stream_bandwidth(threads) / 1e9,
                                                            "decoders": {}})
        torch.set_num_threads(threads)
        proc, url = serve(server, folder, threads, 8391, log, args.llama_args.split()) if folder else (None, "")
        try:
            arms = {} if args.no_eager else {f"mtp-viz eager {precision}": plain(pair)}
            arms[f"mtp-viz compiled {precision}"] = plain(compiled_pair)
            arms.update({f"mtp-viz compiled {precision} MTP γ={gamma} α={a:g}": mtp(a) for a in args.alphas})
            if precision == "bfloat16" and args.transformers:
                arms["transformers generate bfloat16"] = transformers_generate
            if folder:
                arms[f"llama.cpp {llama_type}"] = lambda: llamacpp(url, ids, n)
            block = rotate(arms, repeats, turn, f"threads {threads}")
        finally:
            if proc:
                os.killpg(proc.pid, 15)
                proc.wait()
        if not folder:
            results.setdefault("runs", {})[str(threads)] = block
            results["script"] = script
            continue
        summarize(entry, block, meta[llama_type], llama_type, script)


def rotate(arms: dict, repeats: int, turn: int, label: str) -> dict[str, list]:
    """Each arm once untimed, then ``repeats`` timed turns, each turn's order rotated by one
    (the first from ``turn``): no arm always runs first or after the same neighbour."""
    for fn in arms.values():
        fn()   # untimed warm-up
    block: dict[str, list] = {}
    keys = list(arms)
    for r in range(turn, turn + repeats):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            block.setdefault(k, []).append(arms[k]())
            print(f"{label} {k}: {block[k][-1]['seconds']:.1f} s", file=sys.stderr)
    return block


def summarize(entry: dict, block: dict[str, list], meta: dict, llama_type: str, script: list[int]) -> None:
    """Medians of each decoder's runs, each over llama.cpp's in the same block."""
    for k, rs in block.items():
        tps = [r["tokens"] / r["seconds"] for r in rs]
        med = statistics.median(tps)
        step = meta["step_bytes" if k.startswith("mtp-viz") else "llama_step_bytes"]
        entry["decoders"][k] = {
            "tokens_per_second": med, "repeats": tps, "ms_per_token": 1e3 / med,
            "decode_tokens_per_second": statistics.median([r["decode_tps"] for r in rs])
            if rs[0].get("decode_tps") else None, "ids": rs[0]["ids"][:16],
            "bandwidth_GBps": None if " MTP " in k or k.startswith("transformers") else step * med / 1e9,
            "same_tokens_as_compiled_plain": all(r["ids"] == script for r in rs),
            "over_llamacpp": med / statistics.median(
                r["tokens"] / r["seconds"] for r in block[f"llama.cpp {llama_type}"])}


def apart(args, precision: str, llama_type: str, folder: Path, server: str, out: Path, results: dict) -> None:
    """A block whose pair and server do not fit in memory together (float32: 18.5 GB each in
    24 GB), still in one interleaved run: each repeat times ours in a child process (load,
    compile from inductor's disk cache, each arm once at each thread count, exit) and then
    the server alone at each thread count, ours first in even repeats and the server first in
    odd ones; each child's arms turn from the repeat's number. The tokens of the ids compared
    are the first child's compiled plain run's."""
    import tempfile

    import torch

    from mtp_viz.measure import machine
    threads_list = [int(x) for x in args.threads.split(",")]
    runs: dict[str, dict[str, list]] = {str(t): {} for t in threads_list}
    log, meta, script = out / "llama-server.log", None, None
    ids = prompt_ids(args, None)
    for r in range(args.repeats):
        for phase in (("ours", "llama") if r % 2 == 0 else ("llama", "ours")):
            if phase == "ours":
                with tempfile.TemporaryDirectory() as tmp:
                    child = Path(tmp) / "child.json"
                    subprocess.run([sys.executable, __file__, "--child", str(child), "--turn", str(r),
                                    *sys.argv[1:]], check=True)
                    got = json.loads(child.read_text(encoding="utf-8"))
                meta = meta or got["meta"]["blocks"][llama_type]
                script = script or got["script"]
                for t, block in got["runs"].items():
                    for k, rs in block.items():
                        runs[t].setdefault(k, []).extend(rs)
                continue
            for t in threads_list:
                proc, url = serve(server, folder, t, 8391, log, args.llama_args.split())
                try:
                    llamacpp(url, ids, 4)   # untimed warm-up (its weights paged in)
                    runs[str(t)].setdefault(f"llama.cpp {llama_type}", []).append(llamacpp(url, ids, args.new_tokens))
                    print(f"repeat {r} threads {t} llama.cpp {llama_type}: "
                          f"{runs[str(t)][f'llama.cpp {llama_type}'][-1]['seconds']:.1f} s", file=sys.stderr)
                finally:
                    os.killpg(proc.pid, 15)
                    proc.wait()
    results["meta"].setdefault("blocks", {})[llama_type] = {**meta, "apart": True}
    for t in threads_list:
        torch.set_num_threads(t)
        m = machine.machine()
        entry = results["threads"].setdefault(str(t), {"machine": m, "machine_line": machine.line(m),
                                                      "stream_GBps": stream_bandwidth(t) / 1e9, "decoders": {}})
        summarize(entry, runs[str(t)], meta, llama_type, script)


BUILDS = {"native": "for this CPU (GGML_NATIVE)",
          "avx2": "for AVX2 + FMA alone, no AVX-512 or AMX (MTP_VIZ_LLAMA_CPP_ISA=avx2)"}


def kernel_line() -> str:
    from mtp_viz.engine import kernels
    return f"mtp_viz::rows ({kernels.isa_name()})" if kernels.load() else kernels.note()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="e2b")
    ap.add_argument("--gguf-bf16", default="")
    ap.add_argument("--gguf-q8", default="")
    ap.add_argument("--gguf-f32", default="", help="the f32 export, for the f32 block (ours float32 beside it, "
                    "never resident together: each repeat loads ours in a child process, then the server)")
    ap.add_argument("--blocks", default="bf16,q8_0", help="llama.cpp types, each beside ours that matches it")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--alphas", default="0.5,0.7,0.9")
    ap.add_argument("--transformers", action="store_true", help="transformers' generate too (bf16 block)")
    ap.add_argument("--no-eager", action="store_true", help="leave out the eager engine (in int8 it runs torchao's "
                    "own CPU product, minutes a run at E2B)")
    ap.add_argument("--llama-args", default="", help="more llama-server flags, e.g. --no-repack (its AMX q8_0 "
                    "kernels stopped on an invalid opcode on a Sapphire Rapids VM, 2026-12-06)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/real-scale"))
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)   # apart(): time ours alone, write here
    ap.add_argument("--turn", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.alphas = [float(a) for a in args.alphas.split(",") if a.strip()]
    import gc

    from mtp_viz.sources.models import load_pair
    server = subprocess.run(["bash", str(ROOT / "scripts/llamacpp.sh")], capture_output=True, text=True,
                            check=True).stdout.strip()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"meta": {"target": args.target, "llama_args": args.llama_args, "weights": "random",
                        "prompt_tokens": args.prompt_tokens,
                        "new_tokens": args.new_tokens, "repeats": args.repeats, "draft_tokens": args.draft_tokens,
                        "alphas": args.alphas, "clock": "wall"}, "threads": {}}
    # which llama.cpp build ran (scripts/llamacpp.sh: MTP_VIZ_LLAMA_CPP_ISA) and ATen's cap, if set
    results["meta"]["llama_build"] = os.environ.get("MTP_VIZ_LLAMA_CPP_ISA", "native")
    results["meta"]["aten_cap"] = os.environ.get("ATEN_CPU_CAPABILITY", "")
    # every other cap an AVX2-only machine is emulated with: the kernel's, oneDNN's and MKL's
    results["meta"]["caps"] = {k: os.environ[k] for k in ("MTP_VIZ_KERNEL_ISA", "ONEDNN_MAX_CPU_ISA",
                                                          "MKL_ENABLE_INSTRUCTIONS") if os.environ.get(k)}
    folders = {"bf16": args.gguf_bf16, "q8_0": args.gguf_q8, "f32": args.gguf_f32}
    blocks = args.blocks.split(",")
    if args.child:   # one repeat of ours alone, for apart()
        blocks = [b for b in blocks if b in APART]
    for llama_type in blocks:
        precision = BLOCKS[llama_type]
        if not folders[llama_type]:
            raise SystemExit(f"the {llama_type} block needs --gguf-{llama_type.split('_')[0]}")
        if llama_type in APART and not args.child:
            apart(args, precision, llama_type, Path(folders[llama_type]), server, out, results)
        else:
            t = time.perf_counter()
            pair = load_pair(args.target, weights="random", dtype=precision)   # only one block's pair resident
            results["meta"].setdefault("build_seconds", {})[precision] = time.perf_counter() - t
            study(args, pair, precision, llama_type, None if args.child else Path(folders[llama_type]), server,
                  out, results, turn=args.turn)
            del pair
            gc.collect()
        if args.child:
            Path(args.child).write_text(json.dumps(results), encoding="utf-8")
            return 0
        (out / "real_scale.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    write_md(args, results, out)
    return 0


def write_md(args, results: dict, out: Path) -> None:
    meta = results["meta"]
    lines = [f"# Decoding at {args.target}'s shape (random weights: timings only): ours beside llama.cpp", "",
             f"Prompt {meta['prompt_tokens']} token ids, {meta['new_tokens']} new tokens, greedy, medians of "
             f"{meta['repeats']} repeats in rotated turns, wall time of the whole request; each block is one "
             "precision of ours beside the llama.cpp type that stores its weights alike, one server resident "
             f"at a time. MTP rows: the compiled engine with the MTP drafter proposing γ={meta['draft_tokens']} "
             "drafts, each kept with the set probability α (every forward real: a random drafter's own drafts "
             "are noise), so their rate is what that acceptance gives on this machine.", "",
             f"llama.cpp built {BUILDS.get(meta.get('llama_build', 'native'), meta.get('llama_build'))}"
             + (f"; ATen capped to {meta['aten_cap']} (ATEN_CPU_CAPABILITY)" if meta.get("aten_cap") else "")
             + "".join(f"; {k}={v}" for k, v in meta.get("caps", {}).items())
             + ".", ""]
    for llama_type, b in meta.get("blocks", {}).items():
        lines.append(f"- {b['precision']} beside llama.cpp {llama_type}: a plain step reads "
                     f"{b['step_bytes'] / 1e9:.2f} GB of weights; compiled in {b['compile_seconds']:.0f} s; "
                     f"kernel: {b['kernel']}."
                     + (" Ours and the server never resident together (both do not fit in the memory): each "
                        "repeat ran ours in a child process (built, compiled from inductor's cache, each arm "
                        "once after an untimed warm-up, at each thread count) and then the server alone, ours "
                        "first in even repeats, the server first in odd ones." if b.get("apart") else ""))
    lines.append("")
    for threads, t in results["threads"].items():
        lines += [f"## {threads} thread(s): {t['machine_line']}", "",
                  f"A streaming read of this machine's memory: {t['stream_GBps']:.1f} GB/s.", "",
                  "| decoder | tok/s | ms/token | × llama.cpp (same type, same block) | decode-only tok/s "
                  "(server's own) | GB/s of weights | same tokens as compiled plain |", "|---|---|---|---|---|---|---|"]
        for k, row in t["decoders"].items():
            dec = f"{row['decode_tokens_per_second']:.2f}" if row["decode_tokens_per_second"] else "–"
            bw = "–" if row["bandwidth_GBps"] is None else f"{row['bandwidth_GBps']:.1f}"
            same = "yes" if row["same_tokens_as_compiled_plain"] else "no"
            lines.append(f"| {k} | {row['tokens_per_second']:.3f} | {row['ms_per_token']:.0f} | "
                         f"×{row['over_llamacpp']:.2f} | {dec} | {bw} | {same} |")
        lines.append("")
    (out / "real_scale.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
