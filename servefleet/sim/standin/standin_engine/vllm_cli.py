"""``vllm serve`` command line, as the emulated release parses it.

The parser is rebuilt from ``data/vllm_cli/<release>.json``: the actions of the real
``vllm serve`` parser (option strings, nargs, types, choices, defaults) dumped from
each release's wheel. It is then driven exactly like vLLM drives it: the same
``FlexibleArgumentParser`` pre-processing (``_``/``-`` equivalence, ``-O3``, dotted
JSON keys, ``--model`` moved to the front) and the same top-level ``vllm`` parser
with sub-commands, so argparse prints the real errors: an unknown flag gives
``vllm: error: unrecognized arguments: …`` (exit 2, reported by the top-level
parser), a bad value ``vllm serve: error: argument …`` (exit 2).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from typing import Any

from .vllm_versions import VersionTuple, parse_version

KNOWN_RELEASES = ("0.19.1", "0.20.0", "0.21.0", "0.25.0", "0.28.0", "0.31.0")


@cache
def cli_data(version: VersionTuple) -> dict[str, Any]:
    """The dumped parser of the nearest known release at or below ``version``."""
    chosen = KNOWN_RELEASES[0]
    for name in KNOWN_RELEASES:
        if parse_version(name) <= version:
            chosen = name
    text = resources.files(__package__).joinpath("data", "vllm_cli", f"{chosen}.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


# --- the converters vLLM uses; their __name__ shows up in argparse errors -----------


def human_readable_int(value: str) -> int:
    """vLLM's ``1k`` = 1000, ``1K`` = 1024, ``25.6k`` = 25600."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        number, suffix = match.groups()
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        if "." in number:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. "
                f"Did you mean to use {number}{suffix.lower()} instead?"
            )
        return int(number) * binary[suffix]
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    """``-1``/``auto`` = auto-fit, otherwise a human-readable int."""
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


class _FakeFunction:
    """Prints like ``<function loads at 0x…>`` inside vLLM's conversion errors."""

    def __init__(self, name: str, address: int) -> None:
        self.name = name
        self.address = address

    def __repr__(self) -> str:
        return f"<function {self.name} at {self.address:#x}>"


_LOADS_REPR = _FakeFunction("loads", 0x7F3A2C1E4E00)


def _parse_json(val: str) -> Any:
    try:
        return json.loads(val)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"Value {val} cannot be converted to {_LOADS_REPR}."
        ) from exc


def loads(val: str) -> Any:
    """``json.loads`` as the bare argparse type (argparse reports ``invalid loads value``)."""
    return json.loads(val)


def parse_dataclass(val: str) -> Any:
    """JSON for a config dataclass (validated later by the engine)."""
    try:
        value = json.loads(val)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"1 validation error for json\n  Invalid JSON: {exc.msg} at line {exc.lineno} "
            f"column {exc.colno} [type=json_invalid, input_value={val!r}, input_type=str]"
        ) from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"1 validation error for config\n  Input should be a dictionary or an instance of "
            f"the config [type=dataclass_type, input_value={value!r}]"
        )
    return value


def union_dict_and_str(val: str) -> Any:
    """A JSON object or a plain string."""
    if not re.match(r"(?s)^\s*{.*}\s*$", val):
        return str(val)
    if val in ("", "None"):
        return None
    return _parse_json(val)


def _base_converter(name: str) -> Callable[[str], Any]:
    converters: dict[str, Callable[[str], Any]] = {
        "str": str,
        "int": int,
        "float": float,
        "loads": loads,
        "parse_dataclass": parse_dataclass,
        "human_readable_int": human_readable_int,
        "human_readable_int_or_auto": human_readable_int_or_auto,
        "union_dict_and_str": union_dict_and_str,
        "parse_type:loads": _parse_json,
    }
    return converters.get(name, str)


def _wrap_parse_type(name: str, inner: Callable[[str], Any]) -> Callable[[str], Any]:
    """vLLM's ``parse_type``: a ValueError becomes ``Value x cannot be converted to …``."""
    if name in ("parse_dataclass", "parse_type:loads", "union_dict_and_str"):
        return inner
    target: object = _LOADS_REPR if name == "loads" else inner

    def _parse_type(val: str) -> Any:
        try:
            return inner(val)
        except ValueError as exc:
            shown = f"<class '{name}'>" if name in ("str", "int", "float") else target
            raise argparse.ArgumentTypeError(
                f"Value {val} cannot be converted to {shown}."
            ) from exc

    return _parse_type


def converter(type_name: str | None) -> Callable[[str], Any] | None:
    """The argparse ``type`` for a dumped type name (``optional:int`` etc.)."""
    if not type_name:
        return None
    if type_name.startswith("optional:"):
        inner_name = type_name.removeprefix("optional:")
        inner = _wrap_parse_type(inner_name, _base_converter(inner_name))

        def _optional_type(val: str) -> Any:
            if val in ("", "None"):
                return None
            return inner(val)

        return _optional_type
    return _base_converter(type_name)


# --- building and driving the parsers ----------------------------------------------


class _LoRAParserAction(argparse.Action):
    """``--lora-modules name=path`` or JSON; the stand-in only keeps the strings."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, list(values) if isinstance(values, list) else [values])


def build_serve_parser(subparsers: Any, data: dict[str, Any]) -> argparse.ArgumentParser:
    """The ``vllm serve`` sub-parser with every action of the release."""
    serve: argparse.ArgumentParser = subparsers.add_parser(
        "serve", usage="vllm serve [model_tag] [options]", add_help=False
    )
    for spec in data["actions"]:
        opts = spec["opts"]
        kind = spec["action"]
        kwargs: dict[str, Any] = {}
        if kind == "help":
            serve.add_argument(*opts, action="help", help=argparse.SUPPRESS)
            continue
        if not opts:
            serve.add_argument(
                spec["dest"], nargs=spec.get("nargs"), type=str, default=spec.get("default")
            )
            continue
        kwargs["dest"] = spec["dest"]
        if "default" in spec:
            kwargs["default"] = spec["default"]
        elif spec.get("default_opaque"):
            kwargs["default"] = _OPAQUE
        else:
            kwargs["default"] = None
        if kind == "booleanoptional":
            kwargs["action"] = argparse.BooleanOptionalAction
            # BooleanOptionalAction builds every --no- spelling itself.
            serve.add_argument(*[o for o in opts if not o.startswith("--no-")], **kwargs)
            continue
        if kind == "storetrue":
            serve.add_argument(*opts, action="store_true", **kwargs)
            continue
        if kind == "append":
            kwargs["action"] = "append"
        elif kind == "loraparser":
            kwargs["action"] = _LoRAParserAction
        if spec.get("nargs") is not None:
            kwargs["nargs"] = spec["nargs"]
        conv = converter(spec.get("type"))
        if conv is not None:
            kwargs["type"] = conv
        if spec.get("choices") is not None:
            kwargs["choices"] = spec["choices"]
        if "const" in spec and spec.get("nargs") == "?":
            kwargs["const"] = spec["const"]
        serve.add_argument(*opts, **kwargs)
    return serve


class _Opaque:
    """Stands for a default that is a config object (never equal to user input)."""

    def __repr__(self) -> str:
        return "<default>"


_OPAQUE = _Opaque()


def build_parsers(version: VersionTuple) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The top-level ``vllm`` parser and its ``serve`` sub-parser."""
    data = cli_data(version)
    top = argparse.ArgumentParser(prog="vllm", description="vLLM CLI")
    top.add_argument("-v", "--version", action="version", version=".".join(map(str, version)))
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve: argparse.ArgumentParser | None = None
    for name in data["subcommands"]:
        if name == "serve":
            serve = build_serve_parser(subparsers, data)
        else:
            subparsers.add_parser(name)
    assert serve is not None
    return top, serve


def preprocess(args: list[str]) -> list[str]:
    """What ``FlexibleArgumentParser.parse_args`` does before argparse sees the list."""
    if args and args[0] == "serve":
        model_idx = next(
            (i for i, arg in enumerate(args) if re.match(r"^--model(=.+|$)", arg)), None
        )
        if model_idx is not None and not (
            args[model_idx] == "--model" and model_idx + 1 >= len(args)
        ):
            if args[model_idx] == "--model":
                model_tag, rest = args[model_idx + 1], model_idx + 2
            else:
                model_tag, rest = args[model_idx].removeprefix("--model="), model_idx + 1
            args = ["serve", model_tag, *args[1:model_idx], *args[rest:]]

    pattern = re.compile(r"(?<=--)[^\.]*")

    def repl(match: re.Match[str]) -> str:
        return match.group(0).replace("_", "-")

    processed: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            if "=" in arg:
                key, raw = arg.split("=", 1)
                processed.append(f"{pattern.sub(repl, key, count=1)}={raw}")
            else:
                processed.append(pattern.sub(repl, arg, count=1))
        elif arg.startswith("-O") and arg != "-O":
            level = arg[3:] if len(arg) > 2 and arg[2] == "=" else arg[2:]
            processed += ["--optimization-level", level]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)

    # Dotted keys (--compilation-config.cudagraph_mode=PIECEWISE) become one JSON arg.
    delete: set[int] = set()
    dict_args: dict[str, dict[str, Any]] = {}
    for i, arg in enumerate(processed):
        if i in delete or not arg.startswith("-") or "." not in arg:
            continue
        if "=" in arg:
            arg, value_str = arg.split("=", 1)
            if "." not in arg:
                continue
        else:
            if i + 1 >= len(processed):
                continue
            value_str = processed[i + 1]
            delete.add(i + 1)
        if arg.endswith("+"):
            arg = arg[:-1]
            value_str = json.dumps(value_str.split(","))
        key, *keys = arg.split(".")
        try:
            value: Any = json.loads(value_str)
        except ValueError:
            try:
                value = human_readable_int(value_str)
            except (ValueError, argparse.ArgumentTypeError):
                value = value_str
        nested: Any = value
        for part in reversed(keys):
            nested = {part: nested}
        target = dict_args.setdefault(key, {})
        _merge(target, nested)
        delete.add(i)
    processed = [a for i, a in enumerate(processed) if i not in delete]
    for key, merged in dict_args.items():
        processed += [key, json.dumps(merged)]
    return processed


def _merge(target: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def parse_serve_args(command: Sequence[str], version: VersionTuple) -> argparse.Namespace:
    """Parse ``vllm serve <command…>``; argparse exits 2 with the real message on errors."""
    top, _serve = build_parsers(version)
    args = top.parse_args(preprocess(["serve", *command]))
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    return args


def non_default_args(args: argparse.Namespace, version: VersionTuple) -> dict[str, Any]:
    """``non-default args: {…}`` as vLLM logs it (parser order, values as parsed)."""
    data = cli_data(version)
    shown: dict[str, Any] = {}
    for spec in data["actions"]:
        dest = spec["dest"]
        if dest == "help" or not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        default = spec.get("default")
        if spec.get("default_opaque"):
            if value is not _OPAQUE:
                shown[dest] = value
            continue
        if value != default:
            shown[dest] = value
    return shown


def quantization_methods(version: VersionTuple) -> list[str]:
    """``QuantizationMethods`` of the release."""
    methods: list[str] = cli_data(version)["quantization_methods"]
    return methods
