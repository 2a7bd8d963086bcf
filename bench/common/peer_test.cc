// The ratio arithmetic and PeerRunner against small Python scripts written
// by each test (run with /usr/bin/python3, as the real peers are; none of
// them imports torch).
#include "bench/common/peer.h"

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::bench {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

Json Line(const std::string& metric, Json params, double value) {
  return Json{{"suite", "s"},
              {"metric", metric},
              {"params", std::move(params)},
              {"value", value},
              {"unit", "us"}};
}

TEST(PercentileTest, NearestRankOnNMinusOne) {
  const std::vector<double> xs = {5, 1, 4, 2, 3};  // sorted: 1 2 3 4 5
  EXPECT_EQ(Percentile(xs, 0), 1);
  EXPECT_EQ(Percentile(xs, 50), 3);
  EXPECT_EQ(Percentile(xs, 99), 5);  // round(0.99 * 4) = 4
  EXPECT_EQ(Percentile(xs, 60), 3);  // round(0.6 * 4) = 2
  EXPECT_EQ(Percentile(xs, 65), 4);  // round(0.65 * 4) = 3
  EXPECT_EQ(Percentile({}, 50), 0);
}

TEST(MedianOfTest, MatchesMetricAndEveryParam) {
  MeasurementLog log;
  log.Add(Line("m", {{"world", 2}, {"bytes", 64}}, 30));
  log.Add(Line("m", {{"world", 2}, {"bytes", 64}}, 10));
  log.Add(Line("m", {{"world", 2}, {"bytes", 64}}, 20));
  log.Add(Line("m", {{"world", 4}, {"bytes", 64}}, 1000));
  log.Add(Line("other", {{"world", 2}}, 1000));
  log.Add(Json{{"suite", "s"}, {"error", "x"}, {"metric", "m"}, {"value", 1}});
  int count = 0;
  EXPECT_EQ(MedianOf(log, "m", {{"world", 2}}, &count), 20);
  EXPECT_EQ(count, 3);
  log.Add(Line("m", {{"world", 2}, {"bytes", 64}}, 40));
  EXPECT_EQ(MedianOf(log, "m", {{"world", 2}, {"bytes", 64}}, &count), 25);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(MedianOf(log, "m", {{"world", 8}}, &count), 0);
  EXPECT_EQ(count, 0);
}

TEST(PrintRatioTest, DividesMediansAndDescribesBothSides) {
  MeasurementLog ours, theirs;
  for (double v : {100.0, 120.0, 110.0}) {
    ours.Add(Line("barrier_p50", {{"world", 2}, {"transport", "shm"}}, v));
  }
  ours.Add(Line("barrier_p50", {{"world", 2}, {"transport", "tcp"}}, 1e6));
  for (double v : {300.0, 330.0}) {
    theirs.Add(Line("all_gather_p50", {{"world", 2}, {"barrier", "wait"}}, v));
  }
  theirs.Add(Line("all_gather_p50", {{"world", 2}, {"barrier", "torch"}}, 1));
  RatioSpec spec;
  spec.metric = "barrier_p50";
  spec.params = {{"world", 2}};
  spec.peer_metric = "all_gather_p50";
  spec.peer_params = {{"barrier", "wait"}};
  spec.ours_params = {{"transport", "shm"}};
  spec.lower_is_better = true;
  spec.note = "why";
  testing::internal::CaptureStdout();
  absl::Status s = PrintRatio("suite", "gloo", ours, theirs, spec);
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_TRUE(s.ok()) << s;
  absl::StatusOr<Json> line = ParseJson(out, "ratio line");
  ASSERT_TRUE(line.ok()) << out;
  // 110 / 315 = 0.349206..., rounded to 3 decimals.
  EXPECT_EQ((*line)["value"], 0.349);
  EXPECT_EQ((*line)["cohort"], 110);
  EXPECT_EQ((*line)["peer_value"], 315);
  EXPECT_EQ((*line)["reps"], 2);
  EXPECT_EQ((*line)["unit"], "x");
  EXPECT_EQ((*line)["better"], "lower");
  EXPECT_EQ((*line)["note"], "why");
  EXPECT_EQ((*line)["params"], (Json{{"world", 2},
                                     {"transport", "shm"},
                                     {"peer", "gloo"},
                                     {"peer_metric", "all_gather_p50"},
                                     {"peer_barrier", "wait"}}));
  EXPECT_FALSE(line->contains("rep"));
}

TEST(PrintRatioTest, HigherIsBetterIsSaid) {
  MeasurementLog ours, theirs;
  ours.Add(Line("throughput", {{"clients", 8}}, 3000));
  theirs.Add(Line("throughput", {{"clients", 8}}, 2000));
  RatioSpec spec{
      "throughput", {{"clients", 8}}, "throughput", Json::object(), false, ""};
  testing::internal::CaptureStdout();
  ASSERT_TRUE(PrintRatio("coord", "tcpstore", ours, theirs, spec).ok());
  absl::StatusOr<Json> line =
      ParseJson(testing::internal::GetCapturedStdout(), "ratio line");
  ASSERT_TRUE(line.ok());
  EXPECT_EQ((*line)["value"], 1.5);
  EXPECT_EQ((*line)["better"], "higher");
  EXPECT_FALSE(line->contains("note"));
}

TEST(PrintRatioTest, MissingSideOrZeroPeerIsNotFoundAndPrintsNothing) {
  MeasurementLog ours, theirs, zero;
  ours.Add(Line("m", {{"world", 2}}, 5));
  theirs.Add(Line("m", {{"world", 4}}, 5));
  zero.Add(Line("m", {{"world", 2}}, 0));
  RatioSpec spec{"m", {{"world", 2}}, "m", Json::object(), true, ""};
  testing::internal::CaptureStdout();
  absl::Status no_peer = PrintRatio("s", "gloo", ours, theirs, spec);
  absl::Status no_ours = PrintRatio("s", "gloo", theirs, ours, spec);
  absl::Status zero_peer = PrintRatio("s", "gloo", ours, zero, spec);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(no_peer.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_peer.message(), HasSubstr("no gloo measurement of m"));
  EXPECT_EQ(no_ours.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_ours.message(), HasSubstr("no cohort measurement of m"));
  EXPECT_EQ(zero_peer.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(zero_peer.message(), HasSubstr("the peer's median is 0"));
}

// A temporary directory holding the test's Python script.
class PeerRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/cohort-peer-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Writes `body` (Python) as the peer script; returns its path.
  std::string Script(const std::string& body) {
    const std::string path = dir_ + "/peer.py";
    std::ofstream(path) << "import json, sys, time\n" << body;
    return path;
  }

  // Runs the script; returns its Status, with what it printed in `out`.
  absl::Status Run(const std::string& body, MeasurementLog* log,
                   std::string* out, const std::vector<std::string>& args = {},
                   absl::Duration timeout = absl::Seconds(30),
                   PeerRunner* runner = nullptr) {
    // A given runner keeps the script it was made with.
    PeerRunner own("fake", "peer.py",
                   runner != nullptr ? dir_ + "/peer.py" : Script(body));
    PeerRunner& peer = runner != nullptr ? *runner : own;
    testing::internal::CaptureStdout();
    absl::Status s = peer.Run(args, timeout, /*rep=*/7, log);
    *out = testing::internal::GetCapturedStdout();
    return s;
  }

  std::string dir_;
};

constexpr char kTwoLines[] = R"(
for v in (1.5, 2.5):
    print(json.dumps({"suite": "fake", "metric": "lat", "params": {"n": 2},
                      "value": v, "unit": "us"}))
print("a line that is not JSON")
print(json.dumps({"suite": "fake", "note": "not a measurement"}))
)";

TEST_F(PeerRunnerTest, KeepsMeasurementsWithTheRepetition) {
  MeasurementLog log;
  std::string out;
  absl::Status s = Run(kTwoLines, &log, &out);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(log.lines().size(), 2u);
  EXPECT_EQ(log.lines()[0]["value"], 1.5);
  EXPECT_EQ(log.lines()[1]["value"], 2.5);
  EXPECT_EQ(log.lines()[1]["rep"], 7);
  EXPECT_EQ(log.lines()[1]["params"], (Json{{"n", 2}}));
  EXPECT_THAT(out, HasSubstr("\"value\":2.5"));
  EXPECT_THAT(out, Not(HasSubstr("not JSON")));
}

TEST_F(PeerRunnerTest, PassesArgumentsVerbatim) {
  MeasurementLog log;
  std::string out;
  absl::Status s = Run(R"(
print(json.dumps({"suite": "fake", "metric": "args", "params": {"argv": sys.argv[1:]},
                  "value": len(sys.argv) - 1, "unit": "n"}))
)",
                       &log, &out, {"--sizes", "2,4", "it's two words"});
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(log.lines()[0]["params"]["argv"],
            (Json{"--sizes", "2,4", "it's two words"}));
}

TEST_F(PeerRunnerTest, FilterDropsLinesButTheyStillCount) {
  PeerRunner peer("fake", "peer.py", Script(kTwoLines));
  peer.set_filter([](const Json& line) { return line["value"] == 2.5; });
  MeasurementLog log;
  std::string out;
  absl::Status s = Run("", &log, &out, {}, absl::Seconds(30), &peer);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(log.lines()[0]["value"], 2.5);
  EXPECT_THAT(out, Not(HasSubstr("\"value\":1.5")));
}

TEST_F(PeerRunnerTest, NonZeroExitIsInternalWithStderrTail) {
  MeasurementLog log;
  std::string out;
  absl::Status s = Run(R"(
print(json.dumps({"suite": "fake", "metric": "lat", "value": 1, "unit": "us"}))
print("torch said no", file=sys.stderr)
sys.exit(3)
)",
                       &log, &out, {"--x"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("peer peer.py --x exited with status 3"),
                    HasSubstr("stderr ends: torch said no")));
}

TEST_F(PeerRunnerTest, ErrorLineOnStdoutIsInternalAndPrinted) {
  MeasurementLog log;
  std::string out;
  absl::Status s = Run(R"(
print(json.dumps({"suite": "fake", "metric": "lat", "value": 1, "unit": "us"}))
print(json.dumps({"error": "rank 1 of 2: connection reset", "world": 2}))
)",
                       &log, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(),
              HasSubstr("reported 1 error(s), first \"rank 1 of 2: "
                        "connection reset\""));
  // The error line is passed through with the peer's suite and the rep.
  EXPECT_THAT(out,
              AllOf(HasSubstr("\"error\":\"rank 1 of 2: connection "
                              "reset\""),
                    HasSubstr("\"suite\":\"fake\""), HasSubstr("\"rep\":7")));
}

TEST_F(PeerRunnerTest, ErrorLineOnStderrIsInternal) {
  MeasurementLog log;
  std::string out;
  absl::Status s = Run(R"(
print(json.dumps({"suite": "fake", "metric": "lat", "value": 1, "unit": "us"}))
print(json.dumps({"suite": "fake", "error": "store timed out"}), file=sys.stderr)
)",
                       &log, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("first \"store timed out\""));
  EXPECT_THAT(out, HasSubstr("\"error\":\"store timed out\""));
}

TEST_F(PeerRunnerTest, NoMeasurementIsInternal) {
  MeasurementLog log;
  std::string out;
  absl::Status s = Run("print('started')\n", &log, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("printed no measurement"));
  EXPECT_TRUE(log.lines().empty());
}

TEST_F(PeerRunnerTest, NonNumericValueIsNoMeasurement) {
  MeasurementLog log;
  std::string out;
  absl::Status s = Run(R"(
print(json.dumps({"suite": "fake", "metric": "lat", "value": "fast", "unit": "us"}))
)",
                       &log, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("printed no measurement"));
}

TEST_F(PeerRunnerTest, OverrunningScriptIsDeadlineExceeded) {
  MeasurementLog log;
  std::string out;
  // It prints a measurement first, so only the deadline can fail it; the
  // sleep is far past the 1 s limit (SIGTERM ends it at once).
  absl::Status s = Run(R"(
print(json.dumps({"suite": "fake", "metric": "lat", "value": 1, "unit": "us"}), flush=True)
time.sleep(600)
)",
                       &log, &out, {}, absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("peer peer.py  timed out after 1 s"));
}

TEST_F(PeerRunnerTest, MissingScriptIsNotFound) {
  PeerRunner peer("fake", "peer.py", dir_ + "/absent.py");
  absl::Status s = peer.Check();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr(dir_ + "/absent.py"),
                    HasSubstr("--peer-script PATH, or --no-peer")));
}

TEST(PeerLookupTest, DefaultIsTheRepositorysBenchPeers) {
  for (const char* script : {"gloo_peer.py", "tcpstore_peer.py"}) {
    PeerRunner peer("p", script, "");
    const std::string want = std::string("/bench/peers/") + script;
    ASSERT_GE(peer.script_path().size(), want.size()) << script;
    EXPECT_EQ(
        peer.script_path().substr(peer.script_path().size() - want.size()),
        want);
    EXPECT_EQ(access(peer.script_path().c_str(), R_OK), 0);
  }
  PeerRunner absent("p", "no_such_peer.py", "");
  EXPECT_EQ(absent.script_path(), "");
  absl::Status s = absent.Check();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no_such_peer.py is not readable; "
                                     "looked in bench/peers"));
}

}  // namespace
}  // namespace cohort::bench
