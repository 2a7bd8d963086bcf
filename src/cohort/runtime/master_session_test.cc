// The master without gRPC: in-process Workers behind a WorkerCache that
// counts the calls each task receives, so the master's caching and
// fan-out can be asserted exactly.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/device.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/standard_registries.h"
#include "cohort/runtime/master.h"
#include "cohort/runtime/worker.h"
#include "cohort/runtime/worker_errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;

// Forwards to a Worker and counts RegisterGraph and RunGraph calls.
class CountingWorker : public WorkerInterface {
 public:
  explicit CountingWorker(Worker* worker) : worker_(worker) {}

#define COHORT_COUNTING_FORWARD_(Name)                                       \
  void Name##Async(CallOptions* opts, const Name##Request* request,          \
                   Name##Response* response, StatusCallback done) override { \
    Count(#Name);                                                            \
    worker_->Name##Async(opts, request, response, std::move(done));          \
  }
  COHORT_WORKER_RPCS(COHORT_COUNTING_FORWARD_)
#undef COHORT_COUNTING_FORWARD_

  int count(const std::string& rpc) {
    absl::MutexLock lock(&mu_);
    return counts_[rpc];
  }

 private:
  void Count(const char* rpc) {
    absl::MutexLock lock(&mu_);
    ++counts_[rpc];
  }
  Worker* const worker_;
  absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

// A partition whose RunGraph answers as `script` says (given the call's
// options and its done callback); every other RPC is forwarded.
class ScriptedRunGraph : public CountingWorker {
 public:
  using Script = std::function<void(CallOptions*, StatusCallback)>;
  ScriptedRunGraph(Worker* worker, Script script)
      : CountingWorker(worker), script_(std::move(script)) {}
  void RunGraphAsync(CallOptions* opts, const RunGraphRequest* request,
                     RunGraphResponse* response, StatusCallback done) override {
    script_(opts, std::move(done));
  }

 private:
  Script script_;
};

// Tasks ps:0, worker:0, worker:1, each a Worker with its own Device.
class InProcessWorkers : public WorkerCache {
 public:
  InProcessWorkers() {
    for (const char* task :
         {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0",
          "/job:worker/replica:0/task:1"}) {
      auto& t = tasks_[task];
      t.device =
          std::make_unique<Device>(absl::StrCat(task, "/device:CPU:0"), 1);
      WorkerEnv env;
      env.task_name = task;
      env.device = t.device.get();
      env.worker_cache = this;
      t.worker = std::make_unique<Worker>(env);
      t.counting = std::make_unique<CountingWorker>(t.worker.get());
    }
  }
  ~InProcessWorkers() override {
    for (auto& [name, t] : tasks_) t.worker->Stop(absl::CancelledError("end"));
  }

  std::vector<std::string> ListTasks() const override {
    std::vector<std::string> out;
    for (const auto& [name, t] : tasks_) out.push_back(name);
    return out;
  }
  absl::StatusOr<WorkerInterface*> GetWorker(const std::string& task) override {
    auto it = tasks_.find(task);
    if (it == tasks_.end()) return absl::NotFoundError(task);
    return it->second.counting.get();
  }
  std::string TaskAddress(const std::string& task) const override {
    return "in-process";
  }
  CountingWorker* counting(const std::string& task) {
    return tasks_.at(task).counting.get();
  }
  // `task`'s RunGraph answers as `script` says from now on.
  void ScriptRunGraph(const std::string& task,
                      ScriptedRunGraph::Script script) {
    Task& t = tasks_.at(task);
    t.counting =
        std::make_unique<ScriptedRunGraph>(t.worker.get(), std::move(script));
  }

 private:
  struct Task {
    std::unique_ptr<Device> device;
    std::unique_ptr<Worker> worker;
    std::unique_ptr<CountingWorker> counting;
  };
  std::map<std::string, Task> tasks_;
};

GraphDef TwoTaskGraph() {
  Scope root = Scope::NewRootScope();
  auto c = ops::Const(root.WithOpName("c").WithDevice("/job:ps/task:0"), 2.0f);
  auto x = ops::Placeholder(
      root.WithOpName("x").WithDevice("/job:worker/task:0"), DT_FLOAT);
  ops::Add(root.WithOpName("y").WithDevice("/job:worker/task:0"), x, c);
  GraphDef g;
  EXPECT_TRUE(root.ToGraphDef(&g).ok());
  return g;
}

class MasterSessionTest : public ::testing::Test {
 protected:
  MasterSessionTest() {
    MasterEnv env;
    env.task = "/job:worker/replica:0/task:0";
    env.device = "/job:worker/replica:0/task:0/device:CPU:0";
    env.workers = &workers_;
    env.op_registry = StandardOpRegistry();
    master_ = std::make_unique<Master>(env);
  }

  std::string CreateSession(const GraphDef& g) {
    CreateSessionRequest request;
    *request.mutable_graph_def() = g;
    CreateSessionResponse response;
    absl::Status s = master_->CreateSession(nullptr, request, &response);
    EXPECT_TRUE(s.ok()) << s;
    return response.session_handle();
  }

  absl::Status Run(const std::string& handle, float x, float* y) {
    RunStepRequest request;
    request.set_session_handle(handle);
    NamedTensorProto* feed = request.add_feed();
    feed->set_name("x");
    Tensor(x).AsProto(feed->mutable_tensor());
    request.add_fetch("y:0");
    RunStepResponse response;
    COHORT_RETURN_IF_ERROR(master_->RunStep(nullptr, request, &response));
    auto t = Tensor::FromProto(response.tensor(0).tensor());
    if (!t.ok()) return t.status();
    *y = t->scalar<float>();
    return absl::OkStatus();
  }

  InProcessWorkers workers_;
  std::unique_ptr<Master> master_;
};

TEST_F(MasterSessionTest, OneRegistrationPerPartitionForManySteps) {
  const std::string handle = CreateSession(TwoTaskGraph());
  for (int i = 0; i < 100; ++i) {
    float y = 0;
    ASSERT_TRUE(Run(handle, i, &y).ok());
    EXPECT_EQ(y, i + 2.0f);
  }
  // Two partitions (ps:0 and worker:0), each registered once; worker:1 is
  // in the session but the signature never touches it.
  EXPECT_EQ(
      workers_.counting("/job:ps/replica:0/task:0")->count("RegisterGraph"), 1);
  EXPECT_EQ(
      workers_.counting("/job:worker/replica:0/task:0")->count("RegisterGraph"),
      1);
  EXPECT_EQ(
      workers_.counting("/job:worker/replica:0/task:1")->count("RegisterGraph"),
      0);
  EXPECT_EQ(workers_.counting("/job:ps/replica:0/task:0")->count("RunGraph"),
            100);
  EXPECT_EQ(
      workers_.counting("/job:worker/replica:0/task:1")->count("RunGraph"), 0);
  // Every task got a worker session, and discovery asked each once.
  for (const std::string& task : workers_.ListTasks()) {
    EXPECT_EQ(workers_.counting(task)->count("CreateWorkerSession"), 1) << task;
    EXPECT_EQ(workers_.counting(task)->count("GetStatus"), 1) << task;
  }
}

TEST_F(MasterSessionTest, CloseDeregistersAndDeletesWorkerSessions) {
  const std::string handle = CreateSession(TwoTaskGraph());
  float y = 0;
  ASSERT_TRUE(Run(handle, 1, &y).ok());
  CloseSessionRequest close;
  close.set_session_handle(handle);
  CloseSessionResponse closed;
  ASSERT_TRUE(master_->CloseSession(close, &closed).ok());
  EXPECT_EQ(
      workers_.counting("/job:ps/replica:0/task:0")->count("DeregisterGraph"),
      1);
  for (const std::string& task : workers_.ListTasks()) {
    EXPECT_EQ(workers_.counting(task)->count("DeleteWorkerSession"), 1) << task;
  }
  absl::Status s = Run(handle, 1, &y);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("is not found"));
}

// The step's first error is its root cause. When that error is itself
// derived (a rendezvous aborted by another failure), the plain Cancelled a
// partition answers because the master cancelled it after that error must
// not replace it: it hid a lost ps's error from MonitoredSession's recovery.
TEST_F(MasterSessionTest, ACancelledAnswerAfterTheFirstErrorIsNotTheRootCause) {
  // Scripted before the session exists: the master keeps the workers it
  // is given. Registration still reaches the real workers.
  workers_.ScriptRunGraph(
      "/job:worker/replica:0/task:0",
      [](CallOptions* opts, StatusCallback done) {
        // Answers only when the master cancels it, with a plain Cancelled,
        // as an executor's step cancellation does.
        auto shared = std::make_shared<StatusCallback>(std::move(done));
        opts->SetCancelCallback([shared] {
          (*shared)(absl::CancelledError("step 7 was cancelled"));
        });
      });
  workers_.ScriptRunGraph(
      "/job:ps/replica:0/task:0", [](CallOptions*, StatusCallback done) {
        done(MarkDerived(
            absl::UnavailableError("/job:ps/replica:0/task:0 is unavailable: "
                                   "lost the connection")));
      });
  const std::string handle = CreateSession(TwoTaskGraph());
  float y = 0;
  absl::Status s = Run(handle, 1, &y);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("/job:ps/replica:0/task:0"));
}

TEST_F(MasterSessionTest, ExtendChecksTheGraphVersion) {
  const std::string handle = CreateSession(TwoTaskGraph());
  Scope root = Scope::NewRootScope();
  ops::Const(root.WithOpName("d"), 5.0f);
  GraphDef more;
  ASSERT_TRUE(root.ToGraphDef(&more).ok());
  ExtendSessionRequest request;
  request.set_session_handle(handle);
  *request.mutable_graph_def() = more;
  request.set_current_graph_version(0);
  ExtendSessionResponse response;
  ASSERT_TRUE(master_->ExtendSession(request, &response).ok());
  EXPECT_EQ(response.new_graph_version(), 1);
  absl::Status s = master_->ExtendSession(request, &response);  // Still 0.
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.message(),
              HasSubstr("Current version is 1 but caller expected 0."));
}

}  // namespace
}  // namespace cohort::runtime
