"""The ``ddlab`` command. Each sub-command lives in the module named for what it does;
this file only dispatches, so a learner finds the code behind a command in one hop."""
from __future__ import annotations

import importlib
import sys

# command -> (module, function taking argv and returning an exit code, one-line help)
COMMANDS = {
    "report": ("ddlab.report.runner", "cli", "measure this machine in one command and write an HTML report"),
    "doctor": ("ddlab.report.doctor", "cli", "what this machine has (GPUs, driver, CUDA, NCCL, frameworks, data)"),
    "data": ("ddlab.training.data", "cli", "make Fashion-MNIST available offline and verify it"),
    "topo": ("ddlab.system.topology_report", "cli", "read nvidia-smi topo -m (this machine or --file), rank pairs, best subsets"),
    "nccl-log": ("ddlab.measure.nccl_capture", "cli", "parse an NCCL_DEBUG=INFO log into a transport table"),
    "p2p": ("ddlab.measure.p2p_cli", "cli", "build and run the course's CUDA p2p bandwidth/latency test"),
    "allreduce": ("ddlab.measure.collectives_cli", "cli", "all-reduce bandwidth sweep under NCCL paths (or gloo on CPU)"),
    "train": ("ddlab.training.cli", "cli_train", "one Fashion-MNIST training run"),
    "experiment": ("ddlab.training.cli", "cli_experiment", "named experiments: scaling, nccl-paths"),
    "predict": ("ddlab.cost.predict", "cli", "predict a data-parallel step on N GPUs from the one-GPU step"),
}


def usage() -> str:
    lines = ["usage: ddlab COMMAND [options]   (ddlab COMMAND --help for each)", "", "commands:"]
    lines += [f"  {name:<12} {h}" for name, (_, _, h) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"ddlab: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    return int(getattr(importlib.import_module(module), func)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
