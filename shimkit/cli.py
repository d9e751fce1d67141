"""The ``shimkit`` command line (also ``python -m shimkit``).

``shimkit plugins``       list op plugins and passes with their source, ops, devices, shims and errors
``shimkit config DEVICE`` show what the registry derives for a device (``--cmake`` for kernel sources)
``shimkit audit``         predict Metal lowering on Linux (see docs/audit.md)
``shimkit merge``         combine ``shimkit audit --json`` reports (of ``--shard`` runs) into one
``shimkit cache``         show the artifact store's size per kind; ``clean`` and ``prune --max-size`` empty it
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

PLUGINS_SCHEMA_VERSION = 1


def plugins_report(registry) -> dict[str, Any]:
    """The ``shimkit plugins --json`` document (schema in docs/registry.md)."""
    plugins = []
    for entry in registry.op_plugins(include_blocked=True):
        plugin = entry.record
        plugins.append({
            "name": plugin.name,
            "source": entry.source.as_json(),
            "blocked": entry.blocked,
            "priority": plugin.priority,
            "ops": list(plugin.ops),
            "devices": list(plugin.devices),
            "shims": [{"op": s.op, "device": s.device, "symbol": s.symbol,
                       "recorded_names": list(s.recorded_names),
                       "provided_by_runtime": s.provided_by_runtime, "sources": list(s.sources),
                       "dense_operands": list(s.dense_operands)}
                      for s in plugin.shims],
            "decompositions": sorted(plugin.decompositions),
            "eliminated_by": dict(plugin.eliminated_by),
            "generated_on": {op: list(devices) for op, devices in plugin.generated_on.items()},
            "doc": plugin.doc,
        })
    passes = [{"name": e.record.name, "source": e.source.as_json(), "blocked": e.blocked,
               "stage": e.record.stage, "devices": list(e.record.devices) if e.record.devices else None,
               "after": list(e.record.after), "before": list(e.record.before), "doc": e.record.doc}
              for e in registry.pass_specs(include_blocked=True)]
    from shimkit.registry.records import DEVICES  # here: `shimkit --help` imports no torch

    # Deriving each device settles the plugins' competing claims, and reports those who lost a tie.
    conflicts = [contest.as_json(device) for device in DEVICES
                 for contest in registry.backend_config(device).contests]
    problems = [problem.as_json() for problem in registry.problems]
    # Entry points blocked by their own or their distribution's name are never imported, so no record of
    # theirs is above: each is listed here instead.
    loaded = {id(e.source) for e in [*registry.op_plugins(include_blocked=True),
                                     *registry.pass_specs(include_blocked=True)]}
    blocked_sources = [s.as_json() for s in registry.blocked_sources() if id(s) not in loaded]
    return {"schema_version": PLUGINS_SCHEMA_VERSION, "plugins": plugins, "passes": passes,
            "blocked_sources": blocked_sources, "conflicts": conflicts, "problems": problems}


# The widest a cell gets before it wraps: a plugin of many ops (linalg) made a row of 2,500 characters.
CELL_WIDTH = 72


def _table(rows: list[list[str]], header: list[str]) -> str:
    from tabulate import tabulate

    return tabulate(rows, header, tablefmt="simple", disable_numparse=True,
                    maxcolwidths=[CELL_WIDTH] * len(header))


def _print_plugins(report: dict[str, Any]) -> None:
    rows = []
    for p in report["plugins"]:
        how = [f"{s['device']}:{s['symbol']}" + ("" if s["provided_by_runtime"] else " (kernel)")
               for s in p["shims"]]
        how += [f"decomposes {op.split('::')[1]}" for op in p["decompositions"]]
        if p["eliminated_by"]:
            how.append(f"removed by {', '.join(sorted(set(p['eliminated_by'].values())))}")
        generated = sorted({device for devices in p["generated_on"].values() for device in devices})
        if generated:
            how.append(f"{len(p['generated_on'])} ops compiled by Inductor on {', '.join(generated)}")
        source = p["source"]["name"] if p["source"]["kind"] == "builtin" else \
            f"{p['source']['kind']}:{p['source']['name']}"
        ops = p["ops"][0].split("::")[1] + (f" +{len(p['ops']) - 1}" if len(p["ops"]) > 1 else "")
        rows.append([p["name"], source, "blocked" if p["blocked"] else "active", ops, "; ".join(how)])
    print(_table(rows, ["plugin", "source", "status", "ops", "provides"]))
    if report["passes"]:
        print()
        rows = [[p["name"], p["source"]["name"], p["stage"], ",".join(p["devices"] or ["all"]),
                 "blocked" if p["blocked"] else "active"] for p in report["passes"]]
        print(_table(rows, ["pass", "source", "stage", "devices", "status"]))
    if report["blocked_sources"]:
        print("\nblocked before loading (SHIMKIT_BLOCK_PLUGINS), not imported:")
        for source in report["blocked_sources"]:
            print(f"  {source['kind']} {source['name']!r} ({source['module']}"
                  + (f", from {source['distribution']})" if source["distribution"] else ")"))
    if report["conflicts"]:
        print("\nclaimed by several plugins:")
        for conflict in report["conflicts"]:
            print(f"  {conflict['what']}: {conflict['winner']!r} wins by {conflict['settled_by']}, "
                  f"{', '.join(map(repr, conflict['left_out']))} left out")
    if report["problems"]:
        print("\nplugins reported and skipped:")
        for problem in report["problems"]:
            print(f"  {problem['source']['kind']} {problem['source']['name']!r} "
                  f"({problem['source']['module']}): {problem['stage']}: {problem['message']}")


def _cmd_plugins(args: argparse.Namespace) -> int:
    from shimkit.backend import get_registry

    report = plugins_report(get_registry())
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        _print_plugins(report)
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    from shimkit.backend import backend_config
    from shimkit.runtime.generated import cmake_snippet, msl_adapter_source

    config = backend_config(args.device)
    if args.cmake:
        sys.stdout.write(cmake_snippet(config))
        return 0
    if args.msl_adapter:
        with open(args.msl_adapter, "w", encoding="utf-8") as handle:
            handle.write(msl_adapter_source(config))
        print(f"{args.msl_adapter}: {len(config.msl_shims)} MSL kernel(s), c-shim entry points for the "
              f"{len(config.elementwise_msl_shims)} elementwise one(s)", file=sys.stderr)
        return 0
    document = {
        "device": config.device,
        "fallback_kernels": list(config.fallback_kernels),
        "decomposition_table": sorted(str(op) for op in config.decomposition_table),
        "custom_c_shims": {str(op): protos for op, protos in config.custom_c_shims.items()},
        "passes": list(config.pass_names),
        "post_grad_passes": list(config.post_grad_pass_names),
        "kernel_sources": list(config.kernel_sources),
    }
    json.dump(document, sys.stdout, indent=2)
    print()
    return 0


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


# What `shimkit cache prebuild` compiles through shimkit.metal: a barrier-free kernel (its runtime library
# and metal_stdlib's precompiled header) and a cooperative one (libclang's precompiled header for the split).
_PREBUILD_KERNELS = """
#include <metal_stdlib>
using namespace metal;
kernel void shimkit_prebuild_fill(device float* out, uint i [[thread_position_in_grid]]) { out[i] = 0; }
kernel void shimkit_prebuild_group(device float* out, uint i [[thread_position_in_threadgroup]]) {
  threadgroup float shared[32];
  shared[i % 32] = i;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = shared[0];
}
"""


def _prebuild(root: str | None) -> tuple[Path, int, int]:
    """Builds what every program needs and no model decides (the stand-in runtime's objects, the AOTInductor
    interface every wrapper pastes in, shimkit.metal's runtime library and precompiled headers) into ``root``
    (default: the environment's prebuilt store)."""
    import os
    from concurrent.futures import Future, ThreadPoolExecutor

    from shimkit import store as artifacts

    target = root or artifacts.prebuilt_root()
    if target is None:
        raise artifacts.EnvironmentFailure(f"no prebuilt store: ${artifacts.PREBUILT_ENV} is empty")
    # Every build below takes its store from these: the target, and nothing prebuilt elsewhere.
    saved = {name: os.environ.get(name) for name in (artifacts.ROOT_ENV, artifacts.PREBUILT_ENV)}
    os.environ[artifacts.ROOT_ENV] = str(target)
    os.environ[artifacts.PREBUILT_ENV] = ""
    try:
        from shimkit.csrc.build import compile_objects
        from shimkit.metal.library import compile_shader
        from shimkit.runtime.program import compile_interface_object
        from shimkit.runtime.sources import compile_arguments, runtime_sources

        arguments = compile_arguments()
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # each compile takes a job slot
            builds: list[Future] = [pool.submit(compile_objects, [source], **arguments)
                                    for source in runtime_sources(())]
            builds.append(pool.submit(compile_shader, _PREBUILD_KERNELS))
            builds.append(pool.submit(compile_interface_object))
            for build in builds:
                build.result()
        rows = artifacts.usage(artifacts.default_store())
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return Path(target), sum(u.entries for u in rows), sum(u.bytes for u in rows)


def _cmd_cache(args: argparse.Namespace) -> int:
    from shimkit import store as artifacts

    try:
        if args.action == "prebuild":
            target, entries, size = _prebuild(args.root)
            print(f"{entries} entries ({_size(size)}) in {target}")
            return 0
        store = artifacts.default_store(Path(args.root) if args.root else None)
        if args.action == "clean":
            removed, freed = artifacts.clean(store, args.kind or None)
        elif args.action == "prune":
            removed, freed = artifacts.prune(store, args.max_size, args.kind or None)
        else:
            rows, prebuilt = artifacts.usage(store), artifacts.usage(store, prebuilt=True)
            if args.json:
                json.dump({"root": str(store.root), "max_bytes": artifacts.max_bytes(),
                           "kinds": [{"kind": u.kind, "entries": u.entries, "bytes": u.bytes} for u in rows],
                           "prebuilt": {"root": str(store.prebuilt) if prebuilt else None,
                                        "kinds": [{"kind": u.kind, "entries": u.entries, "bytes": u.bytes}
                                                  for u in prebuilt]}},
                          sys.stdout, indent=2)
                print()
                return 0
            print(f"{store.root} (cap {_size(artifacts.max_bytes())}, ${artifacts.MAX_SIZE_ENV})")
            table = [[u.kind, str(u.entries), _size(u.bytes)] for u in rows]
            table.append(["total", str(sum(u.entries for u in rows)), _size(sum(u.bytes for u in rows))])
            print(_table(table, ["kind", "entries", "size"]))
            if prebuilt:
                print(f"and, read-only, {store.prebuilt} (${artifacts.PREBUILT_ENV}): "
                      f"{sum(u.entries for u in prebuilt)} entries, {_size(sum(u.bytes for u in prebuilt))}")
            return 0
    except artifacts.EnvironmentFailure as error:
        print(f"shimkit cache: {error}", file=sys.stderr)
        return 2
    print(f"removed {removed} entries ({_size(freed)}) from {store.root}")
    return 0


def _max_size(text: str) -> int:
    from shimkit.store import parse_size

    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _configure_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", metavar="DIR", help="the store's folder (default: $SHIMKIT_BUILD_DIR, else "
                                                      "$XDG_CACHE_HOME/shimkit, else ~/.cache/shimkit)")
    parser.add_argument("--json", action="store_true", help="machine-readable output (the size table)")
    parser.set_defaults(run=_cmd_cache, action="show", kind=[])
    actions = parser.add_subparsers(dest="action")
    clean = actions.add_parser("clean", help="remove every entry no running process is building")
    prune = actions.add_parser("prune", help="remove the least recently used entries until the store fits")
    prune.add_argument("--max-size", required=True, type=_max_size, metavar="SIZE",
                       help="what the store may keep, in bytes or with K, M, G (e.g. 2G)")
    actions.add_parser("prebuild", help="build what every program needs into the environment's read-only store "
                                        "($SHIMKIT_PREBUILT_DIR, default <sys.prefix>/share/shimkit/prebuilt; "
                                        "--root: there instead)")
    for action in (clean, prune):
        action.add_argument("--kind", action="append", metavar="KIND",
                            help="only entries of this kind (repeatable; `shimkit cache` lists them)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shimkit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    plugins = commands.add_parser("plugins", help="list op plugins, passes and plugin errors")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(run=_cmd_plugins, parser=plugins)

    config = commands.add_parser("config", help="show the backend configuration derived for a device")
    config.add_argument("device", choices=("mps", "cuda"))
    config.add_argument("--cmake", action="store_true", help="print a CMake list of kernel sources")
    config.add_argument("--msl-adapter", metavar="FILE",
                        help="write the c-shim entry points of the plugins' MSL kernels (C++) to FILE")
    config.set_defaults(run=_cmd_config, parser=config)

    audit = commands.add_parser("audit", help="predict Metal lowering on Linux (default: the model zoo)",
                                description="Predict which kernels a Metal export needs and who provides "
                                            "them, on fake mps tensors. Exit 0: clean; 1: kernels "
                                            "missing; 2: the audit could not run.")
    _configure_audit(audit)
    audit.set_defaults(parser=audit)

    merge = commands.add_parser("merge", help="combine `shimkit audit --json` reports (of --shard runs) into one")
    _configure_merge(merge)

    cache = commands.add_parser("cache", help="show or empty the artifact store (builds and audit results)",
                                description="The artifact store holds every build and audit result shimkit "
                                            "caches (docs/reliability.md). Exit 2: the store cannot be used.")
    _configure_cache(cache)
    cache.set_defaults(parser=cache)

    return parser


def _configure_audit(parser: argparse.ArgumentParser) -> None:
    # The audit pulls in torch, executorch and Inductor: import it only when the command is used.
    from shimkit.audit.cli import configure_parser, run_command

    configure_parser(parser)
    parser.set_defaults(run=run_command)


def _configure_merge(parser: argparse.ArgumentParser) -> None:
    from shimkit.audit.cli import configure_merge_parser  # sets run and parser

    configure_merge_parser(parser)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # told by the subcommand's own parser, with its usage, not the top-level one's
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
