"""``vllm`` command line of the stand-in: ``vllm serve MODEL [flags]`` and ``vllm --version``.

argparse with ``allow_abbrev=False``; usage errors exit 2 like argparse.  As vLLM's
FlexibleArgumentParser, ``--some_flag`` is accepted as ``--some-flag``.  JSON flag values are
parsed strictly (an object; duplicate keys, NaN and Infinity are rejected) and
``--compilation-config`` may be given only once.  Cross-flag rules checked here: ``--headless``
needs ``--node-rank`` > 0, a node rank > 0 needs ``--headless``, and the node rank must be below
``--nnodes``.  Topology, KV capacity and CUDA-graph checks are start-up errors (exit 1), see
config.py and boot.py.
"""
import argparse
import sys

from . import VERSION
from .cudagraph import normalize_compilation_config
from .strict_json import StrictJSONError, loads_object

# Arguments whose values never reach the logs.
SECRET_ARGS = frozenset({"api_key"})
REDACTED = "<redacted>"
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4_ds_mla")


def _json_object(text):
    try:
        return loads_object(text)
    except StrictJSONError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON object {text!r}: {exc}") from None


def _speculative_config(text):
    obj = _json_object(text)
    k = obj.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise argparse.ArgumentTypeError("num_speculative_tokens must be a positive integer")
    if not isinstance(obj.get("method", ""), str):
        raise argparse.ArgumentTypeError("method must be a string")
    return obj


def _compilation_config(text):
    try:
        return normalize_compilation_config(_json_object(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    parse.__name__ = "int"
    return parse


def _port(text):
    value = _int_at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"port must be <= 65535, got {value}")
    return value


def _max_model_len(text):
    if text in ("auto", "-1"):
        return -1
    return _int_at_least(1)(text)


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


class _Once(argparse.Action):
    """Store a value, refusing a second occurrence of the flag."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = f"_seen_{self.dest}"
        if getattr(namespace, seen, False):
            parser.error(f"argument {self.option_strings[0]}: may only be given once")
        setattr(namespace, seen, True)
        setattr(namespace, self.dest, values)


def _add_serve_arguments(p):
    bool_flag = argparse.BooleanOptionalAction
    p.add_argument("model", metavar="MODEL_PATH", help="model directory or Hugging Face id")
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=_port, default=8000)
    p.add_argument("--api-key", default=None)
    p.add_argument("--trust-remote-code", action=bool_flag, default=False)
    p.add_argument("--tensor-parallel-size", "-tp", type=_int_at_least(1), default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=_int_at_least(1), default=1)
    p.add_argument("--distributed-executor-backend", choices=("mp", "ray", "uni", "external_launcher"))
    p.add_argument("--nnodes", "-n", type=_int_at_least(1), default=1)
    p.add_argument("--node-rank", "-r", type=_int_at_least(0), default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=_port, default=29501)
    p.add_argument("--headless", action="store_true")
    p.add_argument("--distributed-timeout-seconds", type=_int_at_least(1), default=None)
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto")
    p.add_argument("--block-size", type=_int_at_least(1), default=None)
    p.add_argument("--max-model-len", type=_max_model_len, default=None)
    p.add_argument("--max-num-seqs", type=_int_at_least(1), default=256)
    p.add_argument("--max-num-batched-tokens", type=_int_at_least(1), default=8192)
    p.add_argument("--gpu-memory-utilization", type=_fraction, default=0.9)
    p.add_argument("--kv-cache-memory-bytes", type=_int_at_least(1), default=None)
    p.add_argument("--enable-prefix-caching", action=bool_flag, default=True)
    p.add_argument("--speculative-config", type=_speculative_config, default=None)
    p.add_argument("--compilation-config", "-cc", type=_compilation_config, action=_Once, default=None)
    p.add_argument("--optimization-level", "-O", type=int, choices=(0, 1, 2, 3), default=2)
    p.add_argument("--performance-mode", choices=("balanced", "throughput", "interactivity"), default="balanced")
    p.add_argument("--jit-monitor-mode", default=None)
    p.add_argument("--enforce-eager", action=bool_flag, default=False)
    p.add_argument("--tokenizer-mode", default="auto")
    p.add_argument("--load-format", default="auto")
    p.add_argument("--moe-backend", default=None)
    p.add_argument("--enable-flashinfer-autotune", action=bool_flag, default=False)
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--enable-auto-tool-choice", action=bool_flag, default=False)
    p.add_argument("--reasoning-parser", default=None)
    p.add_argument("--reasoning-config", type=_json_object, default=None)
    p.add_argument("--default-chat-template-kwargs", type=_json_object, default=None)


def build_parser():
    parser = argparse.ArgumentParser(prog="vllm", allow_abbrev=False,
                                     description="vLLM CLI (DSpark stand-in for the gb10.dspark simulator)")
    parser.add_argument("--version", action="version", version=VERSION)
    sub = parser.add_subparsers(dest="subcommand", metavar="{serve}", required=True)
    serve = sub.add_parser("serve", allow_abbrev=False, help="start the OpenAI-compatible server",
                           usage="vllm serve MODEL_PATH [options]")
    _add_serve_arguments(serve)
    return parser, serve


def _normalize(argv):
    """``--flag_name[=v]`` -> ``--flag-name[=v]`` (vLLM's FlexibleArgumentParser)."""
    out = []
    for arg in argv:
        if arg.startswith("--") and len(arg) > 2:
            key, eq, value = arg.partition("=")
            arg = key.replace("_", "-") + eq + value
        out.append(arg)
    return out


def parse_args(argv):
    """Parsed namespace of ``vllm`` arguments (SystemExit 2 on usage errors)."""
    parser, serve = build_parser()
    args = parser.parse_args(_normalize(argv))
    if args.headless and args.node_rank == 0:
        serve.error("--headless requires --node-rank > 0: rank 0 is the head node and serves the API")
    if args.node_rank >= args.nnodes:
        serve.error(f"--node-rank ({args.node_rank}) must be smaller than --nnodes ({args.nnodes})")
    if args.node_rank > 0 and not args.headless:
        serve.error(f"--node-rank {args.node_rank} requires --headless (only rank 0 serves the API)")
    args.non_default = {("model_tag" if k == "model" else k): (REDACTED if k in SECRET_ARGS else v)
                        for k, v in vars(args).items()
                        if not k.startswith("_") and k != "subcommand" and v != serve.get_default(k)}
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    from .boot import run
    return run(args)
