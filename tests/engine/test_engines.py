"""The table of engines: what the CLI offers is what the table holds, ``--compile`` is an
alias of the compiled engine read once by the parser, and an engine registered at run time
(one line) is offered and runs with no other edit."""
import json

import pytest

from factories import save_gemma_pair
from mtp_viz.cli.main import build_parser, main
from mtp_viz.engine import engines
from mtp_viz.engine.engines import ENGINES, Engine, check_engine, default_engine, resolve
from mtp_viz.errors import UserError

PROMPT = " ".join(f"w{i}" for i in range(10, 30))
COMMANDS = ("generate", "bench", "profile")


def _choices(command: str) -> list[str]:
    sub = next(a for a in build_parser(command)._actions if a.dest == "command").choices[command]
    return list(next(a for a in sub._actions if a.dest == "engine").choices)


@pytest.fixture
def spare(monkeypatch):
    """A third engine, registered as a new one is: one line (here eager decoding under another name)."""
    monkeypatch.setitem(ENGINES, "spare", Engine("spare engine", "mtp_viz.engine.decoder:mount", False,
                                                 "eager decoding under another name"))
    return "spare"


@pytest.mark.parametrize("command", COMMANDS)
def test_the_cli_offers_the_tables_engines(command):
    from mtp_viz.cli.profile import PEERS
    peers = list(PEERS) if command == "profile" else []   # profile also measures llama.cpp (--engine llama.cpp)
    assert _choices(command) == list(ENGINES) + peers


@pytest.mark.parametrize("command", COMMANDS)
def test_an_engine_registered_at_run_time_is_offered(spare, command):
    assert spare in _choices(command)


def test_compile_is_an_alias_of_the_compiled_engine():
    assert resolve() == default_engine() == "eager"
    assert resolve(None, True) == resolve("compiled") == resolve("compiled", True) == engines.COMPILE_ALIAS
    with pytest.raises(UserError, match="give one of them"):
        resolve("eager", True)
    with pytest.raises(UserError, match=f"Unknown engine 'warp'; choose one of: {', '.join(ENGINES)}."):
        check_engine("warp")


@pytest.mark.parametrize("command", COMMANDS)
def test_the_parser_reads_the_alias_once_into_the_engine(command):
    """``--compile`` is ``--engine compiled`` by the time a command reads its arguments: it never sees the word."""
    parse, needed = build_parser(command).parse_known_args, ["--prompt", "x"] if command == "generate" else []
    for flags, engine, flag in (([], None, None), (["--compile"], "compiled", "--compile"),
                                (["--engine", "compiled"], "compiled", "--engine"),
                                (["--engine", "compiled", "--compile"], "compiled", "--compile"),
                                (["--compile", "--engine", "compiled"], "compiled", "--compile")):
        args, _ = parse([command, "--target", "tiny", *needed, *flags])
        assert (args.engine, args.engine_flag) == (engine, flag) and not hasattr(args, "compile"), flags


@pytest.mark.parametrize("flags", [["--engine", "eager", "--compile"], ["--compile", "--engine", "eager"]])
def test_the_alias_and_the_flag_clash_in_one_sentence(capsys, flags):
    assert main(["generate", "--target", "tiny", "--prompt", "x", *flags]) == 2
    assert "give one of them" in capsys.readouterr().err


def test_a_registered_engine_runs_with_no_other_edit(spare, tmp_path, capsys):
    target, _ = save_gemma_pair(tmp_path)
    assert main(["generate", "--target", str(target), "--prompt", PROMPT, "--max-new-tokens", "6",
                 "--jsonl", "--engine", spare]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert events[0]["type"] == "start" and events[-1]["new_tokens"] == 6


def test_the_bench_puts_each_pair_on_a_registered_engine(spare, capsys):
    from mtp_viz.cli import bench_precision
    from mtp_viz.sources.models import load_pairs
    [pair] = load_pairs("tiny")
    [other] = bench_precision.on_engine([pair], spare)
    assert other is not pair and other.target is pair.target and other.mounted is not None
    assert pair.mounted is None and not other.compile_note and not other.mounted.compiles
    assert "compiled" not in capsys.readouterr().err   # nothing compiled, nothing said
