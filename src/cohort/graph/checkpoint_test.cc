#include "cohort/graph/checkpoint.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cohort/graph/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string base = t != nullptr ? t : "/tmp";
  std::string dir = absl::StrCat(
      base, "/cohort_ckpt_", getpid(), "_",
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::string cmd = absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'");
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

TEST(Crc32cTest, KnownValues) {
  // From RFC 3720 / LevelDB's tests.
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c::Value(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(crc32c::Value("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c::Extend(crc32c::Value("hello ", 6), "world", 5),
            crc32c::Value("hello world", 11));
  EXPECT_EQ(crc32c::Unmask(crc32c::Mask(0x12345678u)), 0x12345678u);
}

TEST(CheckpointFileTest, RoundTrip) {
  std::string dir = TempDir();
  Tensor big(DT_FLOAT, TensorShape({300, 300}));
  for (int64_t i = 0; i < big.NumElements(); ++i)
    big.flat<float>()(i) = i * 0.5f;
  CheckpointEntries in = {{"w", big},
                          {"step", Tensor(int64_t{42})},
                          {"names", Tensor::Vec<std::string>({"a", "b"})}};
  std::string path = dir + "/file";
  ASSERT_TRUE(WriteCheckpointFile(path, in).ok());
  auto out = ReadCheckpointFile(path);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*out)[i].first, in[i].first);
    EXPECT_TRUE((*out)[i].second.Equals(in[i].second));
  }
}

TEST(CheckpointFileTest, CorruptionAndTruncationAreDataLoss) {
  std::string dir = TempDir();
  std::string path = dir + "/file";
  ASSERT_TRUE(
      WriteCheckpointFile(
          path, {{"w", Tensor::Vec<float>({1, 2, 3, 4})}, {"b", Tensor(2.0)}})
          .ok());
  const std::string good = ReadAll(path);
  // Flip every byte in turn: never OK, never wrong numbers.
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x5a;
    WriteAll(path, bad);
    auto r = ReadCheckpointFile(path);
    ASSERT_FALSE(r.ok()) << "flipping byte " << i << " went unnoticed";
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    ASSERT_THAT(std::string(r.status().message()), HasSubstr(path));
  }
  // Every truncation.
  for (size_t n = 0; n < good.size(); ++n) {
    WriteAll(path, good.substr(0, n));
    auto r = ReadCheckpointFile(path);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss)
        << "truncated to " << n;
  }
  WriteAll(path, good + "x");
  EXPECT_EQ(ReadCheckpointFile(path).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadCheckpointFile(dir + "/absent").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SaverTest, SaveRestoreAllAndNamed) {
  std::string dir = TempDir();
  ResourceMgr rm;
  auto w = std::make_shared<Var>(DT_FLOAT, PartialTensorShape({2}), "w");
  auto b = std::make_shared<Var>(DT_FLOAT, PartialTensorShape(), "b");
  auto uninit = std::make_shared<Var>(DT_FLOAT, PartialTensorShape(), "u");
  ASSERT_TRUE(rm.Create("", "w", w).ok());
  ASSERT_TRUE(rm.Create("", "b", b).ok());
  ASSERT_TRUE(rm.Create("", "u", uninit).ok());
  {
    absl::MutexLock l1(w->mu());
    w->Assign(Tensor::Vec<float>({1, 2}));
  }
  {
    absl::MutexLock l2(b->mu());
    b->Assign(Tensor(5.f));
  }
  Saver saver(&rm);
  auto path = saver.Save(dir, 10);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir + "/model.ckpt-10");
  EXPECT_EQ(*Saver::LatestCheckpoint(dir), *path);
  EXPECT_EQ(saver.Save(dir, 11, {"u"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(saver.Save(dir, 11, {"zz"}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*Saver::LatestCheckpoint(dir),
            *path);  // Failed saves move nothing.

  {
    absl::MutexLock l(w->mu());
    w->Assign(Tensor::Vec<float>({9, 9}));
  }
  {
    absl::MutexLock l(b->mu());
    b->Assign(Tensor(9.f));
  }
  ASSERT_TRUE(saver.Restore(*path, {"w"}).ok());
  {
    absl::ReaderMutexLock l(w->mu());
    EXPECT_TRUE(w->value().Equals(Tensor::Vec<float>({1, 2})));
  }
  {
    absl::ReaderMutexLock l(b->mu());
    EXPECT_EQ(b->value().scalar<float>(), 9.f);  // Not named: untouched.
  }
  EXPECT_THAT(std::string(saver.Restore(*path, {"nope"}).message()),
              HasSubstr("variable 'nope' is not in checkpoint"));

  // Restoring into a fresh manager creates the variables.
  ResourceMgr fresh;
  ASSERT_TRUE(Saver(&fresh).Restore(*path).ok());
  auto restored = fresh.Lookup<Var>("", "b");
  ASSERT_TRUE(restored.ok());
  absl::ReaderMutexLock l((*restored)->mu());
  EXPECT_EQ((*restored)->value().scalar<float>(), 5.f);
}

TEST(CheckpointStateTest, RoundTripsTheListAndRejectsJunk) {
  std::string dir = TempDir();
  CheckpointState state;
  state.model_checkpoint_path = "model.ckpt-3";
  state.all_model_checkpoint_paths = {"model.ckpt-2", "model.ckpt-3"};
  ASSERT_TRUE(WriteCheckpointState(dir, state).ok());
  auto back = ReadCheckpointState(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->model_checkpoint_path, "model.ckpt-3");
  EXPECT_EQ(back->all_model_checkpoint_paths, state.all_model_checkpoint_paths);
  EXPECT_EQ(*Saver::LatestCheckpoint(dir), dir + "/model.ckpt-3");
  ASSERT_TRUE(WriteFileAtomically(dir + "/checkpoint", "junk\n").ok());
  EXPECT_EQ(ReadCheckpointState(dir).status().code(),
            absl::StatusCode::kDataLoss);
}

// A crafted pointer file must not lead a reader (or a saver deleting old
// checkpoints) outside the directory; TF's timestamp lines are skipped.
TEST(CheckpointStateTest, PathsOutsideTheDirectoryAreDataLoss) {
  std::string dir = TempDir();
  for (const char* bad : {"model_checkpoint_path: \"../../etc/passwd\"\n",
                          "model_checkpoint_path: \"/etc/passwd\"\n",
                          "model_checkpoint_path: \"model.ckpt-1\"\n"
                          "all_model_checkpoint_paths: \"..\"\n",
                          "model_checkpoint_path: model.ckpt-1\n"}) {
    ASSERT_TRUE(WriteFileAtomically(dir + "/checkpoint", bad).ok());
    absl::StatusOr<std::string> latest = Saver::LatestCheckpoint(dir);
    EXPECT_EQ(latest.status().code(), absl::StatusCode::kDataLoss) << bad;
    EXPECT_THAT(latest.status().message(), HasSubstr(dir + "/checkpoint"));
  }
  ASSERT_TRUE(
      WriteFileAtomically(dir + "/checkpoint",
                          "model_checkpoint_path: \"model.ckpt-7\"\n"
                          "all_model_checkpoint_paths: \"model.ckpt-7\"\n"
                          "all_model_checkpoint_timestamps: 1764000000.5\n"
                          "last_preserved_timestamp: 1764000000.1\n")
          .ok());
  auto state = ReadCheckpointState(dir);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->all_model_checkpoint_paths,
            std::vector<std::string>{"model.ckpt-7"});
}

TEST(CheckpointFileTest, OnlyRegularFilesAreRead) {
  EXPECT_EQ(ReadCheckpointFile("/dev/zero").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadCheckpointFile(TempDir()).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadCheckpointFile("/nonexistent/ckpt").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SaverTest, ConflictsAndMissingPointer) {
  std::string dir = TempDir();
  EXPECT_EQ(Saver::LatestCheckpoint(dir).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteCheckpointFile(dir + "/c", {{"w", Tensor(1)}}).ok());
  ResourceMgr rm;
  ASSERT_TRUE(rm.Create("", "w", std::make_shared<Var>(DT_FLOAT)).ok());
  absl::Status s = Saver(&rm).Restore(dir + "/c");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("'w' as int32 but the variable is float"));
}

}  // namespace
}  // namespace cohort
