#include "cohort/training/saver.h"

#include "cohort/graph/checkpoint.h"
#include "cohort/graph/local_session.h"
#include "cohort/training/training_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

using testing::FileExists;
using testing::ReadFileOrDie;

class SaverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::BuildCounterModel(root_);
    auto saver = Saver::Build(root_);
    ASSERT_TRUE(saver.ok()) << saver.status();
    saver_ = *saver;
    session_ = NewSession();
    ASSERT_TRUE(
        session_->Run({}, {}, {"init"}, nullptr).ok() ||
        session_->Run({}, {}, {"global_step/Assign", "w/Assign"}, nullptr)
            .ok());
  }
  std::unique_ptr<LocalSession> NewSession() {
    GraphDef def;
    EXPECT_TRUE(root_.ToGraphDef(&def).ok());
    return *LocalSession::Create(def);
  }
  float W(Session* s) {
    std::vector<Tensor> out;
    EXPECT_TRUE(s->Run({}, {"w/read:0"}, {}, &out).ok());
    return out[0].scalar<float>();
  }
  Scope root_ = Scope::NewRootScope();
  std::shared_ptr<Saver> saver_;
  std::unique_ptr<LocalSession> session_;
};

TEST_F(SaverTest, KeepsFiveAndWritesTheTfPointerFile) {
  std::string dir = testing::TempDir("keep5");
  for (int step = 1; step <= 7; ++step) {
    auto p = saver_->Save(session_.get(), dir, step);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, dir + "/model.ckpt-" + std::to_string(step));
  }
  EXPECT_FALSE(FileExists(dir + "/model.ckpt-1"));
  EXPECT_FALSE(FileExists(dir + "/model.ckpt-2"));
  for (int step = 3; step <= 7; ++step) {
    EXPECT_TRUE(FileExists(dir + "/model.ckpt-" + std::to_string(step)));
  }
  EXPECT_EQ(ReadFileOrDie(dir + "/checkpoint"),
            "model_checkpoint_path: \"model.ckpt-7\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-3\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-4\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-5\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-6\"\n"
            "all_model_checkpoint_paths: \"model.ckpt-7\"\n");
  EXPECT_EQ(*Saver::LatestCheckpoint(dir), dir + "/model.ckpt-7");

  // A new saver (a restarted job) continues the list from the file.
  ASSERT_TRUE(saver_->Save(session_.get(), dir, 8).ok());
  Scope other = Scope::NewRootScope();
  testing::BuildCounterModel(other);
  auto restarted = Saver::Build(other);
  ASSERT_TRUE(restarted.ok());
  ASSERT_TRUE((*restarted)->Save(session_.get(), dir, 9).ok());
  EXPECT_FALSE(FileExists(dir + "/model.ckpt-4"));
  EXPECT_TRUE(FileExists(dir + "/model.ckpt-5"));
  EXPECT_EQ(ReadCheckpointState(dir)->all_model_checkpoint_paths.size(), 5u);
}

// Whatever a pointer file lists, a saver deletes only files it would have
// written itself.
TEST_F(SaverTest, DeletesOnlyItsOwnCheckpoints) {
  std::string dir = testing::TempDir("own");
  ASSERT_TRUE(WriteFileAtomically(dir + "/notes.txt", "keep me").ok());
  ASSERT_TRUE(
      WriteFileAtomically(dir + "/checkpoint",
                          "model_checkpoint_path: \"model.ckpt-4\"\n"
                          "all_model_checkpoint_paths: \"notes.txt\"\n"
                          "all_model_checkpoint_paths: \"model.ckpt-1\"\n"
                          "all_model_checkpoint_paths: \"model.ckpt-2\"\n"
                          "all_model_checkpoint_paths: \"model.ckpt-3\"\n"
                          "all_model_checkpoint_paths: \"model.ckpt-4\"\n")
          .ok());
  ASSERT_TRUE(saver_->Save(session_.get(), dir, 5).ok());
  EXPECT_TRUE(FileExists(dir + "/notes.txt"));
  EXPECT_EQ(
      ReadCheckpointState(dir)->all_model_checkpoint_paths,
      (std::vector<std::string>{"model.ckpt-1", "model.ckpt-2", "model.ckpt-3",
                                "model.ckpt-4", "model.ckpt-5"}));
  EXPECT_EQ(saver_->Save(session_.get(), dir, 6, "../escape").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SaverTest, RestoresValuesThroughTheSession) {
  std::string dir = testing::TempDir("restore");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(session_->Run({}, {}, {"train"}, nullptr).ok());
  }
  auto path = saver_->Save(session_.get(), dir, 3);
  ASSERT_TRUE(path.ok());
  auto fresh = NewSession();
  EXPECT_EQ(saver_->last_restored(), "");
  ASSERT_TRUE(saver_->Restore(fresh.get(), *path).ok());
  EXPECT_EQ(W(fresh.get()), 3.f);
  EXPECT_EQ(saver_->last_restored(), *path);
  // The graph Saver reads the same file.
  auto entries = ReadCheckpointFile(*path);
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 2u);

  ASSERT_TRUE(WriteCheckpointFile(dir + "/partial", {{"w", Tensor(1.f)}}).ok());
  absl::Status s = saver_->Restore(fresh.get(), dir + "/partial");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "variable 'global_step' is not in checkpoint '" + dir +
                             "/partial'");
}

}  // namespace
}  // namespace cohort::training
