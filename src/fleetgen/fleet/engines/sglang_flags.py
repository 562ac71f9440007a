"""Check SGLang command lines with SGLang's own argument parser; runs in a python that holds sglang.

Run as a file (`python .../sglang_flags.py`), so that python needs sglang only, not fleetgen or
its dependencies; `python -m fleetgen.fleet.engines.sglang_flags` works too where both are installed.

stdin: a JSON list of argv lists (each the arguments after `-m sglang.launch_server`, or a whole
command line containing `sglang.launch_server`). stdout: one JSON object
{"version": ..., "results": [{"ok": bool, "error": str|null, "deprecated": [flags]}, ...]}.
`--version` prints the installed sglang version (after checking that the parser loads);
`--flags` prints every option string the parser accepts, as JSON.

The parser is built exactly as `sglang.srt.server_args.prepare_server_args` builds it
(argparse + `ServerArgs.add_cli_args`); `ServerArgs` itself is never constructed, since its
__post_init__ probes the GPU.
"""

from __future__ import annotations

import os
import sys

if (
    __name__ == "__main__"
    and sys.path
    and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__))
):
    # Run as a file, Python puts this directory first on sys.path, and its sglang.py (fleetgen's
    # engine module) would shadow the real sglang package.
    del sys.path[0]

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
from contextlib import redirect_stderr, redirect_stdout


class _Rejected(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit(2)
        raise _Rejected(message)


_TORCHVISION_SCHEMAS = None


def torchvision_without_kernels() -> None:
    """Let PyPI's torchvision import beside the CPU torch, its compiled ops absent.

    PyPI has CUDA builds of torchvision only; their `_C` needs libtorch_cuda and does not load
    here. torchvision then guards every meta registration except `nms` and `qnms`, which fail
    with "operator torchvision::nms does not exist". Declaring those two schemas (copied from
    torchvision/csrc/ops/nms.cpp) lets it import; sglang and transformers import torchvision at
    module level, and building the argument parser never runs an op. Must run before sglang.
    """
    global _TORCHVISION_SCHEMAS
    import torch

    if hasattr(torch.ops.torchvision, "nms") or _TORCHVISION_SCHEMAS is not None:
        return
    try:
        import torchvision.extension  # loads _C when it can

        if torchvision.extension._has_ops():
            return
    except Exception:
        pass
    lib = torch.library.Library("torchvision", "FRAGMENT")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _TORCHVISION_SCHEMAS = lib  # a Library unregisters its definitions when collected


def build_parser() -> argparse.ArgumentParser:
    torchvision_without_kernels()
    with redirect_stdout(io.StringIO()):  # sglang's import may print banners
        from sglang.srt.server_args import ServerArgs

    parser = _Parser(prog="sglang serve", add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def _args_of(argv: list[str]) -> list[str]:
    if "sglang.launch_server" in argv:
        return argv[argv.index("sglang.launch_server") + 1 :]
    return argv


def check(parser: argparse.ArgumentParser, argv: list[str]) -> dict:
    from sglang.srt.server_args import DeprecatedAction

    args = _args_of(argv)
    if "--config" in args:
        return {"ok": False, "error": "--config files are not checked: pass flags explicitly", "deprecated": []}
    deprecated = sorted(
        {
            a
            for action in parser._actions
            if isinstance(action, DeprecatedAction)
            for opt in action.option_strings
            for a in args
            if a == opt or a.startswith(opt + "=")
        }
    )
    try:
        with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except _Rejected as e:
        return {"ok": False, "error": str(e), "deprecated": deprecated}
    except SystemExit as e:  # an action that exits (e.g. --help)
        return {"ok": False, "error": f"the parser exited ({e.code}) on these arguments", "deprecated": deprecated}
    return {"ok": True, "error": None, "deprecated": deprecated}


def main() -> int:
    torchvision_without_kernels()
    import sglang

    version = getattr(sglang, "__version__", "unknown")
    parser = build_parser()
    if sys.argv[1:] == ["--version"]:
        _answer(version)
        return 0
    if sys.argv[1:] == ["--flags"]:
        flags = sorted(o for a in parser._actions for o in a.option_strings)
        _answer(json.dumps({"version": version, "flags": flags}))
        return 0
    argvs = json.load(sys.stdin)
    if not isinstance(argvs, list) or not all(isinstance(a, list) for a in argvs):
        sys.stderr.write("stdin must be a JSON list of argv lists\n")
        return 2
    _answer(json.dumps({"version": version, "results": [check(parser, [str(x) for x in a]) for a in argvs]}))
    return 0


def _answer(line: str) -> None:
    """The one line this script answers its caller with, on stdout (the sglang venv's process is not a logger's)."""
    sys.stdout.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
