#!/usr/bin/env python3
"""Writes the benchmark tables of README.md and docs/*.md from the raw lines.

Every figure a reader sees must be one the suites printed. The suites write
JSON lines (bench/common/peer.h: measurement lines, ratio lines, env lines
with the load average), committed as bench/**/results-*.jsonl. This script
reads them and rewrites each block

    <!-- bench:NAME -->
    ...generated table...
    <!-- /bench:NAME -->

in README.md and docs/*.md with the table NAME (TABLES below), followed by a
line naming the raw files it came from, their dates, the load average the
env lines recorded and the peer's version. NAME@GLOB[,GLOB...] builds the
same table from other raw files (an earlier round, kept for its history).
Every table must appear somewhere, and bench:summary in README.md, so that
deleting a block to type figures by hand fails too.

  python3 scripts/bench_report.py          rewrite the blocks in place
  python3 scripts/bench_report.py --check  exit 1, printing a diff, when a
                                           block is not what the raw lines
                                           give (a hand-typed figure)
  python3 scripts/bench_report.py --list   name the tables and their files

Figures are medians over every repetition of every run a table names, with
the spread (min-max) of those repetitions beside them: never the best run.
The median is the lower median, so that every figure is a value some
repetition measured (the mean of two middle values, from runs on different
days, would be a figure nobody measured). A ratio is the median of the
ratios of the repetitions that ran side by side (same file, same "rep": the
suites interleave cohort and peer per repetition, so each pair saw the same
machine); its spread is theirs. Only where nothing pairs up is it
median(cohort) / median(peer). A target is judged on the ratio as shown.

Standard library only: it runs in CI before anything is built.
"""

import argparse
import difflib
import glob
import json
import math
import os
import pathlib
import re
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Which documents may hold blocks: the README and the docs directory.
DOC_GLOBS = ("README.md", "docs/*.md")
# NAME is a table of TABLES, optionally followed by @GLOB[,GLOB...] to build
# it from other raw files than its own (an earlier round, kept for history).
NAME = r"[a-z0-9-]+(?:@[A-Za-z0-9_.*/,-]+)?"
BLOCK_RE = re.compile(
    r"(<!-- bench:(?P<name>" + NAME + r") -->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)",
    re.S)
# A block whose name is opened but never closed is an error, not skipped.
OPEN_RE = re.compile(r"<!-- bench:(" + NAME + r") -->")


class ReportError(Exception):
    """A table asked for lines the raw files do not have, or a bad block."""


# ---------------------------------------------------------------------------
# Reading the raw lines


class RunFile:
    """One results-*.jsonl file: its env, measurement and ratio lines."""

    def __init__(self, rel, text):
        self.rel = rel
        self.env = []
        self.measurements = []
        self.ratios = []
        self.errors = []
        for number, raw in enumerate(text.splitlines(), 1):
            raw = raw.strip()
            if not raw:
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ReportError(f"{rel}:{number}: not a JSON line ({e}); "
                                  "raw files hold one JSON object per line")
            if line.get("suite") == "env":
                self.env.append(line)
            elif "error" in line:
                self.errors.append(line)
            elif "metric" in line and isinstance(line.get("value"), (int, float)):
                # A ratio line carries "reps" (peer.h) or is unit "x"
                # without "rep"; both are derived, not measured.
                if "reps" in line or (line.get("unit") == "x" and "rep" not in line):
                    self.ratios.append(line)
                else:
                    self.measurements.append(line)

    def dates(self):
        """The "date" fields of the env lines, sorted (ISO 8601, UTC)."""
        return sorted(e["date"] for e in self.env if isinstance(e.get("date"), str))

    def loads(self):
        """Every 1-minute load average the env lines recorded."""
        out = []
        for e in self.env:
            la = e.get("loadavg")
            if isinstance(la, list) and la and isinstance(la[0], (int, float)):
                out.append(float(la[0]))
            if isinstance(e.get("loadavg_1m"), (int, float)):
                out.append(float(e["loadavg_1m"]))
            samples = e.get("loadavg_1m_samples")
            if isinstance(samples, dict):
                for k in ("min", "max"):
                    if isinstance(samples.get(k), (int, float)):
                        out.append(float(samples[k]))
        return out

    def nproc(self):
        for e in self.env:
            if isinstance(e.get("nproc"), int):
                return e["nproc"]
        return None

    def peer_versions(self):
        """Peer versions the run recorded: env lines' "peer_versions" and
        the version fields peers print in their own params (NumPy)."""
        out = {}
        for e in self.env:
            pv = e.get("peer_versions")
            if isinstance(pv, dict):
                out.update({k: str(v) for k, v in pv.items()})
        for m in self.measurements:
            p = m.get("params", {})
            if isinstance(p.get("numpy"), str):
                out.setdefault("numpy", p["numpy"])
            if isinstance(p.get("blas_core"), str):
                out.setdefault("NumPy's BLAS", p["blas_core"])
            # What a peer may print about itself, on the line or in params.
            for src in (m, p):
                for key in ("torch", "torch_version", "peer_version", "iperf3_version"):
                    if isinstance(src.get(key), str):
                        name = key.replace("_version", "") if key != "peer_version" else m.get(
                            "suite", "peer")
                        out.setdefault(name, src[key])
        return out


class Dataset:
    """The raw files under `root`/bench, read once."""

    def __init__(self, root):
        self.root = pathlib.Path(root)
        self._files = {}

    def files(self, patterns):
        """The files matching `patterns` (globs relative to the root), in
        name order; ReportError when a pattern matches nothing."""
        out = []
        for pattern in patterns:
            matched = sorted(glob.glob(str(self.root / pattern), recursive=True))
            if not matched:
                raise ReportError(
                    f"no raw file matches {pattern!r} under {self.root}; "
                    "commit the suite's output as bench/<suite>/results-<date>.jsonl "
                    "or fix the pattern in scripts/bench_report.py")
            for path in matched:
                rel = os.path.relpath(path, self.root)
                if rel not in self._files:
                    self._files[rel] = RunFile(rel, pathlib.Path(path).read_text())
                if self._files[rel] not in out:
                    out.append(self._files[rel])
        return out


# ---------------------------------------------------------------------------
# Statistics


class Stat:
    """Median and spread of a list of values."""

    def __init__(self, values):
        if not values:
            raise ReportError("no values")
        self.values = list(values)
        # The lower median: a value that was measured (see the docstring).
        self.median = statistics.median_low(self.values)
        self.lo = min(self.values)
        self.hi = max(self.values)
        self.n = len(self.values)


def matches(params, where):
    """True when `params` has every entry of `where`. A value of None in
    `where` asks for the key to be absent; a callable is a predicate."""
    for key, want in where.items():
        if want is None:
            if key in params:
                return False
        elif callable(want):
            if key not in params or not want(params[key]):
                return False
        elif params.get(key) != want:
            return False
    return True


class Query:
    """Selects measurement lines from a set of files, remembering which
    files contributed (the table's provenance)."""

    def __init__(self, files):
        self.files = files
        self.used = []
        self.peers = set()

    def points(self, suite, metric, where=None):
        """[(file, rep, value)] of every matching measurement line."""
        where = where or {}
        out = []
        for f in self.files:
            for m in f.measurements:
                if (m.get("suite") == suite and m.get("metric") == metric
                        and matches(m.get("params", {}), where)):
                    out.append((f.rel, m.get("rep", 0), float(m["value"])))
                    if f not in self.used:
                        self.used.append(f)
        return out

    def stat(self, suite, metric, where=None):
        pts = self.points(suite, metric, where)
        if not pts:
            raise ReportError(
                f"no {suite}/{metric} line with params {describe(where)} in "
                f"{', '.join(f.rel for f in self.files)}")
        return Stat([v for _, _, v in pts])

    def ratio(self, ours, theirs):
        """(median ratio, Stat of the paired per-repetition ratios or None)
        for two point lists."""
        return paired_ratio(ours, theirs)


def paired_ratio(ours, theirs):
    """(ratio, Stat of the paired ratios or None). The pairs are the points
    that share a file and a rep; the ratio is their median, or, when none
    pair up, median(ours) / median(theirs)."""
    if not ours or not theirs:
        raise ReportError("a ratio needs values on both sides")
    med = statistics.median_low(v for _, _, v in ours) / statistics.median_low(
        v for _, _, v in theirs)
    by_key = {}
    for f, rep, v in theirs:
        by_key.setdefault((f, rep), []).append(v)
    pairs = []
    for f, rep, v in ours:
        peer = by_key.get((f, rep))
        if peer:
            pairs.append(v / statistics.median_low(peer))
    if not pairs:
        return med, None
    stat = Stat(pairs)
    return stat.median, stat


def describe(where):
    if not where:
        return "{}"
    return "{" + ", ".join(
        f"{k}: {'<predicate>' if callable(v) else json.dumps(v)}"
        for k, v in sorted(where.items())) + "}"


# ---------------------------------------------------------------------------
# Formatting


def num(v):
    """Three significant figures; thousands separated."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a == 0:
        return "0"
    s = f"{v:.3g}"
    return s


def spread(stat, unit=""):
    """"median unit (lo–hi)" with the spread when there is more than one
    value; the spread is left out when every value is the same."""
    u = f" {unit}" if unit else ""
    if stat.n > 1 and num(stat.lo) != num(stat.hi):
        return f"{num(stat.median)}{u} ({num(stat.lo)}–{num(stat.hi)})"
    return f"{num(stat.median)}{u}"


def ratio_cell(med, pairs, bold=False):
    text = f"{num(med)}×"
    if bold:
        text = f"**{text}**"
    if pairs is not None and pairs.n > 1 and num(pairs.lo) != num(pairs.hi):
        text += f" ({num(pairs.lo)}–{num(pairs.hi)})"
    return text


def verdict(med, target, lower_is_better):
    """"met"/"not met" against a target ratio."""
    # Judged on the ratio as the table shows it (three significant figures),
    # so that a cell reading "1×" is never called "not met" against "≤ 1".
    shown = float(f"{med:.3g}")
    ok = shown <= target if lower_is_better else shown >= target
    sign = "≤" if lower_is_better else "≥"
    return f"{sign} {num(target)}: {'met' if ok else 'not met'}"


def table(header, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    return lines


def span_text(files):
    """"2026-11-26 08:36–08:44 UTC" over the env lines' dates, per day."""
    dates = sorted(d for f in files for d in f.dates())
    if not dates:
        return None
    first, last = dates[0], dates[-1]
    day1, t1 = first[:10], first[11:16]
    day2, t2 = last[:10], last[11:16]
    if day1 == day2:
        return f"{day1} {t1}–{t2} UTC" if t1 != t2 else f"{day1} {t1} UTC"
    return f"{day1} {t1} UTC – {day2} {t2} UTC"


def provenance(files, peer_label=None, extra=None,
               stats="medians of all repetitions, (min–max) across them"):
    """The line under a table: raw files, dates, load, peer version."""
    parts = ["Raw lines: " + ", ".join(f"`{f.rel}`" for f in files)]
    span = span_text(files)
    undated = [f.rel for f in files if not f.dates()]
    if span:
        parts.append(span)
    if undated:
        parts.append("no env line (date only from the file name, load not recorded) in "
                     + ", ".join(f"`{u}`" for u in undated))
    loads = [x for f in files for x in f.loads()]
    if loads:
        nprocs = sorted({f.nproc() for f in files if f.nproc()})
        cpus = f" on {'/'.join(str(n) for n in nprocs)} CPUs" if nprocs else ""
        lo, hi = min(loads), max(loads)
        rng = f"{lo:.2f}–{hi:.2f}" if f"{lo:.2f}" != f"{hi:.2f}" else f"{lo:.2f}"
        parts.append(f"load average (1 min, env lines) {rng}{cpus}")
    if peer_label:
        versions = {}
        for f in files:
            versions.update(f.peer_versions())
        if versions:
            vtext = ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
            parts.append(f"peer: {peer_label} ({vtext})")
        else:
            parts.append(f"peer: {peer_label} (version not recorded in the raw lines)")
    if extra:
        parts.append(extra)
    if stats:
        parts.append(stats)
    return "_" + "; ".join(parts) + "._"


class Block:
    def __init__(self, lines, files, peer=None, extra=None,
                 stats="medians of all repetitions, (min–max) across them"):
        self.lines = lines
        self.files = files
        self.peer = peer
        self.extra = extra
        self.stats = stats

    def render(self):
        if not self.files:
            # No raw file holds the table's lines yet (a metric added before
            # its first committed run): the lines say so; there is nothing
            # to name as provenance.
            return "\n".join(self.lines) + "\n"
        return "\n".join(
            self.lines + ["", provenance(self.files, self.peer, self.extra, self.stats)]) + "\n"


# ---------------------------------------------------------------------------
# The tables. Each takes a Dataset and returns a Block. The files each table
# reads are named here; a new run is added by adding its file (or it is
# picked up by the glob) and running this script.

COORD_FILES = ["bench/coord/results-2026-11-26*.jsonl"]
BARRIER_FILES = ["bench/barrier/results-2026-11-26*.jsonl"]
RUNTIME_FILES = ["bench/runtime/results-2026-11-26*.jsonl"]
COLLECTIVE_FILES = ["bench/collective/results-2026-11-2*.jsonl"]
GRAPH_FILES = ["bench/graph/results-2026-11-24.jsonl", "bench/graph/results-2026-11-26.jsonl"]
GRAPH_EIGEN_FILES = ["bench/graph/results-2026-11-26-eigen.jsonl"]
KERNEL_FILES = ["bench/graph/results-2026-11-24-kernels.jsonl", "bench/graph/results-2026-11-26.jsonl"]
TRAINING_FILES = ["bench/training/results-2026-11-2*.jsonl"]
# The runs against PyTorch that measured today's code: the two runs of
# 2026-11-27 after input forwarding, the shared no-axis reduction and huge
# pages (-final-a, -final-b). Earlier runs measured earlier code and stay
# committed: 2026-11-26's kernels, buffer reuse and same-host data plane
# (-speed*, and -sync* with the runtime path of issue 28), and 2026-11-27's
# code before (-before), with forwarding alone (-forward) and with huge
# pages rounding sizes up, before its review (-rounded-*), which the notes
# compare with. The scaling table, about 2 tasks against 1 of the same run,
# reads every run.
TORCH_TRAINING_FILES = ["bench/training/results-2026-11-27-final-*.jsonl"]
PS_TRAINING_FILES = ["bench/results-2026-11-24-ps-training.jsonl",
                     "bench/results-2026-11-24-ps-training-openblas.jsonl"]

SIZES_COORD = (2, 8, 32, 128)


def lower_ratio_row(q, label, suite, metric, where, peer_suite, peer_metric,
                    peer_where, unit, target=None, lower=True, scale=1.0):
    """One row: cohort, peer, ratio, target verdict."""
    ours = q.points(suite, metric, where)
    theirs = q.points(peer_suite, peer_metric, peer_where)
    if not ours or not theirs:
        raise ReportError(
            f"{label}: no lines for {suite}/{metric} {describe(where)} or "
            f"{peer_suite}/{peer_metric} {describe(peer_where)} in "
            f"{', '.join(f.rel for f in q.files)}")
    so = Stat([v * scale for _, _, v in ours])
    st = Stat([v * scale for _, _, v in theirs])
    med, pairs = paired_ratio(ours, theirs)
    met = None
    if target is not None:
        met = med <= target if lower else med >= target
    return [label, spread(so, unit), spread(st, unit),
            ratio_cell(med, pairs, bold=bool(met)),
            verdict(med, target, lower) if target is not None else ""]


def t_coord(ds, files=None):
    q = Query(ds.files(files or COORD_FILES))
    rows = []
    for op, label in (("add", "KV round trip p50, `add`"), ("get", "KV round trip p50, `get`"),
                      ("setget_pair", "KV `set` + `get` pair p50")):
        rows.append(lower_ratio_row(
            q, label, "coord", f"rtt_{op}_p50", {"clients": 1}, "tcpstore",
            f"rtt_{op}_p50", {"clients": 1}, "µs", target=1.0 if op == "add" else None))
    for mode, target in (("threads", 0.5), ("processes", 1.0)):
        for n in SIZES_COORD:
            rows.append(lower_ratio_row(
                q, f"barrier release p50, {n} agents as {mode}", "coord",
                "barrier_release_p50", {"client_mode": mode, "clients": n},
                "tcpstore", "barrier_release_p50",
                {"client_mode": mode, "clients": n, "barrier": "wait"}, "µs",
                target=target))
    for mode in ("processes", "threads"):
        for n in (64, 8):
            for mix, label in (("set64 pipelined+get alternating", "sets pipelined"),
                               ("set64+get alternating", "each set waits")):
                rows.append(lower_ratio_row(
                    q, f"set+get throughput, {n} {mode}, {label}", "coord", "throughput",
                    {"client_mode": mode, "clients": n, "op_mix": mix}, "tcpstore",
                    "throughput",
                    {"client_mode": mode, "clients": n, "op_mix": "set64+get alternating"},
                    "ops/s", target=2.0, lower=False))
    reg1k = q.stat("coord", "register_barrier_time", {"client_mode": "threads", "tasks": 1024})
    rows.append(["1,024 tasks register + one barrier, agents as threads", spread(reg1k, "s"),
                 "–", "–", ""])
    reg = q.stat("coord", "register_barrier_time",
                 {"client_mode": "simulated", "tasks": 16384})
    rows.append(["16,384 tasks register + one barrier (simulated tasks, 16 processes)",
                 spread(reg, "s"), "–", "–", f"< 10 s: {'met' if reg.median < 10 else 'not met'}"])
    cpu = q.stat("coord", "service_cpu_share", {"tasks": 16384})
    rows.append(["service CPU while 16,384 tasks heartbeat every 10 s", spread(cpu, "cores"),
                 "–", "–", "reported"])
    lines = table(["metric", "cohort", "TCPStore", "ratio", "target"], rows)
    return Block(lines, q.used, peer="TCPStore (torch.distributed)")


def t_coord_throughput(ds, files=None):
    """The set+get throughput rows of whatever runs are named: one table per
    experiment (each file a variant, compared with TCPStore in its own run)."""
    if not files:
        raise ReportError("coord-throughput is for experiments: name their files with @")
    rows = []
    used = []
    for f in ds.files(files):
        q = Query([f])
        keys = sorted({(m["params"].get("client_mode"), m["params"].get("clients"))
                       for m in f.measurements
                       if m.get("suite") == "coord" and m.get("metric") == "throughput"},
                      key=lambda k: (k[0] or "", -(k[1] or 0)))
        for mode, n in keys:
            for mix, label in (("set64 pipelined+get alternating", "sets pipelined"),
                               ("set64+get alternating", "each set waits")):
                where = {"client_mode": mode, "clients": n, "op_mix": mix}
                if not q.points("coord", "throughput", where):
                    continue
                r = lower_ratio_row(q, "", "coord", "throughput", where, "tcpstore",
                                    "throughput", {"client_mode": mode, "clients": n,
                                                   "op_mix": "set64+get alternating"},
                                    "ops/s", target=2.0, lower=False)
                rows.append([f"`{os.path.basename(f.rel)}`", f"{n} {mode}, {label}"] + r[1:])
        used += [u for u in q.used if u not in used]
    lines = table(["run", "set+get throughput", "cohort", "TCPStore", "ratio", "target"], rows,
                  align=["---", "---", "---:", "---:", "---:", "---"])
    return Block(lines, used, peer="TCPStore (torch.distributed)")


def t_barrier(ds, files=None):
    q = Query(ds.files(files or BARRIER_FILES))
    rows = []
    worlds = sorted({m["params"]["world"] for f in q.files for m in f.measurements
                     if m.get("suite") == "barrier" and "world" in m.get("params", {})})
    for metric, peer_metric, label, target in (
            ("barrier_p50", "barrier_p50", "barrier p50", 0.5),
            ("barrier_p99", "barrier_p99", "barrier p99", None),
            ("all_gather_object_p50", "all_gather_object_p50",
             "allGather 64 B p50 (gloo: all_gather_object)", 0.5),
            ("all_gather_object_p50", "all_gather_p50",
             "allGather 64 B p50 (gloo: tensor all_gather)", None),
            ("all_gather_object_p99", "all_gather_object_p99",
             "allGather 64 B p99 (gloo: all_gather_object)", None)):
        for w in worlds:
            where = {"world": w}
            if metric.startswith("all_gather"):
                where["bytes"] = 64
            rows.append(lower_ratio_row(q, f"{label}, N = {w}", "barrier", metric, where,
                                        "gloo", peer_metric, where, "µs", target=target))
    lines = table(["metric", "cohort", "gloo", "ratio", "target"], rows)
    return Block(lines, q.used, peer="gloo (torch.distributed)")


def t_runtime(ds, files=None):
    q = Query(ds.files(files or RUNTIME_FILES))
    rows = []
    peer = q.points("iperf3", "tcp_bw_recv_bytes", {"streams": 1})
    for size, label, target in ((64 << 20, "64 MiB", 0.9), (16 << 20, "16 MiB", None),
                                (1 << 20, "1 MiB", None)):
        ours = q.points("runtime", "tensor_transfer_throughput", {"bytes": size})
        if not ours or not peer:
            raise ReportError(f"runtime: no transfer lines for {size} bytes or no iperf3 line")
        med, pairs = paired_ratio(ours, peer)
        met = target is not None and med >= target
        rows.append([f"tensor transfer ps:0 → worker:0, {label}",
                     spread(Stat([v for *_, v in ours]), "GB/s"),
                     spread(Stat([v for *_, v in peer]), "GB/s"),
                     ratio_cell(med, pairs, bold=met),
                     verdict(med, target, False) if target else ""])
    for p in ("p50", "p99"):
        st = q.stat("runtime", f"remote_step_{p}", {"path": "callable"})
        rows.append([f"step across 2 tasks, 4 bytes, callable, {p}", spread(st, "µs"), "–", "–",
                     (f"< 300 µs: {'met' if st.median < 300 else 'not met'}" if p == "p50" else "")])
    grpc = q.points("runtime", "session_run_overhead_p50", {"session": "grpc"})
    local = q.points("runtime", "session_run_overhead_p50", {"session": "local"})
    med, pairs = paired_ratio(grpc, local)
    rows.append(["GrpcSession step, 10-node graph on one task, p50 (peer column: LocalSession)",
                 spread(Stat([v for *_, v in grpc]), "µs"),
                 spread(Stat([v for *_, v in local]), "µs"), ratio_cell(med, pairs), ""])
    lines = table(["metric", "cohort", "iperf3 (one TCP stream)", "ratio", "target"], rows)
    return Block(lines, q.used, peer="iperf3, loopback")


def t_runtime_transfer(ds, files=None):
    """Only the tensor transfer rows; a size that failed shows its error line
    (an earlier transport refused 64 MiB)."""
    if not files:
        raise ReportError("runtime-transfer is for earlier rounds: name its files with @")
    q = Query(ds.files(files))
    peer = q.points("iperf3", "tcp_bw_recv_bytes", {"streams": 1})
    rows = []
    for size, label in ((64 << 20, "64 MiB"), (16 << 20, "16 MiB"), (1 << 20, "1 MiB")):
        ours = q.points("runtime", "tensor_transfer_throughput", {"bytes": size})
        if not ours:
            errors = [e for f in q.files for e in f.errors
                      if e.get("metric") == "tensor_transfer_throughput"
                      and e.get("params", {}).get("bytes") == size]
            if not errors:
                raise ReportError(f"runtime-transfer: no line for {size} bytes")
            for f in q.files:
                if any(e in f.errors for e in errors) and f not in q.used:
                    q.used.append(f)
            msg = errors[0]["error"].replace("|", "\\|")
            rows.append([label, f"failed: {msg}", "", ""])
            continue
        med, pairs = paired_ratio(ours, peer)
        rows.append([label, spread(Stat([v for *_, v in ours]), "GB/s"),
                     spread(Stat([v for *_, v in peer]), "GB/s"), ratio_cell(med, pairs)])
    lines = table(["tensor transfer ps:0 → worker:0", "cohort", "iperf3 (one TCP stream)",
                   "ratio"], rows)
    return Block(lines, q.used, peer="iperf3, loopback")


# Issue 29: a tensor and a step across the multi-host lab's link
# (`cohort bench runtime --lab`: ps:0 on h1, worker:0 and the client on h0).
LAB_RUNTIME_FILES = ["bench/runtime/lab-2026-11-2*.jsonl"]
RECOVERY_FILES = ["bench/recovery/results-*.jsonl"]


def t_runtime_lab(ds, files=None):
    q = Query(ds.files(files or LAB_RUNTIME_FILES))
    lab = {"lab": lambda v: True}
    ours = q.points("runtime", "tensor_transfer_throughput", dict(lab, bytes=64 << 20))
    peer = q.points("iperf3", "tcp_bw_recv_bytes", dict(lab, streams=1))
    step = q.points("runtime", "remote_step_p50", lab)
    if not ours or not peer or not step:
        raise ReportError("runtime --lab: no transfer, iperf3 or remote step lines")
    rates = sorted({m["params"]["lab"] for f in q.files for m in f.measurements
                    if "lab" in m.get("params", {})})
    med, pairs = paired_ratio(ours, peer)
    rows = [["64 MiB tensor ps:0 (h1) → worker:0 (h0)",
             spread(Stat([v for *_, v in ours]), "GB/s"),
             spread(Stat([v for *_, v in peer]), "GB/s"),
             ratio_cell(med, pairs, bold=med >= 0.9)],
            ["remote step p50 (client and master on h0, a Placeholder on h1)",
             spread(Stat([v for *_, v in step]), "µs"), "", ""]]
    lines = table(["across one lab link", "cohort", "iperf3 (one TCP stream, h1 → h0)",
                   "ratio"], rows)
    return Block(lines, q.used, peer="iperf3 across the same link",
                 extra=f"links capped at {', '.join(rates)}; target ≥ 0.9× iperf3")


def t_collective(ds, files=None):
    q = Query(ds.files(files or COLLECTIVE_FILES))
    rows = []
    for world in (2, 4):
        for mib in (1, 64):
            cells = [f"{mib} MiB, {world} processes"]
            gloo = q.points("gloo", "allreduce_time_p50", {"MiB": mib, "world": world})
            ratios = []
            for transport in ("shm", "tcp"):
                # The TCP ring as it is now: 256 KiB pieces (runs before
                # 2026-11-26's chunk256 sent 1 MiB pieces and carry no size).
                where = {"MiB": mib, "world": world, "transport": transport}
                if transport == "tcp":
                    where["chunk_kib"] = 256
                ours = q.points("collective", "allreduce_time_p50", where)
                if not ours or not gloo:
                    raise ReportError(f"collective: no lines for {mib} MiB, {world}, {transport}")
                cells.append(spread(Stat([v for *_, v in ours]), "ms"))
                med, pairs = paired_ratio(ours, gloo)
                ratios.append(ratio_cell(med, pairs, bold=(mib == 64 and med <= 0.5)))
            cells.append(spread(Stat([v for *_, v in gloo]), "ms"))
            cells += ratios
            rows.append(cells)
    lines = table(["size, processes", "cohort, shared memory", "cohort, TCP ring", "gloo",
                   "shm / gloo", "TCP / gloo"], rows)
    return Block(lines, q.used, peer="gloo `all_reduce` (torch.distributed)",
                 extra="AllReduce SUM float32, p50 per launch; target ≤ 0.5× gloo at 64 MiB")


# Issue 29: the all-reduce across the multi-host lab (one process per host,
# links capped by tbf), `cohort bench collective --lab`.
LAB_COLLECTIVE_FILES = ["bench/collective/lab-2026-11-2*.jsonl"]


def t_collective_lab(ds, files=None):
    """cohort's TCP ring and gloo, one process per lab host: p50 time, the
    fraction of the link's bound 2(N-1)/N * bytes / rate (per run), and the
    paired ratio; a row per piece size of cohort's ring, gloo from the same
    runs."""
    all_files = ds.files(files or LAB_COLLECTIVE_FILES)
    rows = []
    rates = set()
    used = []
    for chunk in (1024, 256):
        same_runs = [f for f in all_files if any(
            m.get("suite") == "collective" and m.get("params", {}).get("chunk_kib") == chunk
            for m in f.measurements)]
        if not same_runs:
            continue
        q = Query(same_runs)
        for world in (2, 4):
            mib = 64
            ours = q.points("collective", "allreduce_time_p50",
                            {"MiB": mib, "world": world, "chunk_kib": chunk})
            gloo = q.points("gloo", "allreduce_time_p50", {"MiB": mib, "world": world})
            if not ours or not gloo:
                raise ReportError(f"collective --lab: no lines for {mib} MiB, {world} hosts, "
                                  f"{chunk} KiB pieces")
            rate = next(m["params"]["lab"] for f in q.files for m in f.measurements
                        if m.get("metric") == "allreduce_time_p50"
                        and m.get("params", {}).get("world") == world)
            rates.add(rate)
            # The suite's own bound (its allreduce_bound_fraction line), not
            # the rate parsed again here.
            bound_ms = next((m["bound_ms"] for f in q.files for m in f.measurements
                             if m.get("metric") == "allreduce_bound_fraction"
                             and m.get("params", {}).get("world") == world
                             and m.get("params", {}).get("MiB") == mib
                             and "bound_ms" in m), None)
            if bound_ms is None:
                raise ReportError(f"collective --lab: no allreduce_bound_fraction line with "
                                  f"bound_ms for {mib} MiB, {world} hosts")
            med, pairs = paired_ratio(ours, gloo)
            rows.append([f"{mib} MiB, {world} hosts, {chunk} KiB pieces",
                         spread(Stat([v for *_, v in ours]), "ms"),
                         spread(Stat([v for *_, v in gloo]), "ms"),
                         f"{num(bound_ms)} ms",
                         spread(Stat([bound_ms / v for *_, v in ours])),
                         spread(Stat([bound_ms / v for *_, v in gloo])),
                         ratio_cell(med, pairs)])
        used += [f for f in q.used if f not in used]
    if not rows:
        raise ReportError("collective --lab: no runs")
    lines = table(["size, hosts, ring pieces", "cohort (TCP ring)", "gloo", "link bound",
                   "cohort / bound", "gloo / bound", "cohort / gloo"], rows)
    return Block(lines, used, peer="gloo `all_reduce` (torch.distributed), one rank per lab host",
                 extra=f"AllReduce SUM float32 p50 per run, links capped at {', '.join(sorted(rates))}; "
                       "bound = 2(N-1)/N × bytes / rate; targets ≥ 0.85 of the bound, ≤ 0.7× gloo")


def _openblas(v):
    return isinstance(v, str) and v.startswith("openblas")


def t_graph(ds, files=None):
    q = Query(ds.files(files or GRAPH_FILES))
    rows = []
    for n in (256, 1024, 2048):
        ours = {"n": n, "dtype": "float32", "backend": _openblas}
        theirs = {"n": n, "dtype": "float32"}
        target = 0.8 if n == 1024 else None
        runs = sorted({f for f, *_ in q.points("graph", "matmul_gflops", ours)})
        if len(runs) > 1:
            # One row per run as well: the machine's speed moves between days
            # (NumPy's own figure shows it), the ratio much less.
            for run in runs:
                rq = Query([f for f in q.files if f.rel == run])
                rows.append(lower_ratio_row(
                    rq, f"MatMul float32 {n}², `{os.path.basename(run)}`", "graph",
                    "matmul_gflops", ours, "graph", "numpy_matmul_gflops", theirs, "GFLOP/s",
                    lower=False))
        label = f"MatMul float32 {n}²" + (f", all {len(runs)} runs" if len(runs) > 1 else "")
        rows.append(lower_ratio_row(q, label, "graph", "matmul_gflops", ours, "graph",
                                    "numpy_matmul_gflops", theirs, "GFLOP/s", target=target,
                                    lower=False))
    p50 = q.stat("graph", "session_run_overhead_p50", {"nodes": 10, "path": "callable"})
    p99 = q.stat("graph", "session_run_overhead_p99", {"nodes": 10, "path": "callable"})
    rows.append(["LocalSession callable, 10-node scalar graph, p50", spread(p50, "µs"), "–", "–",
                 f"< 20 µs: {'met' if p50.median < 20 else 'not met'}"])
    rows.append(["LocalSession callable, 10-node scalar graph, p99", spread(p99, "µs"), "–", "–",
                 ""])
    lines = table(["metric", "cohort (OpenBLAS)", "NumPy (OpenBLAS)", "ratio", "target"], rows)
    return Block(lines, q.used, peer="NumPy `np.matmul`")


def t_graph_eigen(ds, files=None):
    q = Query(ds.files(files or GRAPH_EIGEN_FILES))
    rows = []
    for n in (256, 1024, 2048):
        st = q.stat("graph", "matmul_gflops",
                    {"n": n, "dtype": "float32",
                     "backend": lambda v: isinstance(v, str) and v.startswith("eigen")})
        rows.append([f"MatMul float32 {n}², Eigen (`COHORT_MATMUL=eigen`)", spread(st, "GFLOP/s")])
    lines = table(["metric", "cohort"], rows)
    return Block(lines, q.used)


def t_kernels(ds, files=None):
    q = Query(ds.files(files or KERNEL_FILES))
    memcpy = q.stat("graph", "copy_bw_iter", {"threads": 1})
    rows = []
    for op, label in (("Add", "Add"), ("Mul", "Mul"), ("Relu", "Relu"), ("Sum", "Sum (all axes)"),
                      ("Exp", "Exp"), ("Softmax", "Softmax (last axis)")):
        pts = q.points("graph", "kernel_gbps", {"op": op})
        st = Stat([v for *_, v in pts])
        rows.append([label, spread(st, "GB/s"), f"{num(st.median / (2 * memcpy.median))}×"])
    rows.append(["glibc memcpy, one thread (reads + writes: 2 × this)", spread(memcpy, "GB/s"), ""])
    lines = table(["kernel, 64 MiB float32, 2 threads", "GB/s", "against memcpy's traffic"], rows)
    return Block(lines, q.used)


def training_scaling(q):
    one = q.points("training", "examples_per_second", {"tasks": 1})
    two = q.points("training", "examples_per_second", {"tasks": 2})
    if not one or not two:
        raise ReportError("training: no examples_per_second lines for 1 and 2 tasks in "
                          + ", ".join(f.rel for f in q.files))
    return one, two, paired_ratio(two, one)


def training_vs_torch(q, ours, tasks):
    """(cohort's points from the runs that ran the PyTorch peer, PyTorch's
    points, ratio, paired Stat) for `tasks` tasks; empty lists and None when
    no run has the peer."""
    torch = q.points("torch_ddp", "examples_per_second", {"tasks": tasks})
    if not torch:
        return [], [], None, None
    with_peer = {f for f, *_ in torch}
    ours = [p for p in ours if p[0] in with_peer]
    med, pairs = paired_ratio(ours, torch)
    return ours, torch, med, pairs


def t_training_torch(ds, files=None):
    """cohort's data-parallel training against the same training in PyTorch
    (bench/peers/torch_ddp_peer.py), per task count, from the runs that ran
    the peer."""
    every = ds.files(files or TORCH_TRAINING_FILES)
    # Only the runs that ran the peer: the table names no other file.
    q = Query([f for f in every
               if any(m.get("suite") == "torch_ddp" for m in f.measurements)])
    rows = []
    for tasks in (1, 2):
        ours = q.points("training", "examples_per_second", {"tasks": tasks})
        ours, torch, med, pairs = training_vs_torch(q, ours, tasks)
        if not torch:
            raise ReportError("training-torch: no torch_ddp lines for "
                              f"{tasks} task(s) in " + ", ".join(f.rel for f in q.files))
        rows.append([f"{tasks} ({'DDP on gloo' if tasks > 1 else 'one process'})",
                     spread(Stat([v for *_, v in ours]), "examples/s"),
                     spread(Stat([v for *_, v in torch]), "examples/s"),
                     ratio_cell(med, pairs, bold=med >= TORCH_TARGETS[tasks]),
                     verdict(med, TORCH_TARGETS[tasks], False)])
    lines = table(["tasks", "cohort", "PyTorch", "ratio", "target"], rows)
    return Block(lines, q.used, peer="PyTorch (torch_ddp_peer.py)",
                 extra="ratio = cohort / PyTorch, the median of the repetitions that ran "
                       "side by side")


def t_training(ds, files=None):
    """One row per run, then every run together: the scaling target is
    judged on all of them, not on the run that met it."""
    q = Query(ds.files(files or TRAINING_FILES))
    one, two, (med, pairs) = training_scaling(q)
    rows = []
    runs = sorted({f for f, *_ in one})
    for run in runs:
        o = [p for p in one if p[0] == run]
        t = [p for p in two if p[0] == run]
        if not t:
            raise ReportError(f"training: {run} has 1-task lines but no 2-task lines")
        rmed, rpairs = paired_ratio(t, o)
        rows.append([f"`{os.path.basename(run)}`", spread(Stat([v for *_, v in o])),
                     spread(Stat([v for *_, v in t])), ratio_cell(rmed, rpairs), ""])
    rows.append([f"all {len(runs)} runs ({len(one)} repetitions)",
                 spread(Stat([v for *_, v in one])), spread(Stat([v for *_, v in two])),
                 ratio_cell(med, pairs, bold=med >= 1.6), verdict(med, 1.6, False)])
    lines = table(["run", "1 task, examples/s", "2 tasks, examples/s", "scaling", "target"],
                  rows)
    return Block(lines, q.used,
                 extra="scaling = median of 2 tasks / median of 1 task; its spread pairs the "
                       "repetitions that ran side by side")


# Issue 28: the synchronous job through the runtime (train_collective's
# path) keeps the gang's side path's speed: within 10%, same run. Today's
# code, as TORCH_TRAINING_FILES (issue 28's own runs: -sync*).
RUNTIME_TRAINING_FILES = TORCH_TRAINING_FILES
RUNTIME_VS_GANG_TARGET = 0.9


def t_training_runtime(ds, files=None):
    """The synchronous job through the runtime (collective ops in each task's
    graph, `runtime_examples_per_second`) against the gang's side path
    (`examples_per_second`) and PyTorch DDP, per task count."""
    q = Query(ds.files(files or RUNTIME_TRAINING_FILES))
    rows = []
    for tasks in (1, 2):
        runtime = q.points("training", "runtime_examples_per_second", {"tasks": tasks})
        gang = q.points("training", "examples_per_second", {"tasks": tasks})
        if not runtime or not gang:
            raise ReportError("training-runtime: no runtime_examples_per_second and "
                              f"examples_per_second lines for {tasks} task(s) in "
                              + ", ".join(f.rel for f in q.files))
        gmed, gpairs = paired_ratio(runtime, gang)
        _, torch, tmed, tpairs = training_vs_torch(q, runtime, tasks)
        if not torch:
            raise ReportError(f"training-runtime: no torch_ddp lines for {tasks} task(s)")
        rows.append([str(tasks),
                     spread(Stat([v for *_, v in runtime]), "examples/s"),
                     spread(Stat([v for *_, v in gang]), "examples/s"),
                     ratio_cell(gmed, gpairs, bold=gmed >= RUNTIME_VS_GANG_TARGET),
                     verdict(gmed, RUNTIME_VS_GANG_TARGET, False),
                     spread(Stat([v for *_, v in torch]), "examples/s"),
                     ratio_cell(tmed, tpairs, bold=tmed >= TORCH_TARGETS[tasks]),
                     verdict(tmed, TORCH_TARGETS[tasks], False)])
    lines = table(["tasks", "through the runtime", "gang side path", "runtime / gang",
                   "target", "PyTorch", "runtime / PyTorch", "target"], rows)
    return Block(lines, q.used, peer="PyTorch (torch_ddp_peer.py)",
                 extra="ratios = medians of the repetitions that ran side by side")


def t_ps_training(ds, files=None):
    files = ds.files(files or PS_TRAINING_FILES)
    rows = []
    for f in files:
        by_workers = {}
        for m in f.measurements:
            if m.get("metric") == "examples_per_second":
                by_workers[m["params"]["workers"]] = m
        if 1 not in by_workers or 2 not in by_workers:
            raise ReportError(f"{f.rel}: needs examples_per_second for 1 and 2 workers")
        one, two = by_workers[1], by_workers[2]
        rows.append([f"`{os.path.basename(f.rel)}`", num(one["value"]), num(two["value"]),
                     f"{num(two['value'] / one['value'])}×",
                     f"{one.get('heldout_accuracy', '–')} / {two.get('heldout_accuracy', '–')}"])
    lines = table(["run", "1 worker, examples/s", "2 workers, examples/s", "2 / 1",
                   "held-out accuracy (1 / 2)"], rows)
    return Block(lines, files,
                 extra="one run of each, by the script `cohort bench training` replaced: "
                       "each task's rate over its own training loop, summed",
                 stats="each figure is that run's one value")


PS_WORKERS = (1, 2)
PS_TARGET = 1.5  # issue 27: the ps job >= 1.5x the RPC parameter server
# Issue 27's targets for data-parallel training against PyTorch, per task
# count: one process against the plain model, two against DDP on gloo.
TORCH_TARGETS = {1: 1.2, 2: 1.5}


def ps_vs_torch(q, workers):
    """(cohort's ps_examples_per_second points from the runs that ran the
    PyTorch RPC ps peer, the peer's points, ratio, paired Stat) for
    `workers` workers; empty lists and None when no run has both."""
    torch = q.points("torch_rpc_ps", "ps_examples_per_second", {"workers": workers})
    with_peer = {f for f, *_ in torch}
    ours = [p for p in q.points("training", "ps_examples_per_second", {"workers": workers})
            if p[0] in with_peer]
    if not ours:
        return [], [], None, None
    torch = [p for p in torch if p[0] in {f for f, *_ in ours}]
    med, pairs = paired_ratio(ours, torch)
    return ours, torch, med, pairs


def ps_accuracy(q, suite, workers):
    """The held-out accuracies the lines of `suite` report, as a Stat."""
    values = []
    for f in q.files:
        for m in f.measurements:
            if (m.get("suite") == suite and m.get("metric") == "ps_examples_per_second"
                    and m.get("params", {}).get("workers") == workers
                    and isinstance(m.get("heldout_accuracy"), (int, float))):
                values.append(float(m["heldout_accuracy"]))
    return Stat(values) if values else None


def t_training_ps_torch(ds, files=None):
    """The main job (train_ps, 1 ps and N workers) against the same job as
    a PyTorch RPC parameter server (bench/peers/torch_rpc_ps_peer.py), from
    the runs of `cohort bench training` that measured both. Until one is
    committed the table says so, rather than failing --check."""
    every = ds.files(files or TORCH_TRAINING_FILES)
    q = Query([f for f in every
               if any(m.get("suite") == "torch_rpc_ps" for m in f.measurements)])
    header = ["workers", "cohort", "PyTorch RPC ps", "ratio", "target",
              "held-out accuracy (cohort / PyTorch)"]
    rows = []
    for workers in PS_WORKERS:
        ours, torch, med, pairs = ps_vs_torch(q, workers)
        if not ours:
            continue
        acc = [ps_accuracy(q, suite, workers) for suite in ("training", "torch_rpc_ps")]
        rows.append([str(workers), spread(Stat([v for *_, v in ours]), "examples/s"),
                     spread(Stat([v for *_, v in torch]), "examples/s"),
                     ratio_cell(med, pairs, bold=med >= PS_TARGET),
                     verdict(med, PS_TARGET, False),
                     " / ".join(spread(a) if a else "–" for a in acc)])
    if not rows:
        return Block(table(header, []) + [
            "", "_No committed run of `cohort bench training` has measured "
                "ps_examples_per_second with its PyTorch peer yet._"], [])
    return Block(table(header, rows), q.used,
                 peer="PyTorch RPC parameter server (torch_rpc_ps_peer.py)",
                 extra="examples of every worker over the span common to all workers after "
                       "a warm-up; ratio = cohort / PyTorch, the median of the repetitions "
                       "that ran side by side")


def t_summary(ds, files=None):
    """The headline ratio of each area against its peer, one row each."""
    rows = []
    used = []

    def add(label, block_files, cohort, peer, ratio, target):
        for f in block_files:
            if f not in used:
                used.append(f)
        src = ", ".join(f"`{f.rel}`" for f in block_files)
        rows.append([label, cohort, peer, ratio, target, src])

    q = Query(ds.files(COORD_FILES))
    r = lower_ratio_row(q, "", "coord", "rtt_add_p50", {"clients": 1}, "tcpstore",
                        "rtt_add_p50", {"clients": 1}, "µs", target=1.0)
    add("coordination: KV round trip p50 vs TCPStore", q.used, *r[1:])
    q2 = Query(ds.files(COORD_FILES))
    r = lower_ratio_row(q2, "", "coord", "barrier_release_p50",
                        {"client_mode": "processes", "clients": 32}, "tcpstore",
                        "barrier_release_p50",
                        {"client_mode": "processes", "clients": 32, "barrier": "wait"}, "µs",
                        target=1.0)
    add("coordination: barrier release p50, 32 processes, vs TCPStore", q2.used, *r[1:])
    q3 = Query(ds.files(COORD_FILES))
    r = lower_ratio_row(q3, "", "coord", "throughput",
                        {"client_mode": "processes", "clients": 64,
                         "op_mix": "set64 pipelined+get alternating"}, "tcpstore", "throughput",
                        {"client_mode": "processes", "clients": 64,
                         "op_mix": "set64+get alternating"}, "ops/s", target=2.0, lower=False)
    add("coordination: set+get throughput, 64 processes, vs TCPStore", q3.used, *r[1:])
    q = Query(ds.files(BARRIER_FILES))
    r = lower_ratio_row(q, "", "barrier", "barrier_p50", {"world": 2}, "gloo", "barrier_p50",
                        {"world": 2}, "µs", target=0.5)
    add("barrier mode: barrier p50, 2 processes, vs gloo", q.used, *r[1:])
    q = Query(ds.files(RUNTIME_FILES))
    ours = q.points("runtime", "tensor_transfer_throughput", {"bytes": 64 << 20})
    peer = q.points("iperf3", "tcp_bw_recv_bytes", {"streams": 1})
    med, pairs = paired_ratio(ours, peer)
    add("runtime: 64 MiB tensor between tasks vs iperf3", q.used,
        spread(Stat([v for *_, v in ours]), "GB/s"), spread(Stat([v for *_, v in peer]), "GB/s"),
        ratio_cell(med, pairs, bold=med >= 0.9), verdict(med, 0.9, False))
    q = Query(ds.files(LAB_RUNTIME_FILES))
    lab = {"lab": lambda v: True}
    ours = q.points("runtime", "tensor_transfer_throughput", dict(lab, bytes=64 << 20))
    peer = q.points("iperf3", "tcp_bw_recv_bytes", dict(lab, streams=1))
    med, pairs = paired_ratio(ours, peer)
    add("runtime: 64 MiB tensor across a lab link (5 Gbit/s) vs iperf3 on it", q.used,
        spread(Stat([v for *_, v in ours]), "GB/s"), spread(Stat([v for *_, v in peer]), "GB/s"),
        ratio_cell(med, pairs, bold=med >= 0.9), verdict(med, 0.9, False))
    q = Query(ds.files(COLLECTIVE_FILES))
    r = lower_ratio_row(q, "", "collective", "allreduce_time_p50",
                        {"MiB": 64, "world": 2, "transport": "shm"}, "gloo",
                        "allreduce_time_p50", {"MiB": 64, "world": 2}, "ms", target=0.5)
    add("collectives: 64 MiB all-reduce time, 2 processes, vs gloo", q.used, *r[1:])
    # Across the multi-host lab (one process per host, 5 Gbit/s links): the
    # ring as it is now (256 KiB pieces), against gloo in the same runs.
    lab_files = [f for f in ds.files(LAB_COLLECTIVE_FILES) if any(
        m.get("params", {}).get("chunk_kib") == 256 for m in f.measurements)]
    q = Query(lab_files)
    r = lower_ratio_row(q, "", "collective", "allreduce_time_p50",
                        {"MiB": 64, "world": 4, "chunk_kib": 256}, "gloo",
                        "allreduce_time_p50", {"MiB": 64, "world": 4}, "ms", target=0.7)
    add("collectives across 4 lab hosts (links of 5 Gbit/s): 64 MiB all-reduce vs gloo",
        q.used, *r[1:])
    q = Query(ds.files(GRAPH_FILES))
    r = lower_ratio_row(q, "", "graph", "matmul_gflops",
                        {"n": 1024, "dtype": "float32", "backend": _openblas}, "graph",
                        "numpy_matmul_gflops", {"n": 1024, "dtype": "float32"}, "GFLOP/s",
                        target=0.8, lower=False)
    add("graph: MatMul float32 1024² vs NumPy (OpenBLAS)", q.used, *r[1:])
    q = Query(ds.files(TRAINING_FILES))
    one, two, (med, pairs) = training_scaling(q)
    qt = Query(ds.files(TORCH_TRAINING_FILES))
    for tasks in (1, 2):
        ours = qt.points("training", "examples_per_second", {"tasks": tasks})
        ours, torch, tmed, tpairs = training_vs_torch(qt, ours, tasks)
        if torch:
            peer_files = [f for f in q.files if f.rel in {p[0] for p in torch}]
            add(f"training: {tasks} task{'s' if tasks > 1 else ''}, examples/s vs PyTorch "
                f"({'DDP on gloo' if tasks > 1 else 'one process'})", peer_files,
                spread(Stat([v for *_, v in ours]), "examples/s"),
                spread(Stat([v for *_, v in torch]), "examples/s"),
                ratio_cell(tmed, tpairs, bold=tmed >= TORCH_TARGETS[tasks]),
                verdict(tmed, TORCH_TARGETS[tasks], False))
    qr = Query(ds.files(RUNTIME_TRAINING_FILES))
    for tasks in (1, 2):
        runtime = qr.points("training", "runtime_examples_per_second", {"tasks": tasks})
        ours, torch, rmed, rpairs = training_vs_torch(qr, runtime, tasks)
        if torch:
            add(f"training through the runtime (collective ops), {tasks} task"
                f"{'s' if tasks > 1 else ''}, vs PyTorch "
                f"({'DDP on gloo' if tasks > 1 else 'one process'})", list(qr.used),
                spread(Stat([v for *_, v in ours]), "examples/s"),
                spread(Stat([v for *_, v in torch]), "examples/s"),
                ratio_cell(rmed, rpairs, bold=rmed >= TORCH_TARGETS[tasks]),
                verdict(rmed, TORCH_TARGETS[tasks], False))
    for workers in PS_WORKERS:
        ours, torch, pmed, ppairs = ps_vs_torch(qt, workers)
        if ours:
            peer_files = [f for f in qt.files if f.rel in {p[0] for p in ours}]
            add(f"training: the main job (async PS), {workers} worker"
                f"{'s' if workers > 1 else ''} + ps, vs PyTorch's RPC parameter server",
                peer_files, spread(Stat([v for *_, v in ours]), "examples/s"),
                spread(Stat([v for *_, v in torch]), "examples/s"),
                ratio_cell(pmed, ppairs, bold=pmed >= PS_TARGET),
                verdict(pmed, PS_TARGET, False))
    add("training: data-parallel scaling, 2 tasks vs 1", q.used,
        spread(Stat([v for *_, v in two]), "examples/s"),
        spread(Stat([v for *_, v in one]), "examples/s") + " (1 task)",
        ratio_cell(med, pairs, bold=med >= 1.6), verdict(med, 1.6, False))
    q = Query(ds.files(RECOVERY_FILES))
    for job, ours, theirs in RECOVERY_JOBS:
        r = lower_ratio_row(q, "", "recovery", "rejoin_time", ours, "torchrun_recovery",
                            "rejoin_time", theirs, "ms", target=0.2)
        add(f"recovery: a worker killed, kill → first step after it, 4 tasks ({job}) "
            "vs torchrun (DDP, restart from checkpoint)", q.used, *r[1:])
    lines = table(["what", "cohort", "peer", "ratio", "target", "raw lines"], rows,
                  align=["---", "---:", "---:", "---:", "---", "---"])
    return Block(lines, used, peer="TCPStore, gloo and PyTorch from torch, iperf3, NumPy",
                 extra="ratio = cohort / peer, both measured in the same run")


RECOVERY_JOBS = (
    ("ps job, --restart task", {"tasks": 4, "job": "ps"},
     {"tasks": 4, "hidden_layers": 2}),
    ("elastic data-parallel job, --elastic 3:4",
     {"tasks": 4, "job": "elastic_data_parallel"},
     {"tasks": 4, "hidden_layers": 1}),
)


def t_recovery(ds, files=None):
    """From a worker's kill -9 to training again: cohort's ps job under
    --restart task and its elastic data-parallel job against torchrun (DDP
    on the same model, every worker restarted from the checkpoint), same
    run."""
    q = Query(ds.files(files or RECOVERY_FILES))
    rows = []
    for job, ours, theirs in RECOVERY_JOBS:
        rows.append(lower_ratio_row(q, f"{job}: detect, kill → the job knows of it",
                                    "recovery", "detect_time", ours, "torchrun_recovery",
                                    "detect_time", theirs, "ms"))
        rows.append(lower_ratio_row(q, f"{job}: rejoin, kill → first step after it",
                                    "recovery", "rejoin_time", ours, "torchrun_recovery",
                                    "rejoin_time", theirs, "ms", target=0.2))
        lost_ours = q.points("recovery", "steps_lost", ours)
        lost_peer = q.points("torchrun_recovery", "steps_lost", theirs)
        if not lost_ours or not lost_peer:
            raise ReportError(f"recovery: no steps_lost lines for the {job} on one side")
        rows.append([f"{job}: steps lost", spread(Stat([v for *_, v in lost_ours])),
                     spread(Stat([v for *_, v in lost_peer])), "", ""])
        back = q.points("recovery", "member_again_time", ours)
        if back:
            rows.append([f"{job}: kill → the restarted worker trains with the others again",
                         spread(Stat([v for *_, v in back]), "ms"), "", "", ""])
    lines = table(["4 tasks, worker:1 killed", "cohort",
                   "torchrun (DDP, --max_restarts 3, same model)", "ratio",
                   "target ≤ 0.2×"], rows)
    return Block(lines, q.used, peer="torchrun from torch",
                 extra="ratio = cohort / torchrun, both measured in the same run")


ETCD_FILES = ["bench/coord/etcd-*.jsonl"]


def t_coord_etcd(ds, files=None):
    """`cohort bench coord --backend etcd`: the control plane in a 3-member
    etcd (loopback, fsync on this machine's disk) against the built-in one,
    both measured in the same run."""
    q = Query(ds.files(files or ETCD_FILES))
    rows = []
    # (metric, the param that sizes it, row label, unit, scale of the value)
    for metric, size, label, unit, scale in (
            ("rendezvous_time", "tasks",
             "rendezvous: {:,} launchers register and pass one barrier", "ms", 1e3),
            ("barrier_release_p50", "clients", "barrier release p50, {} tasks", "µs", 1)):
        sizes = sorted({m["params"][size] for f in q.files for m in f.measurements
                        if m.get("metric") == metric})
        for n in sizes:
            built = q.points("coord", metric, {size: n, "backend": "builtin"})
            etcd = q.points("coord", metric, {size: n, "backend": "etcd"})
            med, pairs = paired_ratio(etcd, built)
            rows.append([label.format(n),
                         spread(Stat([v * scale for *_, v in etcd]), unit),
                         spread(Stat([v * scale for *_, v in built]), unit),
                         ratio_cell(med, pairs)])
    if not rows:
        raise ReportError("coord-etcd: no rendezvous or barrier lines")
    lines = table(["control plane", "etcd (3 members)", "built-in (task 0's launcher)",
                   "etcd / built-in"], rows)
    return Block(lines, q.used, peer="the built-in control plane, same run",
                 extra="agents as threads of one process; no target: the cost of "
                       "having no single host")


TABLES = {
    "recovery": t_recovery,
    "coord-etcd": t_coord_etcd,
    "summary": t_summary,
    "coord": t_coord,
    "coord-throughput": t_coord_throughput,
    "barrier": t_barrier,
    "runtime": t_runtime,
    "runtime-transfer": t_runtime_transfer,
    "collective": t_collective,
    "collective-lab": t_collective_lab,
    "runtime-lab": t_runtime_lab,
    "graph-matmul": t_graph,
    "graph-eigen": t_graph_eigen,
    "graph-kernels": t_kernels,
    "training-dp": t_training,
    "training-torch": t_training_torch,
    "training-runtime": t_training_runtime,
    "training-ps": t_ps_training,
    "training-ps-torch": t_training_ps_torch,
}


# ---------------------------------------------------------------------------
# Rewriting the documents


def rewrite(text, ds, where, cache, seen=None):
    """`text` with every bench block regenerated; ReportError on an unknown
    or unclosed block. `cache` keeps each table's rendering; `seen` (a set)
    collects (table, document) pairs."""
    opened = OPEN_RE.findall(text)
    closed = [m.group("name") for m in BLOCK_RE.finditer(text)]
    for name in opened:
        if opened.count(name) != closed.count(name):
            raise ReportError(f"{where}: block bench:{name} is not closed by "
                              f"<!-- /bench:{name} --> (or is nested)")

    def repl(m):
        name = m.group("name")
        table_name, _, globs = name.partition("@")
        if seen is not None:
            seen.add((table_name, where))
        if table_name not in TABLES:
            raise ReportError(f"{where}: unknown table bench:{table_name}; known: "
                              + ", ".join(sorted(TABLES)))
        if table_name == "summary" and globs:
            raise ReportError(f"{where}: bench:summary reads every area's files; it takes no @")
        if name not in cache:
            try:
                files = globs.split(",") if globs else None
                cache[name] = TABLES[table_name](ds, files).render()
            except ReportError as e:
                raise ReportError(f"{where}: table {name}: {e}") from None
        return m.group(1) + cache[name] + m.group(4)

    return BLOCK_RE.sub(repl, text)


# Tables that exist only to be built from named files (NAME@GLOB).
AT_ONLY = {"runtime-transfer", "coord-throughput"}
# Where a table must appear (besides anywhere else).
REQUIRED = {"summary": "README.md"}


def documents(root):
    out = []
    for pattern in DOC_GLOBS:
        out += sorted(pathlib.Path(root).glob(pattern))
    return out


def run(root, check, out=sys.stdout, err=sys.stderr):
    """Rewrites (or checks) every document under `root`; the exit code."""
    ds = Dataset(root)
    cache = {}
    seen = set()
    stale = 0
    try:
        for path in documents(root):
            text = path.read_text()
            rel = os.path.relpath(path, root)
            new = rewrite(text, ds, rel, cache, seen)
            if new == text:
                continue
            if check:
                stale += 1
                out.writelines(difflib.unified_diff(
                    text.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))
            else:
                path.write_text(new)
                print(f"rewrote {rel}", file=err)
        shown = {t for t, _ in seen}
        missing = [t for t in sorted(TABLES) if t not in shown and t not in AT_ONLY]
        if missing:
            raise ReportError("no document shows table(s) " + ", ".join(missing) + "; put "
                              "<!-- bench:NAME --><!-- /bench:NAME --> in docs/benchmarks.md")
        for t, doc in sorted(REQUIRED.items()):
            if (t, doc) not in seen and (root / doc).exists():
                raise ReportError(f"{doc} lacks the block bench:{t} (generated, not typed)")
    except ReportError as e:
        print(f"bench_report: {e}", file=err)
        return 2
    if stale:
        print(f"bench_report: {stale} document(s) hold benchmark tables that are not what "
              "the raw lines give (diff above); run `python3 scripts/bench_report.py` and "
              "commit, or fix the raw lines, not the table", file=err)
        return 1
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 with a diff when a table is not what the raw lines give")
    parser.add_argument("--list", action="store_true", help="list the tables")
    parser.add_argument("--root", default=str(ROOT), help="the repository root")
    args = parser.parse_args(argv)
    if args.list:
        for name in sorted(TABLES):
            print(name)
        return 0
    return run(pathlib.Path(args.root), args.check)


if __name__ == "__main__":
    sys.exit(main())
