"""``shimkit audit [MODEL ...]``: predict, on Linux, which kernels a model's Metal lowering calls
(``--backend cuda``: lower for CUDA for real, on a machine with a GPU).

Exit status: 0 every model audited clean; 1 a finding in some model (a missing kernel or runtime function,
wrong numbers, an op that stops at to_edge or export); 2 the audit could not run for some model (bad MODEL,
a lowering error, an audit limitation, an unsupported torch) — 2 wins over 1 because a partial audit cannot
vouch for anything.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Iterator, TextIO

from shimkit._interrupts import interrupts_held
from shimkit._progress import listen as listen_to_stages
from shimkit.audit.chart import chart_audit
from shimkit.audit.exit_status import EXIT_INCOMPLETE

DESCRIPTION = """\
Run ExecuTorch's Metal lowering (torch.export, to_edge_transform_and_lower with MetalPartitioner,
MetalBackend.preprocess, Inductor's cpp-wrapper codegen for mps) on fake mps tensors, compiling
nothing, and report every kernel the generated wrapper calls: the plugin providing it, or MISSING
with the graph nodes and source lines behind it and what would fix it.

MODEL is a bundled zoo name, path/to/file.py:factory (factory() returns (model, example_inputs)) or
a saved .pt2 ExportedProgram. Without MODEL the whole bundled zoo is audited.

`shimkit merge A.json B.json ...` combines --json reports (e.g. of --shard runs) into one, with the
summary and exit status recomputed. (`shimkit audit merge A.json ...` still does, deprecated, for one release.)

--backend cuda lowers for real through ExecuTorch's CudaBackend (Inductor's CUDA codegen, Triton, nvcc)
with the same registry-derived configuration and the same report; it needs a CUDA GPU (docs/cuda.md).
"""

EPILOG = """\
exit status: 0 all clean, 1 findings in a model (missing kernels or runtime functions, wrong numbers with
--check-numerics or --execute, an op that stops at to_edge or export), 2 the audit could not run, 130 interrupted
(the report still covers the models audited so far; see docs/audit.md)
"""


# About 11 days: the caller's wait on a worker (poll(2), in milliseconds of a C int) overflows past 24.8 days.
LONGEST_TIMEOUT_S = 1e6


def _metal_runtime_tree(text: str) -> Path:
    """``--metal-runtime``'s value: an ExecuTorch checkout with a Metal runtime, refused while parsing otherwise."""
    from shimkit.runtime.sources import checked_metal_runtime_tree

    try:
        return checked_metal_runtime_tree(text, "--metal-runtime")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--metal-runtime=")) from None


def _timeout_seconds(text: str) -> float:
    """``--timeout``'s value, refused while parsing: 0, a negative number, NaN or infinity cannot bound an
    audit (a negative one made every worker fail with a traceback)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a number of seconds, got {text!r}") from None
    if not 0 < seconds <= LONGEST_TIMEOUT_S:  # also false for NaN
        raise argparse.ArgumentTypeError(f"takes a positive number of seconds, at most {LONGEST_TIMEOUT_S:.0f}, "
                                         f"got {text!r}")
    return seconds


def _workers(text: str) -> int:
    """``-j``'s value, refused while parsing (before the seconds of imports an audit starts with)."""
    try:
        workers = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a positive number of workers, got {text!r}") from None
    if workers < 1:
        raise argparse.ArgumentTypeError(f"takes a positive number of workers, got {text!r}")
    return workers


def _shard_selector(text: str) -> str:
    """``--shard``'s ``K/N``, refused while parsing unless ``1 <= K <= N``."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise argparse.ArgumentTypeError(f"takes K/N with integers 1 <= K <= N, got {text!r}")
    return text


def _cache_dir(text: str) -> str:
    """``--cache-dir``'s folder, refused while parsing when it is not a folder this user can write, or cannot
    be created in one (the store's own checks of ownership and modes follow when it is opened)."""
    path = os.path.abspath(text)
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise argparse.ArgumentTypeError(f"{text!r} cannot hold the cache: {existing} is not a folder")
    try:  # what access(2) says is no answer for root, nor in /proc: a folder made and removed is
        os.rmdir(tempfile.mkdtemp(prefix=".shimkit-probe-", dir=existing))
    except OSError as error:
        raise argparse.ArgumentTypeError(f"{text!r} cannot hold the cache: {existing} is not writable "
                                         f"({error.strerror})") from None
    return text


def _writable_file(text: str) -> str:
    """``--report``'s FILE, refused while parsing unless it can be written: not a folder, in an existing folder
    this user can write (found out after the audit, the report was lost with minutes of work)."""
    path = os.path.abspath(text)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file to write")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {folder} is not a folder")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: permission denied")
    try:  # as for --cache-dir: access(2) is no answer for root, nor in /proc; a file made and removed is
        descriptor, probe = tempfile.mkstemp(prefix=".shimkit-probe-", dir=folder)
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {folder} is not writable "
                                         f"({error.strerror})") from None
    return text


def _json_report(text: str) -> str:
    """A report ``shimkit merge`` reads, refused while parsing (before torch is imported) unless it is a
    readable ``shimkit audit --json`` document; whether several go together is checked when they are merged."""
    try:
        with open(text, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise argparse.ArgumentTypeError(f"{text}: not a readable JSON report ({reason})") from None
    if not isinstance(document, dict) or document.get("tool") != "shimkit audit":
        raise argparse.ArgumentTypeError(f"{text}: not a `shimkit audit --json` report")
    return text


# An op as --explain takes it, checked before torch is imported: ns::name[.overload], or name[.overload] in aten.
_OP_NAME = re.compile(r"(?:(?P<namespace>[A-Za-z_]\w*)::)?(?P<name>[A-Za-z_]\w*)(?:\.(?P<overload>[A-Za-z_]\w*))?")


def _op_name(text: str) -> str:
    """``--explain``'s op as ``ns::name.overload``, refused while parsing unless it is spelt like one (whether
    torch or a plugin defines it is known only once they are imported)."""
    match = _OP_NAME.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"takes an op such as aten::cdist or aten::cdist.default, got {text!r}")
    return f"{match['namespace'] or 'aten'}::{match['name']}.{match['overload'] or 'default'}"


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("models", nargs="*", metavar="MODEL",
                        help="zoo name, path/to/file.py:factory or file.pt2 (default: the whole zoo)")
    parser.add_argument("--backend", choices=("metal", "cuda"), default="metal",
                        help="the ExecuTorch backend to lower for: metal (on fake mps tensors, any machine; the "
                             "default) or cuda (the real lowering; needs a CUDA GPU)")
    parser.add_argument("--no-plugins", action="store_true",
                        help="audit the stock upstream backend, without shimkit's registry")
    parser.add_argument("--json", action="store_true",
                        help="print the JSON report (schema in docs/audit.md) instead of text")
    parser.add_argument("--check-numerics", action="store_true",
                        help="also run each program handed to Inductor on the CPU, at the example sizes and "
                             "at other sizes its dynamic dimensions allow, against eager (max error per output)")
    parser.add_argument("--float64", choices=("refuse", "float32"), default="refuse",
                        help="float64 computation (Metal has no double): 'refuse' lowers it as written, which fails "
                             "(the default); 'float32' computes it as float32 and lists every node whose precision "
                             "changed")
    parser.add_argument("--execute", action="store_true",
                        help="compile the C++ program AOTInductor generates for each delegate and its Metal kernels "
                             "with the host compiler, link shimkit's stand-in of ExecuTorch's Metal runtime and the "
                             "plugins' adapters, and run the whole program on the CPU against eager, as "
                             "--check-numerics does (Metal only)")
    parser.add_argument("--metal-runtime", type=_metal_runtime_tree, default=None, metavar="DIR",
                        help="with --execute: link ExecuTorch's own Metal runtime instead of shimkit's stand-in, "
                             "compiled from the checkout DIR (its backends/apple/metal/runtime) against shimkit's "
                             "Objective-C runtime and CPU Metal/MPSGraph (also: $SHIMKIT_METAL_RUNTIME=DIR)")
    parser.add_argument("-j", "--jobs", type=_workers, default=os.cpu_count() or 1, metavar="N",
                        help="audit models in N worker processes, one merged report (default: the number of "
                             "cores; one model is audited in this process, unless --timeout or --execute is "
                             "given: then in one worker)")
    parser.add_argument("--timeout", type=_timeout_seconds, default=None, metavar="SECONDS",
                        help="a model not audited within SECONDS is reported as an error, the others are kept "
                             "(each model is audited in a worker process that can be stopped, also with -j 1)")
    parser.add_argument("--shard", type=_shard_selector, metavar="K/N",
                        help="audit only the K-th of N deterministic slices of the models (CI matrices); "
                             "combine the --json reports with `shimkit merge A.json B.json ...`")
    parser.add_argument("--suite", action="append", default=[], metavar="SUITE[:PATTERN]",
                        help="also audit the models of an installed library's suite, e.g. transformers or "
                             "'transformers:*bert*' (random weights from configs, no downloads; "
                             "pip install shimkit[suites])")
    parser.add_argument("--report", type=_writable_file, metavar="FILE",
                        help="also audit stock (--no-plugins) and write a Markdown coverage table to FILE: "
                             "model, status with shimkit, missing kernels, stock status")
    parser.add_argument("--cache-dir", type=_cache_dir, metavar="DIR",
                        help="the artifact store where audit results are kept (in its audit/ folder) and reused "
                             "for unchanged models, options, versions and plugins (default: "
                             "$XDG_CACHE_HOME/shimkit, else ~/.cache/shimkit)")
    parser.add_argument("--no-cache", action="store_true",
                        help="audit every model afresh, reading and writing no cache")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="let a .pt2 model unpickle what it holds (tensor subclasses, Python objects): "
                             "unpickling runs any code the file names, so only for a file trusted like a .py")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--list-zoo", action="store_true", help="list the bundled zoo models and exit")
    parser.add_argument("--explain", type=_op_name, metavar="OP",
                        help="audit nothing: print, per device, every plugin's claim on OP (shim and kernel, "
                             "decomposition, pre_edge, eliminating pass, generated code), blocked ones too, which one "
                             "provides it and why (e.g. aten::cdist)")
    return parser


def _progress(stream: TextIO):
    """A line per model on ``stream`` ("[1/3] name ... clean (2.10 s)"); on a terminal, the line says what
    the audit is doing meanwhile (exporting, compiling, building 3 of 12 kernels...: shimkit._progress),
    rewritten in place. A log gets the finished lines alone."""
    started: dict[int, float] = {}
    live = stream.isatty()
    erase = "\r\x1b[K" if live else ""

    def say(subject: str, text: str) -> None:
        stream.write(f"{erase}{subject}: {text}")
        stream.flush()

    if live:
        listen_to_stages(say)

    def report(index, total, name, audit):
        if audit is None:
            started[index] = time.perf_counter()
            stream.write(f"{erase}[{index + 1}/{total}] {name} ...")
        else:
            stream.write(erase + f"[{index + 1}/{total}] {name} ..." if live else "")
            if isinstance(audit, list) and len(audit) > 1:  # a program of several methods: a line each
                stream.write(f" {len(audit)} methods\n")
                for entry in audit:
                    stream.write(f"    {entry['name']}: {outcome(entry)}\n")
            elif isinstance(audit, list):
                stream.write(f" {outcome(audit[0])}\n")
            else:  # a ModelAudit of this process, timed here
                stream.write(f" {audit.status} ({time.perf_counter() - started[index]:.2f} s)\n")
        stream.flush()

    def outcome(entry: dict) -> str:
        """A report entry's status and its own time (-j: not the wait for it)."""
        status = entry["status"]
        if entry.get("cached"):  # the seconds are those of the run that was cached
            from shimkit.audit.report import when_audited

            status += f", from the cache of {when_audited(entry['audited_at'])}" \
                if entry.get("audited_at") else ", from the cache"
        return f"{status} ({entry['timings_s']['total']:.2f} s)"

    return report


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """Keep torch's, torchao's and ExecuTorch's import-time and experimental-API chatter out of the
    report: warnings are ignored and log records below ERROR dropped for the run, then restored. (Raising
    their loggers' levels did not hold: importing Inductor sets torch's back.)"""
    disabled = logging.root.manager.disable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(max(disabled, logging.WARNING))
        try:
            yield
        finally:
            logging.disable(disabled)

@contextlib.contextmanager
def _pickle_trust(trusted: bool) -> Iterator[None]:
    """``--trust-pickle`` for this run and the workers it forks or spawns (they read the environment),
    restored afterwards: a caller running the audit in its own process keeps its environment."""
    from shimkit._patching import ScopedPatches
    from shimkit.audit.loader import TRUST_PICKLE_ENV

    patches = ScopedPatches()
    if trusted:
        patches.replace_item(os.environ, TRUST_PICKLE_ENV, "1")
    try:
        yield
    finally:
        patches.undo()


def _in_workers(args: argparse.Namespace, models: int) -> bool:
    """Whether ``models`` models are audited in forked workers. A timeout can only stop a process, and a
    compiled program that crashes (--execute) must take down a worker, not the audit: then even one model
    goes to a worker."""
    return models > 0 and ((args.jobs > 1 and models > 1) or args.timeout is not None or args.execute)


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    from shimkit.audit.zoo import ZOO

    if is_deprecated_merge(args.models):
        stderr.write(MERGE_DEPRECATED)
        return merge(args.models[1:], args.json, stdout, stderr, report=args.report, prog="shimkit audit merge")
    if args.explain:
        return explain(args, stdout, stderr)
    if args.list_zoo:
        width = max(map(len, ZOO))
        for model in ZOO.values():
            stdout.write(f"{model.name:<{width}}  {model.description}\n")
        return 0

    with _quiet_libraries():  # as in run_command: the imports' chatter is no part of the report
        from shimkit.audit.fake_mps import AuditEnvironmentError, check_torch_version
        from shimkit.audit.cache import AuditCache, default_cache_dir
        from shimkit.audit.options import AuditOptions, Numerics
        from shimkit.audit.parallel import audit_in_process, audit_in_workers, shard
        from shimkit.audit.report import document_of
        from shimkit.audit.suites import SuiteError, suite_models
        from shimkit.audit.targets import TARGETS, TargetUnavailableError
        from shimkit.registry import ShimkitPluginError

    target = TARGETS[args.backend]
    execute = args.execute
    if args.metal_runtime is not None:
        if not execute:
            stderr.write("shimkit audit: --metal-runtime DIR chooses the runtime --execute links; give --execute\n")
            return EXIT_INCOMPLETE
        from shimkit.runtime.sources import METAL_RUNTIME_VARIABLE

        os.environ[METAL_RUNTIME_VARIABLE] = str(args.metal_runtime)  # for this process and its workers
    if execute and target.device != "mps":
        stderr.write("shimkit audit: --execute runs generated Metal programs; --backend cuda checks numerics on the "
                     "GPU with --check-numerics\n")
        return EXIT_INCOMPLETE
    options = AuditOptions(plugins=not args.no_plugins, target=target, float64=args.float64,
                           numerics=Numerics.EXECUTE if execute else args.check_numerics)
    try:
        check_torch_version()
        target.check_available()
    except (AuditEnvironmentError, TargetUnavailableError) as error:
        stderr.write(f"shimkit audit: {error}\n")
        return EXIT_INCOMPLETE
    suites = args.suite
    try:
        suite_specs = [spec for argument in suites for spec in suite_models(argument)]
    except SuiteError as error:
        stderr.write(f"shimkit audit: {error}\n")
        return EXIT_INCOMPLETE
    specs = [*args.models, *suite_specs] if args.models or suite_specs else list(ZOO)
    jobs = args.jobs
    if args.shard:
        specs = shard(specs, args.shard)
    cache = None if args.no_cache else AuditCache(args.cache_dir or default_cache_dir())
    timeout = args.timeout
    in_workers = _in_workers(args, len(specs))
    progress = None if args.quiet else _progress(stderr)
    try:
        # What models and factories print goes to stderr: stdout carries the report alone.
        with _quiet_libraries(), _pickle_trust(args.trust_pickle), \
                contextlib.redirect_stdout(stderr):
            def audit(options: AuditOptions) -> dict:
                if in_workers:
                    models, interrupted = audit_in_workers(specs, options, jobs=min(jobs, len(specs)),
                                                           timeout=timeout, on_progress=progress, cache=cache)
                else:
                    models, interrupted = audit_in_process(specs, options, cache=cache, on_progress=progress)
                return document_of(models, plugins=options.plugins, interrupted=interrupted, target=target)

            document = audit(options)
            if not args.no_plugins:
                document["plugin_conflicts"], document["plugin_problems"] = _plugin_report(target, stderr)
            if args.report:
                stock = document if args.no_plugins else audit(options.stock())
                with open(args.report, "w", encoding="utf-8") as handle:
                    handle.write(coverage_table(document, stock))
    except ShimkitPluginError as error:
        stderr.write(f"shimkit audit: the plugin registry cannot be built: {error}\n")
        return EXIT_INCOMPLETE
    finally:
        listen_to_stages(None)
    return _write(document, args.json, stdout)


def _plugin_report(target: Any, stderr: TextIO) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """For this audit's device, as ``shimkit plugins --json`` lists them, with why each contest went to its
    winner: the claims several active plugins made (who won, who was left out), and the plugins reported and
    skipped, found while deriving the backend (the library warnings the audit keeps quiet), each also as a line
    on stderr."""
    from shimkit.audit.provenance import contest_why
    from shimkit.backend import get_registry

    registry = get_registry()
    contests = [c.as_json(target.device) for c in registry.backend_config(target.device).contests]
    for problem in registry.problems:
        stderr.write(f"shimkit audit: plugin skipped: {problem.describe()}\n")
    return [{**c, "why": contest_why(c, registry)} for c in contests], [p.as_json() for p in registry.problems]


# What --explain prints alone: options that audit models make no sense with it.
_AUDIT_OPTIONS = ("models", "suite", "report", "shard", "check_numerics", "execute", "timeout", "list_zoo")


def explain(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``shimkit audit --explain OP``: every plugin's claim on OP and who provides it, per device."""
    given = [name for name in _AUDIT_OPTIONS if getattr(args, name)]
    if given:
        stderr.write(f"shimkit audit: --explain audits nothing; it takes no {', '.join(given).replace('_', '-')}\n")
        return EXIT_INCOMPLETE
    with _quiet_libraries():
        import torch

        from shimkit.audit.provenance import explain as explain_op, explanation
        from shimkit.backend import get_registry
        from shimkit.registry import ShimkitPluginError
        from shimkit.registry.records import DEVICES
        from shimkit.registry.ops import try_resolve_op

    op = args.explain
    try:
        with _quiet_libraries():
            registry = get_registry()
            claimed = {name for entry in registry.op_plugins(include_blocked=True)
                       for name in (*entry.record.ops, *(s.op for s in entry.record.shims))}
            if try_resolve_op(op) is None and op not in claimed:
                known = {f"{name}.default" for name in torch._C._dispatch_get_all_op_names()} | claimed
                close = difflib.get_close_matches(op, sorted(known), n=3)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                stderr.write(f"shimkit audit: --explain: no op {op} is defined by torch {torch.__version__} or "
                             f"claimed by a plugin{hint}\n")
                return EXIT_INCOMPLETE
            if args.json:
                json.dump(explanation(op, registry, DEVICES), stdout, indent=2)
                stdout.write("\n")
            else:
                stdout.write(explain_op(op, registry, DEVICES))
    except ShimkitPluginError as error:
        stderr.write(f"shimkit audit: the plugin registry cannot be built: {error}\n")
        return EXIT_INCOMPLETE
    return 0


def coverage_table(audited: dict, stock: dict | None) -> str:
    """The ``--report`` Markdown: per model (grouped by family: zoo, ``suite/family``), the status with
    the audited setting, its missing kernels, and the stock status (a column left out without ``stock``:
    ``shimkit merge`` of reports with plugins alone); then what provided each kernel and decomposition (and
    who else claimed it), and every contested claim with its winner and why."""
    setting = "shimkit" if audited["plugins"] else "stock"
    lines = [f"# shimkit audit coverage ({len(audited['models'])} models)", ""]
    summary = audited["summary"]
    if stock is None:
        lines += [f"| model | {setting} | missing kernels |", "| --- | --- | --- |"]
        lines += [f"| `{model['name']}` | {model['status']} | {_cell(_what_is_missing(model))} |"
                  for model in audited["models"]]
        lines += ["", f"{summary['clean']} of {summary['models']} clean with {setting}."]
    else:
        stock_status = {m["name"]: m["status"] for m in stock["models"]}
        lines += [f"| model | {setting} | missing kernels | stock |", "| --- | --- | --- | --- |"]
        for model in audited["models"]:
            lines.append(f"| `{model['name']}` | {model['status']} | {_cell(_what_is_missing(model))} | "
                         f"{stock_status.get(model['name'], '?')} |")
        lines += ["", f"{summary['clean']} of {summary['models']} clean with {setting}; "
                  f"{sum(s == 'clean' for s in stock_status.values())} stock."]
    reports = [audited] if stock is None else [stock, audited]
    lines += ["", chart_audit(reports, ["<this audit>" if stock is None else "<this audit and its stock run>"],
                              command="shimkit audit --report")]
    provided = [row for model in audited["models"] for row in _provenance_rows(model)]
    if provided:
        lines += ["", "## What provided each kernel and decomposition", "",
                  "| model | kernel or op | how | provided by | other claims |", "| --- | --- | --- | --- | --- |",
                  *provided]
    if audited.get("plugin_conflicts"):
        lines += ["", "## Contested claims", "", "| claim | device | winner | left out | why |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {_cell(c['what'])} | {c['device']} | `{c['winner']}` | "
                  f"{', '.join(f'`{name}`' for name in c['left_out'])} | {_cell(c.get('why') or c['settled_by'])} |"
                  for c in audited["plugin_conflicts"]]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: pipes escaped, lines joined."""
    return " ".join(text.replace("|", "\\|").split())


def _what_is_missing(model: dict) -> str:
    failure = model["failure"]
    if model["missing"]:
        return ", ".join(f"`{k}`" for k in model["missing"])
    if failure is None:
        return ""
    if failure["kind"] == "stopped":
        return f"stops at `{failure['op']}` in {failure['phase']}" if failure["op"] else f"stops in {failure['phase']}"
    return shorten(failure["message"].splitlines()[0])


# How long a failure's message may be in a --report table cell.
MESSAGE_CELL_WIDTH = 120


def shorten(text: str, width: int = MESSAGE_CELL_WIDTH) -> str:
    """``text`` in about ``width`` characters for a table cell, cut after a whole word with "…", never inside a
    URL: one that would pass ``width`` is kept whole when it is the first thing cut (the link is what a reader
    follows), and the words after it are left out. A first word longer than ``width`` that is no URL is cut.

    >>> shorten("see https://github.com/pytorch/executorch/issues/1 for why", 20)
    'see https://github.com/pytorch/executorch/issues/1 …'
    >>> shorten("a b c d", 3)
    'a b …'
    """
    if len(text) <= width:
        return text
    words = text.split()
    kept: list[str] = []
    length = 0
    for word in words:
        grown = length + len(word) + bool(kept)
        if grown > width:
            if "://" in word:  # a URL: whole, or not at all past this point
                kept.append(word)
            elif not kept:
                kept.append(word[:width])
            break
        kept.append(word)
        length = grown
    return " ".join(kept) + (" …" if kept != words else "")


def _provenance_rows(model: dict) -> list[str]:
    """A Markdown row per supported kernel and per decomposed op of ``model``: how, by which plugin, who else."""
    def others(claims: list[dict]) -> str:
        return "; ".join(f"`{c['plugin']}`: {c['status']}" for c in claims)

    rows = []
    for kernel in model["kernels"]:
        provider = kernel["provider"]
        if kernel["status"] == "supported" and provider is not None:
            by = f"`{provider['plugin']}` ({provider['source']})" if provider["plugin"] else provider["source"]
            rows.append(f"| `{model['name']}` | `{kernel['name']}` | kernel ({kernel['mechanism']}) | {_cell(by)} | "
                        f"{_cell(others(provider.get('claims', [])))} |")
    for decomposed in model.get("decompositions", ()):
        by = f"`{decomposed['plugin']}` ({decomposed['source']})" if decomposed["plugin"] else decomposed["source"]
        rows.append(f"| `{model['name']}` | `{decomposed['op']}` | decomposed ({decomposed['stage']}) | {_cell(by)} | "
                    f"{_cell(others(decomposed['claims']))} |")
    return rows


def _write(document: dict, as_json: bool, stdout: TextIO) -> int:
    from shimkit.audit.report import render_text

    if as_json:
        json.dump(document, stdout, indent=2)
        stdout.write("\n")
    else:
        stdout.write(render_text(document) + "\n")
    return document["exit_code"]


MERGE_DEPRECATED = ("shimkit audit: `shimkit audit merge A.json ...` is deprecated and will be removed in the next "
                    "release; use `shimkit merge A.json ...`\n")


def is_deprecated_merge(models: list[str]) -> bool:
    """Whether ``shimkit audit MODEL ...`` is the deprecated spelling of ``shimkit merge``: ``merge`` followed by
    ``.json`` files alone. No MODEL ends in .json (models are zoo or suite names, file.py:factory, .pt2), so a
    model named merge is audited as one: ``shimkit audit merge``, ``shimkit audit merge other.py:make``."""
    return len(models) > 1 and models[0] == "merge" and all(m.endswith(".json") for m in models[1:])


def merge(paths: list[str], as_json: bool, stdout: TextIO, stderr: TextIO, *, report: str | None = None,
          stock: list[str] | None = None, prog: str = "shimkit merge") -> int:
    """``shimkit merge A.json B.json ... [--report FILE [--stock S.json ...]]``: one report of several, on
    ``stdout``; with ``report``, also the ``--report`` Markdown, its stock column from the merged ``stock``
    reports (``--no-plugins`` ones), or from the reports themselves when they are stock, else left out."""
    with _quiet_libraries():  # the report's modules import torch
        from shimkit.audit.parallel import MergeError, merge_reports
        from shimkit.audit.report import target_of

    try:
        document = merge_reports(paths)
        stock_document = merge_reports(stock) if stock else None
    except MergeError as error:
        stderr.write(f"{prog}: {error}\n")
        return EXIT_INCOMPLETE
    if stock and stock_document is not None:
        problem = (f"--stock: {stock[0]} was audited with plugins; --stock takes `--no-plugins` reports"
                   if stock_document["plugins"] else
                   f"--stock: {stock[0]} was audited for {target_of(stock_document).backend}, the reports for "
                   f"{target_of(document).backend}" if target_of(stock_document) != target_of(document) else None)
        if problem:
            stderr.write(f"{prog}: {problem}\n")
            return EXIT_INCOMPLETE
    if report:
        if stock_document is None and not document["plugins"]:
            stock_document = document
        with open(report, "w", encoding="utf-8") as handle:
            handle.write(coverage_table(document, stock_document))
    return _write(document, as_json, stdout)


MERGE_DESCRIPTION = """\
Combine `shimkit audit --json` reports (of --shard runs, of several machines or suites) into one: the
models of each in the order given, the summary and exit status recomputed. The reports must share a schema
version, a plugin setting and a backend.

  shimkit audit --json --shard 1/2 > shard1.json     # on one machine
  shimkit audit --json --shard 2/2 > shard2.json     # on another
  shimkit merge shard1.json shard2.json              # one report; exit status as one audit's
  shimkit merge shard*.json --report coverage.md     # also the Markdown table of `shimkit audit --report`
"""

MERGE_EPILOG = """\
exit status: as `shimkit audit`'s for the merged models (0 all clean, 1 findings, 2 a model could not be audited,
130 a report was interrupted); 2 also when the reports cannot be read or merged
"""


def configure_merge_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``shimkit merge``'s arguments, each checked while parsing, before torch is imported."""
    parser.description = MERGE_DESCRIPTION
    parser.epilog = MERGE_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("reports", nargs="+", type=_json_report, metavar="REPORT",
                        help="a `shimkit audit --json` report")
    parser.add_argument("--json", action="store_true",
                        help="print the merged JSON report (schema in docs/audit.md) instead of text")
    parser.add_argument("--report", type=_writable_file, metavar="FILE",
                        help="also write the Markdown coverage table `shimkit audit --report` writes to FILE")
    parser.add_argument("--stock", action="append", type=_json_report, metavar="REPORT",
                        help="with --report: a `shimkit audit --no-plugins --json` report of the same models, for "
                             "the table's stock column (repeatable; without it the column is left out, unless "
                             "the reports merged are stock themselves)")
    parser.set_defaults(run=run_merge, parser=parser)
    return parser


def run_merge(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``shimkit merge`` as a command."""
    if args.stock and not args.report:
        args.parser.error("--stock fills the stock column of --report FILE; give --report too")
    return merge(args.reports, args.json, stdout or sys.stdout, stderr or sys.stderr, report=args.report,
                 stock=args.stock)


def run_command(args: argparse.Namespace) -> int:
    """``shimkit audit`` as a command: the process is shimkit's, so the heap its imports left is
    frozen once before auditing (:func:`~shimkit.audit.speed.freeze_imported_heap`); :func:`run`
    itself, for callers inside their own process, leaves the garbage collector alone."""
    if args.list_zoo or args.explain or is_deprecated_merge(args.models):
        return run(args)
    aside = _compile_runtime_core_aside(args)
    try:
        return _run_command(args)
    finally:
        if aside is not None:
            _stop(aside)


def _compile_runtime_core_aside(args: argparse.Namespace) -> subprocess.Popen | None:
    """For ``--execute``: the stand-in runtime's core (``shimkit.runtime.sources``), which every program's
    runtime compiles, compiled by a process of its own, one unit at a time, while this one spends seconds
    importing torch and ExecuTorch on one core (a tiny CNN's audit into an empty build folder about 2 s
    sooner). The audit finds the objects in the artifact store, or waits there for one being compiled; it
    stops the process when it ends. A thread would not do: the audit's workers fork from this process."""
    if not (args.execute and args.backend == "metal"):
        return None
    try:
        # A session of its own, so that stopping it stops the compiler it runs too.
        return subprocess.Popen([sys.executable, "-m", "shimkit.runtime.sources"],
                                env={**os.environ, "SHIMKIT_BUILD_JOBS": "1"}, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:  # the audit compiles the core itself
        return None


def _stop(aside: subprocess.Popen) -> None:
    """Stops the process :func:`_compile_runtime_core_aside` started, and the compiler it runs (a unit cut
    short leaves nothing in the store: its staging folder is removed, its lock released)."""
    if aside.poll() is None:
        try:
            os.killpg(aside.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        aside.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(aside.pid, signal.SIGKILL)
        aside.wait()


def _run_command(args: argparse.Namespace) -> int:
    from shimkit.audit.speed import freeze_imported_heap

    with interrupts_held() as held:
        # Seconds of importing torch, ExecuTorch and Inductor: a Ctrl-C waits for them, then ends the
        # audit with its report (a Ctrl-C inside an import left a traceback and no report).
        with _quiet_libraries():  # ExecuTorch imports torchao, which logs the libraries it could not load
            import shimkit.audit.parallel, shimkit.audit.zoo  # noqa: F401
            # A model the cache answers needs no lowering modules (the zoo answered whole: 8.5-9.5 s with
            # them, 6.3-7.2 s without). They are imported first where a model is surely lowered and where
            # the import would count against --timeout; else by the first model lowered, in its worker:
            # -j workers import them side by side, in the wall time the parent took alone (cold zoo: 41 s
            # either way).
            freeze_imported_heap(lowering=args.no_cache or args.timeout is not None)
    if held:
        return _write(_interrupted_report(args, "before the first model"), args.json, sys.stdout)
    rendered = io.StringIO()
    with _stdout_descriptor_to_stderr():
        try:
            code = run(args, stdout=rendered)
        except KeyboardInterrupt:  # outside the models' loop (deriving the plugin report, say)
            rendered = io.StringIO()
            code = _write(_interrupted_report(args, "outside the models' audits"), args.json, rendered)
    # Written whole: a Ctrl-C in the middle of it left half a JSON document.
    with interrupts_held(), open(os.dup(sys.stdout.fileno()), "w", encoding="utf-8") as report:
        report.write(rendered.getvalue())
    return code


def _interrupted_report(args: argparse.Namespace, when: str) -> dict[str, Any]:
    """The report of an audit interrupted where no model's result is at hand: the first model it audits,
    interrupted, as ``-j`` reports the model it waited for."""
    from shimkit.audit.parallel import failure_entry
    from shimkit.audit.report import document_of
    from shimkit.audit.targets import TARGETS
    from shimkit.audit.workers import TaskFailure
    from shimkit.audit.zoo import ZOO

    specs = args.models or list(ZOO)
    models = failure_entry(specs[0], TaskFailure("interrupted", f"KeyboardInterrupt: interrupted {when}", 0.0)
                           ) if specs else []
    return document_of(models, plugins=not args.no_plugins, interrupted=True,
                       target=TARGETS[args.backend])


@contextlib.contextmanager
def _stdout_descriptor_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr for the block, so that native code (a C++ extension, a
    compiler) printing during an audit cannot corrupt the report either."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv: list[str] | None = None) -> int:
    parser = configure_parser(argparse.ArgumentParser(prog="shimkit audit"))
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
