#include "cohort/graph/checkpoint.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  EXPECT_TRUE(std::filesystem::create_directories(dir, error)) << dir;
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

// Checkpoint files built by hand: each entry's payload is `proto` as is, so
// a test can declare what a saver never writes.
void PutLE(std::string* s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
std::string CraftCheckpoint(
    const std::vector<std::pair<std::string, TensorProto>>& entries) {
  std::string out("COHORTCKPT1\n");
  PutLE(&out, entries.size(), 4);
  PutLE(&out, crc32c::Mask(crc32c::Value(out.data(), out.size())), 4);
  for (const auto& [name, proto] : entries) {
    const size_t start = out.size();
    const std::string payload = proto.SerializeAsString();
    PutLE(&out, name.size(), 4);
    out += name;
    PutLE(&out, payload.size(), 8);
    out += payload;
    PutLE(&out,
          crc32c::Mask(crc32c::Value(out.data() + start, out.size() - start)),
          4);
  }
  return out + "CKPTEND\n";
}

// Entries that declared 1 GiB each from a few bytes were expanded (and
// enough of them exhausted memory).
TEST(CheckpointFileTest, EntriesDeclaringMoreThanTheyCarryAreDataLoss) {
  const std::string path = TempDir() + "/crafted";
  TensorProto gib;
  gib.set_dtype(DT_FLOAT);
  gib.mutable_tensor_shape()->add_dim()->set_size(int64_t{1} << 28);
  gib.add_float_val(1.0f);
  WriteAll(path, CraftCheckpoint({{"w0", gib}, {"w1", gib}, {"w2", gib}}));
  auto read = ReadCheckpointFile(path);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("entry 'w0'"));
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("1073741824 bytes"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("carries only"));
}

// A sparse 50 GB file was read into one string: std::bad_alloc.
TEST(CheckpointFileTest, AFileOverTheMemoryBudgetIsRefusedBeforeReading) {
  const std::string path = TempDir() + "/sparse";
  WriteAll(path, "COHORTCKPT1\n");
  ASSERT_EQ(::truncate(path.c_str(), int64_t{50} << 30), 0);
  auto read = ReadCheckpointFile(path);  // The process budget: <= 8 GiB.
  ASSERT_EQ(read.status().code(), absl::StatusCode::kResourceExhausted)
      << read.status();
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("53687091200 bytes"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("memory budget"));
}

// Restored tensors are charged to the budget as they are built; the bytes
// go back when they are dropped.
TEST(CheckpointFileTest, RestoredTensorsAreChargedToTheBudget) {
  const std::string path = TempDir() + "/strings";
  Tensor names(DT_STRING, TensorShape({100000}));  // 3.2 MB of headers.
  ASSERT_TRUE(WriteCheckpointFile(path, {{"names", names}}).ok());
  auto small = MemoryBudget::Create("the test's", 1 << 20, nullptr, "raise");
  auto read = ReadCheckpointFile(path, small.get());
  ASSERT_EQ(read.status().code(), absl::StatusCode::kResourceExhausted)
      << read.status();
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("entry 'names'"));
  EXPECT_EQ(small->used(), 0);
  auto large = MemoryBudget::Create("the test's", 64 << 20, nullptr, "raise");
  read = ReadCheckpointFile(path, large.get());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_GE(large->used(), 3200000);
  read = absl::UnknownError("dropped");
  EXPECT_EQ(large->used(), 0);
}

// A crashed save's temporaries stayed for ever.
TEST(SaverTest, StaleTemporariesAreRemovedOnTheNextSave) {
  const std::string dir = TempDir();
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  const std::string stale =
      absl::StrCat(dir, "/model.ckpt-5.tmp-", dead, "-12345");
  const std::string stale_pointer =
      absl::StrCat(dir, "/checkpoint.tmp-", dead, "-678");
  // A live writer's temporary (pid 1 always runs) and files of other
  // patterns stay.
  const std::string live = dir + "/model.ckpt-6.tmp-1-99";
  const std::string others[] = {dir + "/notes.tmp", dir + "/model.tmp-x-1",
                                dir + "/.tmp-7-7"};
  for (const std::string& f : {stale, stale_pointer, live}) WriteAll(f, "x");
  for (const std::string& f : others) WriteAll(f, "x");
  ResourceMgr rm;
  auto var = std::make_shared<Var>(DT_FLOAT);
  {
    absl::MutexLock lock(var->mu());
    var->Assign(Tensor(1.0f));
  }
  ASSERT_TRUE(rm.Create("", "w", var).ok());
  ASSERT_TRUE(Saver(&rm).Save(dir, 7).ok());
  struct stat st;
  EXPECT_NE(::stat(stale.c_str(), &st), 0);
  EXPECT_NE(::stat(stale_pointer.c_str(), &st), 0);
  EXPECT_EQ(::stat(live.c_str(), &st), 0);
  for (const std::string& f : others) EXPECT_EQ(::stat(f.c_str(), &st), 0) << f;
}

// A world-writable or foreign-owned checkpoint directory was used silently.
TEST(CheckpointDirectoryTest, WritableByOthersOrForeignOwnedIsRefused) {
  const std::string dir = TempDir() + "/ckpt";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  EXPECT_TRUE(CheckCheckpointDirectory(dir).ok());
  for (mode_t mode : {0777, 01777, 0770}) {
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    absl::Status s = CheckCheckpointDirectory(dir);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << mode;
    EXPECT_THAT(std::string(s.message()), HasSubstr(dir));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrFormat("mode %04o", mode)));
    EXPECT_THAT(std::string(s.message()), HasSubstr("chmod go-w"));
  }
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  EXPECT_TRUE(CheckCheckpointDirectory(dir).ok());
  EXPECT_EQ(CheckCheckpointDirectory(dir + "/missing").code(),
            absl::StatusCode::kNotFound);
  if (::getuid() != 0) GTEST_SKIP() << "chown to another user needs root";
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  absl::Status s = CheckCheckpointDirectory(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("65534"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("not by this user"));
}

}  // namespace
}  // namespace cohort
