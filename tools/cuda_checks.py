"""The CUDA checks ``tools/cuda_device.sh check`` runs on a machine with a GPU (docs/cuda.md).

Lowers the bundled zoo and the CUDA repros (``tools/cuda_models.py``) for real through ExecuTorch's
``CudaBackend``, stock and with shimkit's registry (``shimkit audit --backend cuda``), the shimkit run with
``--check-numerics`` (each program handed to Inductor compiled by torch's own AOTInductor and compared with
eager CUDA). Writes both JSON reports and ``cuda.md`` (per model: status, lowering time, max error) to
``--out``, and exits 1 when any model is not clean with shimkit, is worse than stock, or computes wrong
numbers: the regression test for the CUDA path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPROS = ("linear_cumsum", "sort_values", "sdpa_float32", "sdpa_bfloat16", "sdpa_bfloat16_blocks",
          "gru_sequence", "conv_transpose_upsampler", "latent_generator", "scatter_add_constant_index",
          "nonzero_of_where", "phase_head", "kaiser_spectrogram", "unique_counts", "stable_sort")
RANK = {"clean": 0, "unchecked": 1, "missing": 2, "wrong": 2, "stopped": 3, "limitation": 3, "error": 3,
        "interrupted": 4}


def model_specs() -> list[str]:
    from shimkit.audit.zoo import ZOO

    return [*ZOO, *(f"{HERE / 'cuda_models.py'}:{name}" for name in REPROS)]


def audit(specs: list[str], *, plugins: bool, jobs: int, timeout: float, out: Path, numerics: bool = True) -> dict:
    name = "shimkit" if plugins else "stock"
    command = [sys.executable, "-m", "shimkit", "audit", "--backend", "cuda", "--json", "-j", str(jobs),
               "--timeout", str(timeout), *([] if plugins else ["--no-plugins"]),
               *(["--check-numerics"] if numerics else []), *specs]
    # Each lowering compiles from scratch: no run is timed against another's Inductor or Triton caches.
    environment = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    started = time.perf_counter()
    with open(out / f"audit-{name}.log", "w") as log:  # written as it goes: a cut-short run still says how far it got
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True, env=environment)
    elapsed = time.perf_counter() - started
    if not result.stdout.strip():
        raise SystemExit(f"shimkit audit ({name}) wrote no report, exit {result.returncode}; see audit-{name}.log")
    document = json.loads(result.stdout)
    document["wall_s"] = round(elapsed, 1)
    (out / f"audit-{name}.json").write_text(json.dumps(document, indent=1))
    return document


def short(spec: str) -> str:
    return spec.rsplit(":", 1)[-1] if ".py:" in spec else spec


def max_error(model: dict) -> str:
    numerics = model.get("numerics")
    if not numerics:
        return "-"
    if numerics["unavailable"]:
        return f"not checked: {numerics['unavailable'][:80]}"
    errors = [e for check in numerics["checks"] for e in check["max_errors"]]
    verdict = "ok" if numerics["ok"] else "WRONG"
    sizes = len(numerics["checks"])
    return f"{max(errors, default=0.0):.2g} ({verdict}, {sizes} size{'s' * (sizes != 1)})"


def why(model: dict) -> str:
    if model["failure"]:
        return model["failure"]["message"][:120]
    return ", ".join(model["missing"])[:120]


def report(stock: dict, shimkit: dict, environment: str, *, numerics: bool = True) -> tuple[str, list[str]]:
    lines = ["| model | stock | stock lowering s | shimkit | shimkit lowering s | shimkit / stock | "
             "numerics: max error | stock numerics |", "| --- | --- | ---: | --- | ---: | ---: | --- | --- |"]
    problems = []
    stock_models = {short(m["name"]): m for m in stock["models"]}
    for model in shimkit["models"]:
        before = stock_models[short(model["name"])]
        stock_s, shimkit_s = before["timings_s"]["total"], model["timings_s"]["total"]
        ratio = f"{shimkit_s / stock_s:.2f}" if stock_s else "-"
        stock_status = before["status"] + (f" ({why(before)})" if before["status"] != "clean" else "")
        status = model["status"] + (f" ({why(model)})" if model["status"] != "clean" else "")
        lines.append(f"| {short(model['name'])} | {stock_status} | {stock_s:.1f} | {status} | {shimkit_s:.1f} | "
                     f"{ratio} | {max_error(model)} | {max_error(before)} |")
        if model["status"] != "clean":
            problems.append(f"{short(model['name'])}: {status} with shimkit")
        if RANK[model["status"]] > RANK[before["status"]]:
            problems.append(f"{short(model['name'])}: worse with shimkit ({model['status']}) than stock "
                            f"({before['status']})")
    phase = "shimkit's includes the numerics check" if numerics else "numerics not checked"
    head = [f"Measured on {environment}.", "",
            f"Wall time: stock run {stock['wall_s']} s, shimkit run {shimkit['wall_s']} s ({phase}).", ""]
    return "\n".join(head + lines) + "\n", problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the reports")
    parser.add_argument("-j", "--jobs", type=int, default=4, help="audit worker processes (default 4)")
    parser.add_argument("--timeout", type=float, default=420, help="per model, seconds (default 420)")
    parser.add_argument("--stock", type=Path, help="the stock run's audit-stock.json from an earlier check, "
                                                   "instead of lowering stock again (models it lacks are)")
    parser.add_argument("--no-numerics", action="store_true",
                        help="lower only: skip the AOTInductor numerics phase (on an image whose AOTInductor "
                             "loader crashes it only spends device time; docs/cuda.md)")
    parser.add_argument("--stock-numerics", action="store_true",
                        help="check the stock run's numerics as the shimkit run's, the two runs at once (-j each)")
    parser.add_argument("models", nargs="*", help="default: the zoo and the CUDA repros")
    args = parser.parse_args(argv)
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    environment = (f"{torch.cuda.get_device_name()} (torch {torch.__version__}, CUDA {torch.version.cuda}, "
                   f"Python {platform.python_version()}, {os.cpu_count()} cores)")
    specs = args.models or model_specs()
    stock = json.loads(args.stock.read_text()) if args.stock else {"models": [], "wall_s": 0.0}
    stored = {short(m["name"]) for m in stock["models"]}
    unlowered = [spec for spec in specs if short(spec) not in stored]
    # One after the other, as before, unless stock's numerics are checked too: then both runs at once.
    with ThreadPoolExecutor(max_workers=2 if args.stock_numerics else 1) as pool:
        fresh = (pool.submit(audit, unlowered, plugins=False, jobs=args.jobs, timeout=args.timeout, out=args.out,
                             numerics=args.stock_numerics)
                 if unlowered else None)  # models the stored stock report predates are lowered stock now
        running = pool.submit(audit, specs, plugins=True, jobs=args.jobs, timeout=args.timeout, out=args.out,
                              numerics=not args.no_numerics)
        if fresh is not None:
            stock["models"] += fresh.result()["models"]
            stock["wall_s"] = round(stock["wall_s"] + fresh.result()["wall_s"], 1)
        shimkit = running.result()
    text, problems = report(stock, shimkit, environment, numerics=not args.no_numerics)
    with open(args.out / "failures.txt", "w") as failures:
        for model in shimkit["models"]:
            if model["failure"]:
                failures.write(f"== {short(model['name'])}\n{model['failure'].get('traceback', '')}\n")
            for check in (model["numerics"] or {}).get("checks", []):
                if check["error"]:
                    failures.write(f"== {short(model['name'])} numerics\n{check['error']}\n")
    (args.out / "cuda.md").write_text(text)
    print(text)
    for problem in problems:
        print(f"REGRESSION: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
