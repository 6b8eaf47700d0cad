"""Parse command lines with an engine's own argument parser: run by the Python of the engine's
venv under .tools/ (tests/serving/test_engine_parsers.py), never by the panel's.

Reads {"engine": "vllm" | "sglang", "argvs": [[word, ...], ...], "fields": [name, ...]} on stdin
("fields" optional): each argv is what follows `vllm serve` / `python -m sglang.launch_server`. Prints
a JSON list, one entry per argv: null when the engine's parser takes it, else the sentence the engine
answers (argparse's `error: ...` without the prefix, or the exception its own checks raise). With
"fields", each entry is {"refusal": that, "values": {name: the parsed argument's value}} instead.
Parse only: no model is read, no server is started.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable
from typing import Any

Parse = Callable[[list[str]], Any]  # the parsed arguments (an argparse Namespace)


def vllm_parser() -> Parse:
    """`vllm serve`'s parser as the console command builds it, plus the checks the command runs
    on the parsed arguments before it starts anything."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subcommand", required=True)
    ServeSubcommand().subparser_init(subparsers)

    def parse(argv: list[str]) -> Any:
        args = parser.parse_args(["serve", *argv])
        # Whether a chat template file exists is the host's matter (the adapter warns of the
        # path), not the command line's: check the rest.
        template, args.chat_template = args.chat_template, None
        validate_parsed_serve_args(args)
        args.chat_template = template
        return args

    return parse


def sglang_parser() -> Parse:
    """`python -m sglang.launch_server`'s parser (server_args.prepare_server_args without the
    resolution that needs the model and a GPU)."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)

    def parse(argv: list[str]) -> Any:
        return parser.parse_args(argv)

    return parse


def parsed(parse: Parse, argv: list[str]) -> tuple[str | None, Any]:
    """(None, the parsed arguments) when the parser takes `argv`, else (its refusal, None)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return None, parse(argv)
    except SystemExit as exit_:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        said = lines[-1] if lines else f"exit {exit_.code}"
        return (said.split(" error: ", 1)[-1] if ": error: " in said else said), None
    except Exception as exc:  # noqa: BLE001 - the engine's own check said no: report its words
        return (str(exc).removeprefix("Error: ") or type(exc).__name__), None


def answer(parse: Parse, argv: list[str], fields: list[str]) -> Any:
    said, args = parsed(parse, argv)
    if not fields:
        return said
    return {"refusal": said, "values": {name: getattr(args, name, None) for name in fields} if args else {}}


def main() -> None:
    order = json.load(sys.stdin)
    parse = {"vllm": vllm_parser, "sglang": sglang_parser}[order["engine"]]()
    fields = list(order.get("fields") or [])
    print(json.dumps([answer(parse, argv, fields) for argv in order["argvs"]], default=str))


if __name__ == "__main__":
    main()
