#include "cohort/training/training_test_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/local_session.h"

namespace cohort::training::testing {
namespace {

absl::Mutex log_mu;
std::vector<std::string>* log_lines ABSL_GUARDED_BY(log_mu) = nullptr;

void Sink(LogLevel, const std::string& line) {
  absl::MutexLock lock(&log_mu);
  if (log_lines != nullptr) log_lines->push_back(line);
}

}  // namespace

LogCapture::LogCapture() {
  {
    absl::MutexLock lock(&log_mu);
    log_lines = new std::vector<std::string>();
  }
  SetLogSinkForTest(&Sink);
}

LogCapture::~LogCapture() {
  SetLogSinkForTest(nullptr);
  absl::MutexLock lock(&log_mu);
  delete log_lines;
  log_lines = nullptr;
}

std::vector<std::string> LogCapture::Lines() const {
  absl::MutexLock lock(&log_mu);
  return *log_lines;
}

int LogCapture::Count(const std::string& text) const {
  int n = 0;
  for (const auto& l : Lines()) n += absl::StrContains(l, text) ? 1 : 0;
  return n;
}

absl::Duration DriveClock(FakeEnv* env, absl::Duration step,
                          const std::function<void()>& fn) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    fn();
    done = true;
  });
  absl::Duration total;
  while (!done) {
    // Advance only once the code under test waits on the fake clock.
    if (env->BlockUntilParked(1, absl::Milliseconds(20))) {
      env->AdvanceTime(step);
      total += step;
    }
  }
  t.join();
  return total;
}

std::string TempDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(t != nullptr ? t : "/tmp", "/cohort_training_",
                                 getpid(), "_", name);
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (!std::filesystem::create_directories(dir, error)) return "";
  return dir;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void BuildCounterModel(const Scope& root) {
  ops::Variable step = ops::GetOrCreateGlobalStep(root);
  ops::Variable w = ops::MakeVariable(root, "w", 0.f);
  Operation inc = ops::IncrementGlobalStep(root, step);
  Operation add = ops::AssignAddVariableOp(root, w.handle, 1.f);
  ops::NoOp(root.WithOpName("train").WithControlDependencies({inc, add}));
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT);
  ops::Identity(root.WithOpName("x_out"), x);
}

void FaultPlan::FailNextRuns(std::vector<absl::Status> errors) {
  absl::MutexLock lock(&mu_);
  for (auto& e : errors) errors_.push_back(std::move(e));
}

absl::Status FaultPlan::Next() {
  absl::MutexLock lock(&mu_);
  ++runs_;
  if (errors_.empty()) return absl::OkStatus();
  absl::Status s = errors_.front();
  errors_.pop_front();
  return s;
}

int FaultPlan::runs() const {
  absl::MutexLock lock(&mu_);
  return runs_;
}

absl::Status SharedSession::Run(
    const RunOptions& options,
    const std::vector<std::pair<std::string, Tensor>>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, std::vector<Tensor>* outputs) {
  if (closed_) return absl::FailedPreconditionError("session closed");
  absl::Status s = plan_->Next();
  if (!s.ok()) return s;
  return inner_->Run(options, feeds, fetches, targets, outputs);
}

absl::Status SharedSession::Close() {
  closed_ = true;
  return absl::OkStatus();
}

SessionFactory SharedLocalCluster::factory() {
  return
      [this](const std::string&, const GraphDef& graph,
             const ConfigProto&) -> absl::StatusOr<std::unique_ptr<Session>> {
        absl::Status s = create_plan->Next();
        if (!s.ok()) return s;
        if (local == nullptr) {
          SessionOptions o;
          o.num_threads = 1;
          auto l = LocalSession::Create(graph, o);
          if (!l.ok()) return l.status();
          local = std::shared_ptr<Session>(*std::move(l));
        }
        ++*created;
        return std::unique_ptr<Session>(new SharedSession(local, plan));
      };
}

}  // namespace cohort::training::testing
