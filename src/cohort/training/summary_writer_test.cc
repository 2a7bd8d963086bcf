// The event files the summary hooks write, read back by an independent
// reader of the format (tests/tensorboard/read_events.py: its own CRC-32C
// and protobuf decoding), which checks every record's CRCs.
#include "cohort/training/summary_writer.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cohort/base/env.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/json.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/training/basic_session_run_hooks.h"
#include "cohort/training/monitored_session.h"
#include "cohort/training/session_creator.h"
#include "cohort/training/training_test_util.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

// The independent reader's events, one JSON object each.
absl::StatusOr<std::vector<Json>> ReadEvents(const std::string& path) {
  auto out = Env::Default()->RunCommand(
      {"python3", COHORT_SOURCE_DIR "/tests/tensorboard/read_events.py", path});
  if (!out.ok()) return out.status();
  std::vector<Json> events;
  for (absl::string_view line : absl::StrSplit(*out, '\n', absl::SkipEmpty())) {
    auto j = ParseJson(line, path);
    if (!j.ok()) return j.status();
    events.push_back(*std::move(j));
  }
  return events;
}

TEST(SummaryWriterTest, HooksWriteEventsThatAnIndependentReaderAccepts) {
  FakeEnv env;
  const std::string dir = testing::TempDir("summaries") + "/run";
  Scope root = Scope::NewRootScope();
  testing::BuildCounterModel(root);
  // A value that no step changes: what the file must hold is known.
  ops::Const(root.WithOpName("c"), 2.5f);
  testing::SharedLocalCluster cluster;
  SessionCreatorOptions c;
  c.factory = cluster.factory();
  MonitoredSessionOptions o;
  o.env = &env;
  auto counter = StepCounterHook::Create(2, std::nullopt, &env, dir, 32);
  ASSERT_TRUE(counter.ok()) << counter.status();
  auto saver =
      SummarySaverHook::Create({{"c", "c:0"}}, dir, 2, std::nullopt, &env);
  ASSERT_TRUE(saver.ok()) << saver.status();
  auto sess = MonitoredSession::Create(
      root, std::make_unique<ChiefSessionCreator>(nullptr, c),
      {*counter, *saver}, o);
  ASSERT_TRUE(sess.ok()) << sess.status();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE((*sess)->Run({}, {"train"}, nullptr).ok());
    env.AdvanceTime(absl::Milliseconds(500));
  }
  ASSERT_TRUE((*sess)->Close().ok());

  // Both hooks share the process's one file for the directory.
  std::vector<std::string> files = EventFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  auto events = ReadEvents(files[0]);
  ASSERT_TRUE(events.ok()) << events.status();
  std::vector<std::string> got;
  for (const Json& e : *events) got.push_back(JsonDump(e));
  // As TensorFlow: the saver writes at the step read after the run, on
  // the first run (after a SessionLog START) and then every 2 steps: 1, 3,
  // 5. The counter writes at steps 3 and 5, 2 steps per simulated second
  // each time, x 32 examples per step.
  const std::vector<std::string> want = {
      R"({"file_version":"brain.Event:2","wall_time":1700000000.0})",
      R"({"session_log":{"status":1},"step":1,"wall_time":1700000000.0})",
      R"({"step":1,"summary":{"c":2.5},"wall_time":1700000000.0})",
      R"({"step":3,"summary":{"examples/sec":64.0,"global_step/sec":2.0},"wall_time":1700000001.0})",
      R"({"step":3,"summary":{"c":2.5},"wall_time":1700000001.0})",
      R"({"step":5,"summary":{"examples/sec":64.0,"global_step/sec":2.0},"wall_time":1700000002.0})",
      R"({"step":5,"summary":{"c":2.5},"wall_time":1700000002.0})",
  };
  EXPECT_EQ(got, want);
}

TEST(SummaryWriterTest, TheReaderRejectsACorruptedRecord) {
  const std::string dir = testing::TempDir("summaries_corrupt");
  FakeEnv env;
  auto w = EventFileWriter::Create(dir, env.Now());
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->AddScalars(7, {{"loss", 0.5f}}, env.Now()).ok());
  const std::string path = (*w)->path();
  ASSERT_TRUE(ReadEvents(path).ok());
  std::string bytes = *Env::Default()->ReadFile(path);
  bytes[bytes.size() - 6] ^= 0x01;  // inside the last record's data
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  // The reader's own words, from its stderr.
  const std::string out = dir + "/reader.out";
  const std::string command = absl::StrCat(
      "python3 " COHORT_SOURCE_DIR "/tests/tensorboard/read_events.py '", path,
      "' > '", out, "' 2>&1");
  EXPECT_NE(std::system(command.c_str()), 0);
  const std::string said = *Env::Default()->ReadFile(out);
  EXPECT_NE(said.find("bad data CRC at offset"), std::string::npos) << said;
}

TEST(SummaryWriterTest, ADeletedFileIsReplacedOnTheNextEvent) {
  const std::string dir = testing::TempDir("summaries_deleted");
  FakeEnv env;
  auto w = EventFileWriter::Create(dir + "/", env.Now());
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string first = (*w)->path();
  ASSERT_EQ(std::remove(first.c_str()), 0);
  ASSERT_TRUE((*w)->AddScalars(3, {{"loss", 0.25f}}, env.Now()).ok());
  // A new file (in the same second, under the same name), which starts
  // with its own version event.
  auto events = ReadEvents((*w)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0]["file_version"], "brain.Event:2");
  EXPECT_EQ((*events)[1]["summary"]["loss"], 0.25);
  // "dir/" and "dir" are one writer.
  auto a = SummaryWriterFor(dir + "/cached/", env.Now());
  auto b = SummaryWriterFor(dir + "/cached", env.Now());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
}

TEST(SummaryWriterTest, BadArgumentsAreNamed) {
  EXPECT_EQ(SummarySaverHook::Create({}, "/tmp/x").status().message(),
            "SummarySaverHook needs at least one (tag, tensor) to summarise");
  EXPECT_EQ(SummarySaverHook::Create({{"a", "a:0"}}, "").status().message(),
            "SummarySaverHook needs an output_dir for its event file");
  EXPECT_EQ(
      SummarySaverHook::Create({{"a", "a:0"}}, "/tmp/x", 2, absl::Seconds(1))
          .status()
          .message(),
      "exactly one of save_steps and save_secs should be provided.");
  FakeEnv env;
  const std::string file = testing::TempDir("summaries_file") + "/plain";
  std::ofstream(file) << "x";
  auto w = EventFileWriter::Create(file + "/sub", env.Now());
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message())
                .find("cannot create the summary directory " + file + "/sub"),
            std::string::npos)
      << w.status();
}

}  // namespace
}  // namespace cohort::training
