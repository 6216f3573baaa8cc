# SPDX-License-Identifier: Apache-2.0
# Turns the logs of scripts/gpu.sh multi's training runs into rows of bench/results/train_multi.jsonl
# (bench/render_results.py: the format; it renders bench/RESULTS.md and SUMMARY.md afterwards):
#   weak scaling   06_train_gpu's default model on N GPUs: tokens/s per GPU against 1 GPU's;
#   8B             the Llama 3.1 8B shape, fully sharded with recompute, per recipe: tokens/s per
#                  GPU and MFU against bench/fsdp_peer.py (PyTorch FSDP2 + torch.compile, bf16),
#                  the backend's peak memory per GPU against the peer's, and the start-up time
#                  (construction of the sharded model) against the peer's, and the exposed
#                  communication: the time rank 0's compute stream waited at the communicator's
#                  joins, in percent of the step (issue 27's target: below 5 %; no peer figure).
#   python3 bench/multi_gpu_rows.py LOG_DIR DEVICE [RESULTS]
# RESULTS: a folder (default bench/results; rows go to its train_multi.jsonl) or a .jsonl file.
# Commit: $MXKIT_COMMIT ("abc1234" or "abc1234+wip"), else git's HEAD here (wip: uncommitted changes).
# A run whose log lacks its summary line gives no row (it failed or timed out: its log says why).
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_results  # noqa: E402  (the rows' format, writer and renderer)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def summary(text):
    """06_train_gpu's final lines: global tokens/s, MFU per GPU, backend peak MiB."""
    m = re.search(r"^throughput[^:]*: ([0-9.]+) tokens/s, ([0-9.e+]+) model TFLOP/s(?:, MFU ([0-9.]+)%)?", text, re.M)
    if not m:
        return None
    mem = re.search(r"backend memory peak: ([0-9.]+) MiB", text)
    ready = re.search(r"^\[ *([0-9.]+)s\] training state ready", text, re.M)
    ranks = re.search(r"ranks?: ([0-9]+)", text)
    exposed = re.search(r"^exposed communication \(rank 0\): ([0-9.]+) ms a step, ([0-9.]+)% of the step", text, re.M)
    return {"exposed_ms": float(exposed.group(1)) if exposed else None, "exposed_percent": float(exposed.group(2)) if exposed else None,
            "tokens": float(m.group(1)), "mfu": float(m.group(3) or 0), "peak_mib": float(mem.group(1)) if mem else 0.0,
            "ranks": int(ranks.group(1)) if ranks else None, "ready_s": float(ready.group(1)) if ready else None}


def peer_values(text):
    v = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                v[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return v


def arguments(program):
    """LOG_DIR DEVICE [RESULTS] -> (logs, device, results, bench/results), or None (usage said)."""
    if len(sys.argv) < 3:
        print(f"usage: {program} LOG_DIR DEVICE [RESULTS]", file=sys.stderr)
        return None
    default_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    return sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else default_dir, default_dir


def main():
    a = arguments("multi_gpu_rows.py")
    if not a:
        return 2
    logs, device, results, default_dir = a
    rows = []
    fsdp_log = read(os.path.join(logs, "fsdp_peer.log"))
    torch = re.search(r"^# torch (\S+),", fsdp_log, re.M)
    seq = os.environ.get("MXKIT_8B_SEQ", "8192")
    fsdp_settings = f"bench/fsdp_peer.py --seq {seq} --batch 1 --vocab 256" + (f", torch {torch.group(1)}" if torch else "")

    def row(case, value, unit, peer="", peer_value=0.0, settings=None):
        # No peer figure (MXKIT_8B_PEER=0, or the peer failed): the peer fields stay null.
        rows.append(render_results.new_row("train_multi", case, value, unit, peer=peer if peer_value else None,
                                           peer_value=peer_value or None, peer_settings=settings if peer_value else None,
                                           device=device))

    # Only the parts this run of scripts/gpu.sh multi ran (its MXKIT_PARTS): a log folder used by an
    # earlier run still holds the other parts' logs, whose rows were written then.
    parts = os.environ.get("MXKIT_PARTS", "scaling 8b").split()
    one = summary(read(os.path.join(logs, "scaling1.log")))
    for n in (1, 2, 4, 8) if "scaling" in parts else ():
        s = summary(read(os.path.join(logs, f"scaling{n}.log")))
        if s:
            per_gpu = s["tokens"] / n
            base = one["tokens"] if one else 0.0
            row(f"06_train_gpu default model, {n} GPU(s), data parallel: tokens/s per GPU", per_gpu, "tokens/s",
                "1 GPU" if n > 1 else "", base if n > 1 else 0.0)
            if s["exposed_percent"] is not None:
                row(f"06_train_gpu default model, {n} GPU(s), data parallel: exposed communication (rank 0)", s["exposed_percent"],
                    "% of step")

    peer = peer_values(fsdp_log) if "8b" in parts else {}
    names = {"mxfp4": "mxfp4+Hadamard"}
    flags = os.environ.get("MXKIT_8B_FLAGS", "").strip()  # extra 06_train_gpu flags of the 8B runs (scripts/gpu.sh multi)
    for recipe in ("bf16", "fp8", "mxfp8", "mxfp4") if "8b" in parts else ():
        s = summary(read(os.path.join(logs, f"8b_{recipe}.log")))
        if not s:
            continue
        n = s["ranks"] or 4
        case = f"Llama 3.1 8B shape (vocab 256), FSDP + recompute, T{seq}, {names.get(recipe, recipe)}, {n} GPUs"
        if flags:
            case += f" ({flags})"
        row(case + ": tokens/s per GPU", s["tokens"] / n, "tokens/s", "torch FSDP2+compile bf16", peer.get("tokens_per_s_per_gpu", 0.0),
            fsdp_settings)
        row(case + ": MFU per GPU", s["mfu"], "%", "torch FSDP2+compile bf16", peer.get("mfu_percent", 0.0), fsdp_settings)
        if s["peak_mib"]:
            row(case + ": backend peak memory per GPU", s["peak_mib"] / 1024.0, "GiB", "torch max_memory_allocated",
                peer.get("peak_gib", 0.0), fsdp_settings)
        if s["exposed_percent"] is not None:
            row(case + ": exposed communication (rank 0)", s["exposed_percent"], "% of step")
            row(case + ": exposed communication (rank 0) per step", s["exposed_ms"], "ms")
        if s["ready_s"] is not None:  # rank 0: run() entered to the sharded model and optimizer built (the peer: from its start)
            row(case + ": start-up to the first step", s["ready_s"], "s", "torch FSDP2 start-up", peer.get("startup_s", 0.0),
                fsdp_settings)
    if not rows and peer:
        row(f"torch FSDP2+compile bf16 Llama 3.1 8B shape (vocab 256) T{seq}: tokens/s per GPU", peer.get("tokens_per_s_per_gpu", 0.0), "tokens/s")
    if not rows:
        print("no rows: no run of this call printed its summary line")
        return 0
    return write_rows(rows, results, default_dir)


def write_rows(rows, results, default_dir):
    """Appends rows to RESULTS (a .jsonl file, or a folder: RESULTS.md and SUMMARY.md rendered
    again where it is bench/results). Also bench/lora70b_rows.py's writer."""
    if results.endswith(".jsonl"):
        with open(results, "a", encoding="utf-8") as f:
            f.write("".join(render_results.make_line(r) + "\n" for r in rows))
        print(f"appended {len(rows)} rows to {results}; add them: python3 bench/render_results.py add {results}")
        return 0
    for bench, n in render_results.append_rows(rows, results).items():
        print(f"appended {n} rows to {os.path.join(results, bench + '.jsonl')}")
    if os.path.abspath(results) == default_dir:
        return render_results.main([])  # RESULTS.md and SUMMARY.md from the new rows
    print(f"add them to bench/results: python3 bench/render_results.py add {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
