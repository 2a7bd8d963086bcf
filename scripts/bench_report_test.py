#!/usr/bin/env python3
"""Tests of scripts/bench_report.py on a tiny fixture: the statistics it
reports (median and spread of every repetition, never the best), the ratio
pairing, the provenance line, and the rewrite/--check cycle that makes a
hand-typed figure fail. Run by ctest as docs.bench_report_unit."""

import io
import json
import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_report as br  # noqa: E402


def jl(*objs):
    return "".join(json.dumps(o) + "\n" for o in objs)


def meas(suite, metric, value, rep, **params):
    return {"suite": suite, "metric": metric, "params": params, "value": value,
            "unit": "us", "rep": rep}


# Two runs of a toy suite: cohort "t" and its peer "p", three repetitions
# each. Run a is fast, run b slow: the median must sit between them.
RUN_A = jl(
    {"suite": "env", "bench": "t", "when": "start", "date": "2026-11-26T08:00:00Z",
     "loadavg": [0.5, 1.0, 1.0], "nproc": 2},
    meas("t", "lat", 10.0, 0, n=2), meas("p", "lat", 20.0, 0, n=2),
    meas("t", "lat", 12.0, 1, n=2), meas("p", "lat", 20.0, 1, n=2),
    meas("t", "lat", 11.0, 2, n=2), meas("p", "lat", 40.0, 2, n=2),
    meas("t", "lat", 99.0, 0, n=4),  # another size: never selected for n=2
    {"suite": "t", "metric": "lat_ratio", "params": {"n": 2}, "value": 0.55, "unit": "x",
     "reps": 3},
    {"suite": "t", "error": "a failed measurement is not a value"},
    {"suite": "env", "bench": "t", "when": "end", "date": "2026-11-26T08:05:00Z",
     "loadavg": [2.5, 1.0, 1.0], "nproc": 2},
)
RUN_B = jl(
    {"suite": "env", "bench": "t", "when": "start", "date": "2026-11-26T09:00:00Z",
     "loadavg": [0.25, 1.0, 1.0], "nproc": 2,
     "peer_versions": {"torch": "1.13.0a0"}},
    {"suite": "env", "bench": "t", "when": "during",
     "loadavg_1m_samples": {"min": 0.3, "max": 7.5, "median": 1.0, "n": 4}},
    meas("t", "lat", 30.0, 0, n=2), meas("p", "lat", 30.0, 0, n=2),
    meas("t", "lat", 31.0, 1, n=2), meas("p", "lat", 31.0, 1, n=2),
    meas("t", "lat", 32.0, 2, n=2),  # no peer value for rep 2: not paired
)


def toy_table(ds, files=None):
    q = br.Query(ds.files(files or ["bench/t/results-*.jsonl"]))
    row = br.lower_ratio_row(q, "lat n=2", "t", "lat", {"n": 2}, "p", "lat", {"n": 2}, "µs",
                             target=0.5)
    return br.Block(br.table(["metric", "cohort", "peer", "ratio", "target"], [row]), q.used,
                    peer="toy peer")


class Fixture(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        (self.root / "bench/t").mkdir(parents=True)
        (self.root / "bench/t/results-2026-11-26-a.jsonl").write_text(RUN_A)
        (self.root / "bench/t/results-2026-11-26-b.jsonl").write_text(RUN_B)
        (self.root / "docs").mkdir()
        # Only the toy table exists while a test runs.
        saved = (br.TABLES, br.AT_ONLY, br.REQUIRED)
        br.TABLES, br.AT_ONLY, br.REQUIRED = {"toy": toy_table}, set(), {}
        self.addCleanup(self.restore, saved)
        self.addCleanup(self.tmp.cleanup)

    @staticmethod
    def restore(saved):
        br.TABLES, br.AT_ONLY, br.REQUIRED = saved

    def query(self):
        return br.Query(br.Dataset(self.root).files(["bench/t/results-*.jsonl"]))


class StatsTest(Fixture):
    def test_median_and_spread_cover_every_repetition_of_every_run(self):
        st = self.query().stat("t", "lat", {"n": 2})
        # 10, 11, 12, 30, 31, 32: the lower median 12, a measured value (not
        # 21, which no repetition measured), and not run a's best (10).
        self.assertEqual(st.n, 6)
        self.assertEqual(st.median, 12.0)
        self.assertEqual((st.lo, st.hi), (10.0, 32.0))
        self.assertEqual(br.spread(st, "µs"), "12 µs (10–32)")

    def test_error_and_ratio_lines_are_not_measurements(self):
        f = br.RunFile("x", RUN_A)
        self.assertEqual(len(f.errors), 1)
        self.assertEqual([r["metric"] for r in f.ratios], ["lat_ratio"])
        self.assertEqual(len(f.measurements), 7)

    def test_ratio_is_the_median_of_same_file_same_rep_pairs(self):
        q = self.query()
        ours = q.points("t", "lat", {"n": 2})
        theirs = q.points("p", "lat", {"n": 2})
        med, pairs = br.paired_ratio(ours, theirs)
        # pairs: a/0 0.5, a/1 0.6, a/2 0.275, b/0 1.0, b/1 1.0; b/2 has no peer.
        self.assertEqual(pairs.n, 5)
        self.assertAlmostEqual(pairs.lo, 11.0 / 40.0)
        self.assertAlmostEqual(pairs.hi, 1.0)
        self.assertAlmostEqual(pairs.median, 0.6)
        # The ratio is the pairs' median (each pair saw the same machine),
        # not median(cohort) / median(peer) = 12 / 30 across days.
        self.assertAlmostEqual(med, 0.6)

    def test_ratio_without_pairs_is_median_over_median(self):
        ours = [("f", 0, 10.0), ("f", 1, 30.0), ("f", 2, 20.0)]
        theirs = [("g", 0, 40.0)]
        med, pairs = br.paired_ratio(ours, theirs)
        self.assertIsNone(pairs)
        self.assertAlmostEqual(med, 20.0 / 40.0)

    def test_verdict_judges_the_ratio_as_shown(self):
        # 1.003 is shown as "1×"; against "≤ 1" it must read met.
        self.assertEqual(br.verdict(1.003, 1, True), "≤ 1: met")
        self.assertEqual(br.verdict(1.006, 1, True), "≤ 1: not met")
        self.assertEqual(br.verdict(1.596, 1.6, False), "≥ 1.6: met")
        self.assertEqual(br.verdict(1.594, 1.6, False), "≥ 1.6: not met")

    def test_missing_lines_are_an_error_naming_metric_and_files(self):
        with self.assertRaises(br.ReportError) as cm:
            self.query().stat("t", "lat", {"n": 8})
        self.assertIn("t/lat", str(cm.exception))
        self.assertIn("results-2026-11-26-a.jsonl", str(cm.exception))

    def test_number_format(self):
        self.assertEqual(br.num(26260.3), "26,260")
        self.assertEqual(br.num(184.2), "184")
        self.assertEqual(br.num(0.1174), "0.117")
        self.assertEqual(br.num(1.616), "1.62")


class ProvenanceTest(Fixture):
    def test_line_names_files_span_load_range_and_peer_version(self):
        q = self.query()
        q.points("t", "lat", {"n": 2})
        line = br.provenance(q.used, "toy peer")
        self.assertIn("`bench/t/results-2026-11-26-a.jsonl`", line)
        self.assertIn("`bench/t/results-2026-11-26-b.jsonl`", line)
        self.assertIn("2026-11-26 08:00–09:00 UTC", line)
        # start/end 1-minute loads and the sampled min/max: 0.25 .. 7.5.
        self.assertIn("load average (1 min, env lines) 0.25–7.50 on 2 CPUs", line)
        self.assertIn("peer: toy peer (torch 1.13.0a0)", line)

    def test_peer_version_printed_by_the_peer_itself_is_named(self):
        line = meas("p", "lat", 1.0, 0, n=2)
        line["peer_version"] = "2.1"
        (self.root / "bench/t/results-2026-11-21.jsonl").write_text(jl(line))
        f = br.Dataset(self.root).files(["bench/t/results-2026-11-21.jsonl"])
        self.assertIn("peer: toy peer (p 2.1)", br.provenance(f, "toy peer"))

    def test_file_without_env_line_says_load_not_recorded(self):
        (self.root / "bench/t/results-2026-11-20.jsonl").write_text(
            jl(meas("t", "lat", 1.0, 0, n=2)))
        f = br.Dataset(self.root).files(["bench/t/results-2026-11-20.jsonl"])
        line = br.provenance(f, "toy peer")
        self.assertIn("load not recorded", line)
        self.assertIn("version not recorded", line)


class RewriteTest(Fixture):
    DOC = "# Doc\n\ntext\n\n<!-- bench:toy -->\n| hand | typed |\n<!-- /bench:toy -->\n\nafter\n"

    def run_report(self, check):
        out, err = io.StringIO(), io.StringIO()
        code = br.run(self.root, check, out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    def test_check_fails_on_hand_typed_table_and_passes_after_rewrite(self):
        doc = self.root / "docs/a.md"
        doc.write_text(self.DOC)
        code, diff, _ = self.run_report(check=True)
        self.assertEqual(code, 1)
        self.assertIn("-| hand | typed |", diff)
        self.assertEqual(doc.read_text(), self.DOC)  # --check writes nothing
        self.assertEqual(self.run_report(check=False)[0], 0)
        text = doc.read_text()
        self.assertIn("| lat n=2 | 12 µs (10–32) | 30 µs (20–40) | 0.6× (0.275–1) |", text)
        self.assertTrue(text.startswith("# Doc\n\ntext\n\n<!-- bench:toy -->\n"))
        self.assertTrue(text.endswith("<!-- /bench:toy -->\n\nafter\n"))
        self.assertEqual(self.run_report(check=True)[0], 0)
        # One figure changed by hand inside the block: the check fails again.
        doc.write_text(text.replace("12 µs", "11 µs", 1))
        code, diff, _ = self.run_report(check=True)
        self.assertEqual(code, 1)
        self.assertIn("+| lat n=2 | 12 µs", diff)

    def test_at_glob_builds_the_table_from_the_named_files_only(self):
        doc = self.root / "docs/a.md"
        doc.write_text("<!-- bench:toy@bench/t/results-2026-11-26-b.jsonl -->\n"
                       "<!-- /bench:toy@bench/t/results-2026-11-26-b.jsonl -->\n")
        self.assertEqual(self.run_report(check=False)[0], 0)
        text = doc.read_text()
        # run b alone: cohort 30, 31, 32; peer 30, 31.
        self.assertIn("| lat n=2 | 31 µs (30–32) | 30 µs (30–31) | 1× |", text)
        self.assertNotIn("results-2026-11-26-a.jsonl", text)

    def test_a_table_no_document_shows_or_a_missing_required_block_is_an_error(self):
        (self.root / "docs/a.md").write_text("no blocks\n")
        code, _, err = self.run_report(check=True)
        self.assertEqual(code, 2)
        self.assertIn("no document shows table(s) toy", err)
        br.REQUIRED = {"toy": "README.md"}
        (self.root / "README.md").write_text("typed by hand\n")
        (self.root / "docs/a.md").write_text(self.DOC)
        code, _, err = self.run_report(check=False)
        self.assertEqual(code, 2)
        self.assertIn("README.md lacks the block bench:toy", err)

    def test_unknown_or_unclosed_block_is_an_error(self):
        (self.root / "docs/a.md").write_text("<!-- bench:nope -->\n<!-- /bench:nope -->\n")
        code, _, err = self.run_report(check=True)
        self.assertEqual(code, 2)
        self.assertIn("unknown table bench:nope", err)
        (self.root / "docs/a.md").write_text("<!-- bench:toy -->\nno end\n")
        code, _, err = self.run_report(check=True)
        self.assertEqual(code, 2)
        self.assertIn("not closed", err)


def ps_line(suite, workers, value, rep, accuracy):
    line = meas(suite, "ps_examples_per_second", value, rep, workers=workers, ps=1,
                parameters=1071108, batch=64)
    line.update(unit="examples/s", heldout_accuracy=accuracy)
    return line


class PsTrainingTableTest(unittest.TestCase):
    """training-ps-torch: the main job against the PyTorch RPC ps."""

    def render(self, text):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            (root / "bench/training").mkdir(parents=True)
            (root / "bench/training/results-2026-11-27.jsonl").write_text(text)
            return br.t_training_ps_torch(
                br.Dataset(root), ["bench/training/results-*.jsonl"]).render()

    def test_no_run_with_the_metric_yet_says_so_instead_of_failing(self):
        text = self.render(jl(meas("training", "examples_per_second", 1.0, 0, tasks=1)))
        self.assertIn("| workers | cohort | PyTorch RPC ps |", text)
        self.assertIn("No committed run of `cohort bench training` has measured "
                      "ps_examples_per_second", text)
        self.assertNotIn("Raw lines", text)

    def test_rows_pair_the_repetitions_and_judge_the_target(self):
        text = self.render(jl(
            {"suite": "env", "bench": "training", "when": "start",
             "date": "2026-11-27T08:00:00Z", "loadavg": [1.0, 1.0, 1.0], "nproc": 2},
            ps_line("training", 1, 9000.0, 0, 0.94), ps_line("torch_rpc_ps", 1, 6000.0, 0, 0.9),
            ps_line("training", 1, 8000.0, 1, 0.95), ps_line("torch_rpc_ps", 1, 4000.0, 1, 0.9),
            ps_line("training", 2, 7000.0, 0, 0.93), ps_line("torch_rpc_ps", 2, 7000.0, 0, 0.91)))
        # 1 worker: ratios 1.5 and 2 -> lower median 1.5, met; 2 workers: 1, not met.
        self.assertIn("| 1 | 8,000 examples/s (8,000–9,000) | 4,000 examples/s (4,000–6,000) "
                      "| **1.5×** (1.5–2) | ≥ 1.5: met | 0.94 (0.94–0.95) / 0.9 |", text)
        self.assertIn("| 2 | 7,000 examples/s | 7,000 examples/s | 1× | ≥ 1.5: not met "
                      "| 0.93 / 0.91 |", text)
        self.assertIn("Raw lines: `bench/training/results-2026-11-27.jsonl`", text)

    def test_a_run_without_the_peer_is_left_out(self):
        text = self.render(jl(ps_line("training", 1, 9000.0, 0, 0.94)))
        self.assertIn("No committed run", text)


if __name__ == "__main__":
    unittest.main()
