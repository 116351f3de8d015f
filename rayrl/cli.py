"""`rayrl train --config x.yaml key=value ...`: the same entry point the recipes use."""

from __future__ import annotations

import argparse
import json
import sys

from rayrl.config import Config, ConfigError, load_config


def parse_args(argv: list[str] | None = None, prog: str = "rayrl") -> Config:
    """--config FILE plus dotted key=value overrides -> Config; bad input exits 2 with the reason."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", help="YAML file with the run's sections")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rollout.batch_size=32")
    args = parser.parse_args(argv)
    try:
        return load_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def run(cfg: Config) -> dict:
    """Train and print the summary; a run that stopped early (SIGTERM, a dead learner rank) or cannot
    use its checkpoint directory exits with its message and code instead of a traceback."""
    from rayrl.checkpoint import StorageError
    from rayrl.faults import RunStopped
    from rayrl.trainer import train

    try:
        summary = train(cfg)
    except ConfigError as err:  # found before Ray started: the reward function, paths, the cluster address
        print(f"rayrl: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except (RunStopped, StorageError) as stop:
        print(f"rayrl: {stop}", file=sys.stderr)
        raise SystemExit(getattr(stop, "exit_code", 1)) from None
    print(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("train", "check-config"):
        print("usage: rayrl {train|check-config} [--config FILE] [key=value ...]", file=sys.stderr)
        raise SystemExit(2)
    command, rest = argv[0], argv[1:]
    cfg = parse_args(rest, prog=f"rayrl {command}")
    if command == "check-config":
        from rayrl.preflight import preflight

        try:
            preflight(cfg)
        except ConfigError as err:
            print(f"rayrl check-config: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        print(json.dumps(cfg.model_dump(mode="json"), indent=2))
        return
    run(cfg)


if __name__ == "__main__":
    main()
