# SPDX-License-Identifier: Apache-2.0
# Rows of scripts/gpu.sh lora70b against the one-GPU FP8-base peer (issue 48), into
# bench/results/lora70b.jsonl (bench/render_results.py: the format):
#   mxkit's phases (bench_lora70b_70b.log: "MXFP4 ... timed steps" and "FP8 ..." lines, and each
#   phase's device high-water) against bench/lora70b_peer.py --base fp8-* on one GPU
#   (lora70b_peer1.log: its "key value" lines and its "settings ..." line, the rows'
#   peer_settings): tokens/s per GPU (targets: FP8 phase >= 1.1x, MXFP4 phase >= 1.0x) and memory
#   (target: at or below the peer's). mxkit's memory is the runtime's device high-water of the
#   phase (cudaMemGetInfo: CUDA context and pool included); the peer's is
#   torch.cuda.max_memory_reserved (the caching allocator's most held; its context not counted):
#   a comparison that leans against mxkit. Then the peer's own figures, and its --check
#   (lora70b_peer1_check.log): the FP8 linear's worst relative error as a fraction of the bound.
# The 2-GPU FSDP2 bf16 peer's rows are bench_lora70b's own (labelled "second reference").
#   python3 bench/lora70b_rows.py LOG_DIR DEVICE [RESULTS]
# RESULTS: a folder (default bench/results) or a .jsonl file. Commit: as bench/multi_gpu_rows.py.
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_results  # noqa: E402  (the rows' format)
from multi_gpu_rows import arguments, peer_values, read, write_rows  # noqa: E402

TARGETS = {"MXFP4": 1.0, "FP8": 1.1}  # tokens/s per GPU against the FP8-base peer (issue 48)


def mxkit_phases(text):
    """{phase: {"tokens", "mfu", "ms", "steps", "high_water"}} from bench_lora70b's log."""
    out = {}
    for m in re.finditer(r"^(MXFP4|FP8)\s+(\d+) timed steps:\s+([0-9.]+) ms/step\s+([0-9.]+) tokens/s per GPU\s+MFU\s+([0-9.]+)%",
                         text, re.M):
        out[m.group(1)] = {"steps": int(m.group(2)), "ms": float(m.group(3)), "tokens": float(m.group(4)), "mfu": float(m.group(5))}
    for m in re.finditer(r"^memory (MXFP4|FP8) phase \((?:before|after) healing\)\s+device used\s+([0-9.]+) GiB \(high-water\s+([0-9.]+)\)",
                         text, re.M):
        if m.group(1) in out:
            out[m.group(1)]["high_water"] = float(m.group(3))
    return out


def main():
    a = arguments("lora70b_rows.py")
    if not a:
        return 2
    logs, device, results, default_dir = a
    peer_log = read(os.path.join(logs, "lora70b_peer1.log"))
    mx_log = read(os.path.join(logs, "bench_lora70b_70b.log"))
    check_log = read(os.path.join(logs, "lora70b_peer1_check.log"))
    peer = peer_values(peer_log)
    settings = re.search(r"^settings (.*)$", peer_log, re.M)
    settings = settings.group(1).strip() if settings else ""
    base = re.search(r"\bbase=fp8-(\w+)", settings)
    gran = base.group(1) if base else "?"
    layers = re.search(r"\blayers=(\d+)", settings)
    tag = re.search(r"^(Llama 2 70B LoRA.*? B\d+ T\d+) on ", mx_log, re.M)
    if tag:
        tag = tag.group(1)
    else:  # mxkit's part printed nothing: its label from the peer's settings (as bench_lora70b makes it)
        seq, batch = re.search(r"\bseq=(\d+)", settings), re.search(r"\bbatch=(\d+)", settings)
        size = "" if not layers or layers.group(1) == "80" else f" ({layers.group(1)}L)"
        tag = f"Llama 2 70B LoRA{size} B{batch.group(1) if batch else 1} T{seq.group(1) if seq else 8192}"
    label = f"torch FP8 base, {gran} scales (1 GPU, compile, AC)"
    peer_tps = peer.get("tokens_per_s_per_gpu", 0.0)
    peer_mem = peer.get("peak_reserved_gib", 0.0)
    rows = []

    def row(case, value, unit, peer_name=None, peer_value=0.0):
        rows.append(render_results.new_row("lora70b", case, value, unit, peer=peer_name if peer_value else None,
                                           peer_value=peer_value or None, peer_settings=settings if peer_value else None,
                                           device=device))

    print(f"== against the one-GPU peer: {label}" + ("" if peer_tps else " (no tokens/s: " +
          ("out of memory" if peer.get("oom") else "not run or failed") + ")"))
    if peer_tps:
        print(f"peer: {peer_tps:.1f} tokens/s per GPU, {peer.get('step_ms', 0):.1f} ms a step, MFU {peer.get('mfu_percent', 0):.1f} %, "
              f"peak {peer.get('peak_memory_gib', 0):.2f} GiB allocated, {peer_mem:.2f} reserved")
    for name, p in mxkit_phases(mx_log).items():
        target = TARGETS[name]
        if peer_tps:
            ratio = p["tokens"] / peer_tps
            verdict = "met" if ratio >= target else "MISSED"
            row(f"{tag} {name} phase (1 GPU) tokens/s per GPU vs {label} (target {target:g}x: {verdict})", p["tokens"], "tokens/s",
                label + " tokens/s per GPU", peer_tps)
            print(f"mxkit {name:5s}: {p['tokens']:.1f} tokens/s per GPU, {ratio:.3f}x the peer (>= {target:g}x: {verdict})")
        if "high_water" in p and peer_mem:
            verdict = "met" if p["high_water"] <= peer_mem else "MISSED"
            row(f"{tag} {name} phase (1 GPU) device high-water vs {label} peak reserved (target: at or below: {verdict})",
                p["high_water"], "GiB", label + " max_memory_reserved", peer_mem)
            print(f"mxkit {name:5s}: device high-water {p['high_water']:.2f} GiB against the peer's {peer_mem:.2f} GiB reserved: {verdict}")
    if peer_tps:
        compiled = " (compile FAILED)" if peer.get("compile_failed") else ""
        row(f"{tag} {label}{compiled} tokens/s per GPU", peer_tps, "tokens/s")
        row(f"{tag} {label} MFU (bf16 dense peak)", peer.get("mfu_percent", 0.0), "%")
        row(f"{tag} {label} step", peer.get("step_ms", 0.0), "ms")
        row(f"{tag} {label} peak memory allocated", peer.get("peak_memory_gib", 0.0), "GiB")
        row(f"{tag} {label} peak memory reserved", peer_mem, "GiB")
        if peer.get("base_gib"):
            row(f"{tag} {label} FP8 base linears", peer["base_gib"], "GiB")
    check = peer_values(check_log)
    if "check_worst_fraction_of_bound" in check:
        row(f"{tag} {label} FP8 linear check: worst relative error / bound", check["check_worst_fraction_of_bound"], "x")
        print(f"check: worst relative error {check['check_worst_fraction_of_bound']:.3f} of the bound, "
              f"{int(check.get('check_failed', 0))} above it")
    if not rows:
        print("no rows: neither mxkit's phases nor the FP8-base peer printed their figures")
        return 0
    return write_rows(rows, results, default_dir)


if __name__ == "__main__":
    sys.exit(main())
