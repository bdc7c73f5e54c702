"""The one argument style every subcommand shares.

Paths come as named options (``--passages``, ``--out``, ...); the slice of ``config.yaml`` a
step uses comes as one JSON object in ``--cfg``, exactly as the Snakemake rule passes it
through ``params:``. A subcommand never reads ``config.yaml`` itself, so what reruns a rule
(its params) is exactly what changes its behaviour.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--cfg is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--cfg must be a JSON object")
    return value


def add_cfg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cfg",
        type=_json_object,
        default={},
        help="JSON object: the config slice this step uses (passed by the Snakemake rule)",
    )
    # Kept out of --cfg: the cores a job gets are a scheduling matter, not a result-changing
    # setting (and Snakemake ignores params derived from `threads` when deciding reruns).
    parser.add_argument(
        "--threads", type=int, default=None, help="cores this step may use (sets cfg.threads)"
    )


def add_runtime(parser: argparse.ArgumentParser, *keys: str) -> None:
    """Options for cfg keys that change no output (batch sizes, checkpoint cadence): the rule
    passes them outside ``--cfg`` so that changing one reruns nothing; they land in cfg."""
    parser.set_defaults(runtime_keys=keys)
    for key in keys:
        parser.add_argument(
            "--" + key.replace("_", "-"), dest=key, type=int, default=None,
            help=f"sets cfg.{key} (changes no output)",
        )  # fmt: skip


def merge_threads(args: argparse.Namespace) -> None:
    """Fold ``--threads`` and the runtime options into ``args.cfg``."""
    if not hasattr(args, "cfg"):
        return
    extra = {"threads": getattr(args, "threads", None)}
    extra.update({k: getattr(args, k, None) for k in getattr(args, "runtime_keys", ())})
    args.cfg = {**args.cfg, **{k: v for k, v in extra.items() if v is not None}}


def set_threads(threads: int | None) -> None:
    """Apply ``cfg.threads`` (as ``merge_threads`` folds ``--threads`` in) to torch."""
    if threads:
        import torch  # lazy: ~1 s at CLI start-up, which imports this module

        torch.set_num_threads(int(threads))


def need(cfg: dict[str, Any], key: str, where: str = "--cfg") -> Any:
    """Fetch a required config value with an error that names the missing key."""
    if key not in cfg:
        raise SystemExit(f"error: {where} lacks the key '{key}'")
    return cfg[key]
