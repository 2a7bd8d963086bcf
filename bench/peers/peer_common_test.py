#!/usr/bin/env python3
"""Tests of peer_common.common_span: the PyTorch parameter-server peer
counts its examples by the rule cohort's side uses
(bench/training/ps_job.cc, CommonMeasuredSpan), so these are the cases of
bench/training/ps_job_test.cc with the same expected figures. Standard
library only (peer_common imports no torch). Run by ctest as
bench_peer_common_test."""

import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from peer_common import common_span  # noqa: E402


class CommonSpanTest(unittest.TestCase):

    def test_one_worker_counts_every_step_after_its_warm_up(self):
        rate, steps, seconds = common_span(
            [("worker:0", [100, 200, 300, 400, 500], 64)], 2)
        self.assertEqual(steps, 3)
        self.assertAlmostEqual(seconds, 300e-6)
        self.assertAlmostEqual(rate, 192 / 300e-6)

    def test_two_workers_count_only_their_common_span(self):
        rate, steps, seconds = common_span(
            [("worker:0", [0, 10, 20, 30, 40, 50], 10),
             ("worker:1", [25, 35, 45, 55, 65], 10)], 2)
        self.assertEqual(steps, 3)  # 40, 50 and 45 end in (35, 50]
        self.assertAlmostEqual(seconds, 15e-6)
        self.assertAlmostEqual(rate, 30 / 15e-6)

    def test_examples_use_each_workers_batch(self):
        rate, steps, seconds = common_span(
            [("worker:0", [0, 10, 20], 8), ("worker:1", [0, 10, 20], 32)], 1)
        self.assertEqual(steps, 4)
        self.assertAlmostEqual(rate * seconds, 2 * 8 + 2 * 32)

    def test_workers_that_never_train_together_are_refused(self):
        with self.assertRaisesRegex(
                ValueError, "worker:0 ended its last step at 2 us, not after "
                "worker:1 ended its warm-up at 10 us"):
            common_span([("worker:0", [0, 1, 2], 64),
                         ("worker:1", [10, 11, 12], 64)], 1)

    def test_a_worker_with_no_step_past_its_warm_up_is_refused(self):
        with self.assertRaisesRegex(
                ValueError, "worker:1 ran 2 step\\(s\\), none past the warm-up of 2"):
            common_span([("worker:0", [0, 1, 2, 3], 64),
                         ("worker:1", [1, 2], 64)], 2)

    def test_no_workers_or_no_warm_up_is_refused(self):
        with self.assertRaises(ValueError):
            common_span([], 1)
        with self.assertRaises(ValueError):
            common_span([("worker:0", [0, 1, 2], 64)], 0)


if __name__ == "__main__":
    unittest.main()
