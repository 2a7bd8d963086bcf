// Test helpers for the worker tests: hand-written partition GraphDefs
// (Const, Placeholder, Add, variables, Send/Recv with incarnations) and
// calls to a WorkerInterface that are waited on with a deadline.
//
// Thread safety: the builders are thread-compatible; Start* calls are
// thread-safe (each PendingCall owns its request, response and options and
// lives until its `done` ran).
#ifndef COHORT_RUNTIME_WORKER_TEST_UTIL_H_
#define COHORT_RUNTIME_WORKER_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/device.h"
#include "cohort/graph/tensor.h"
#include "cohort/runtime/worker.h"
#include "cohort/runtime/worker_interface.h"
#include "gtest/gtest.h"

namespace cohort::runtime::testing {

// A worker whose every RPC answers Unimplemented naming it: tests override
// the calls they script.
class UnimplementedWorker : public WorkerInterface {
 public:
#define COHORT_WORKER_TEST_UNIMPLEMENTED_(Name)                         \
  void Name##Async(CallOptions*, const Name##Request*, Name##Response*, \
                   StatusCallback done) override {                      \
    done(absl::UnimplementedError(#Name));                              \
  }
  COHORT_WORKER_RPCS(COHORT_WORKER_TEST_UNIMPLEMENTED_)
#undef COHORT_WORKER_TEST_UNIMPLEMENTED_
};

inline std::string Task(const std::string& job, int index) {
  return absl::StrCat("/job:", job, "/replica:0/task:", index);
}
inline std::string Dev(const std::string& task) {
  return task + "/device:CPU:0";
}

inline NodeDef* AddNode(GraphDef* g, const std::string& name,
                        const std::string& op,
                        const std::vector<std::string>& inputs,
                        const std::string& device) {
  NodeDef* n = g->add_node();
  n->set_name(name);
  n->set_op(op);
  for (const auto& in : inputs) n->add_input(in);
  n->set_device(device);
  return n;
}
inline void SetType(NodeDef* n, const std::string& key, DataType t) {
  (*n->mutable_attr())[key].set_type(t);
}
inline void SetString(NodeDef* n, const std::string& key,
                      const std::string& v) {
  (*n->mutable_attr())[key].set_s(v);
}
inline void SetInt(NodeDef* n, const std::string& key, int64_t v) {
  (*n->mutable_attr())[key].set_i(v);
}

inline TensorProto ToProto(const Tensor& t) {
  TensorProto p;
  t.AsProto(&p);
  return p;
}

inline void AddConst(GraphDef* g, const std::string& name, const Tensor& value,
                     const std::string& device) {
  NodeDef* n = AddNode(g, name, "Const", {}, device);
  SetType(n, "dtype", value.dtype());
  value.AsProto((*n->mutable_attr())["value"].mutable_tensor());
}
inline void AddPlaceholder(GraphDef* g, const std::string& name, DataType t,
                           const std::string& device) {
  SetType(AddNode(g, name, "Placeholder", {}, device), "dtype", t);
}
inline void AddAdd(GraphDef* g, const std::string& name, const std::string& a,
                   const std::string& b, const std::string& device) {
  SetType(AddNode(g, name, "Add", {a, b}, device), "T", DT_FLOAT);
}
inline void AddVar(GraphDef* g, const std::string& name,
                   const std::string& shared_name, const std::string& device,
                   const std::string& container = "") {
  NodeDef* n = AddNode(g, name, "VarHandleOp", {}, device);
  SetType(n, "dtype", DT_FLOAT);
  SetString(n, "shared_name", shared_name);
  SetString(n, "container", container);
}
// op: AssignVariableOp / AssignAddVariableOp.
inline void AddAssign(GraphDef* g, const std::string& name,
                      const std::string& op, const std::string& var,
                      const std::string& value, const std::string& device) {
  SetType(AddNode(g, name, op, {var, value}, device), "dtype", DT_FLOAT);
}
inline void AddRead(GraphDef* g, const std::string& name,
                    const std::string& var, const std::string& device) {
  SetType(AddNode(g, name, "ReadVariableOp", {var}, device), "dtype", DT_FLOAT);
}
inline void AddSend(GraphDef* g, const std::string& name,
                    const std::string& input, const std::string& tensor_name,
                    const std::string& send_device,
                    const std::string& recv_device, uint64_t incarnation) {
  NodeDef* n = AddNode(g, name, "Send", {input}, send_device);
  SetType(n, "T", DT_FLOAT);
  SetString(n, "tensor_name", tensor_name);
  SetString(n, "send_device", send_device);
  SetString(n, "recv_device", recv_device);
  SetInt(n, "send_device_incarnation", static_cast<int64_t>(incarnation));
}
inline void AddRecv(GraphDef* g, const std::string& name,
                    const std::string& tensor_name,
                    const std::string& send_device,
                    const std::string& recv_device, uint64_t incarnation) {
  NodeDef* n = AddNode(g, name, "Recv", {}, recv_device);
  SetType(n, "tensor_type", DT_FLOAT);
  SetString(n, "tensor_name", tensor_name);
  SetString(n, "send_device", send_device);
  SetString(n, "recv_device", recv_device);
  SetInt(n, "send_device_incarnation", static_cast<int64_t>(incarnation));
}

// One call in flight. `done` holds a reference, so the call's state lives
// until the worker answered even if the test gave up waiting.
template <typename Req, typename Resp>
struct PendingCall {
  Req request;
  Resp response;
  CallOptions opts;
  absl::Notification finished;
  absl::Status status;

  bool Wait(absl::Duration limit = absl::Seconds(30)) {
    return finished.WaitForNotificationWithTimeout(limit);
  }
  // The status, or a test failure status when no answer came in `limit`.
  absl::Status Result(absl::Duration limit = absl::Seconds(30)) {
    if (!Wait(limit)) {
      return absl::InternalError(
          absl::StrCat("test: no answer within ", absl::FormatDuration(limit)));
    }
    return status;
  }
};

#define COHORT_WORKER_TEST_START_(Name)                                   \
  using Name##Call = PendingCall<Name##Request, Name##Response>;          \
  inline std::shared_ptr<Name##Call> Start##Name(                         \
      WorkerInterface* w, Name##Request request,                          \
      absl::Time deadline = absl::InfiniteFuture()) {                     \
    auto call = std::make_shared<Name##Call>();                           \
    call->request = std::move(request);                                   \
    call->opts.set_deadline(deadline);                                    \
    w->Name##Async(&call->opts, &call->request, &call->response,          \
                   [call](const absl::Status& s) {                        \
                     call->status = s;                                    \
                     call->finished.Notify();                             \
                   });                                                    \
    return call;                                                          \
  }                                                                       \
  inline absl::Status Do##Name(WorkerInterface* w, Name##Request request, \
                               Name##Response* response = nullptr) {      \
    auto call = Start##Name(w, std::move(request));                       \
    absl::Status s = call->Result();                                      \
    if (response != nullptr && call->finished.HasBeenNotified()) {        \
      *response = call->response;                                         \
    }                                                                     \
    return s;                                                             \
  }
COHORT_WORKER_RPCS(COHORT_WORKER_TEST_START_)
#undef COHORT_WORKER_TEST_START_

// One in-process Worker for /job:worker/replica:0/task:0 on a 2-thread
// device with a fixed incarnation.
class WorkerFixture : public ::testing::Test {
 protected:
  static constexpr uint64_t kIncarnation = 0x1234abcd;
  const std::string kTask = Task("worker", 0);
  const std::string kDev = Dev(Task("worker", 0));

  WorkerFixture() : device_(kDev, 2, kIncarnation) {
    WorkerEnv env;
    env.task_name = kTask;
    env.device = &device_;
    worker_ = std::make_unique<Worker>(env);
  }

  absl::Status CreateSession(const std::string& handle, bool isolate = false,
                             const std::string& master_task = "",
                             uint64_t master_incarnation = 0) {
    CreateWorkerSessionRequest req;
    req.set_session_handle(handle);
    req.set_isolate_session_state(isolate);
    req.set_master_task(master_task);
    req.set_master_incarnation(master_incarnation);
    return DoCreateWorkerSession(worker_.get(), req);
  }

  absl::StatusOr<std::string> Register(
      const std::string& session, const GraphDef& graph,
      const std::vector<std::string>& feeds,
      const std::vector<std::string>& fetches,
      const std::vector<std::string>& targets = {}) {
    RegisterGraphRequest req;
    req.set_session_handle(session);
    *req.mutable_graph_def() = graph;
    for (const auto& f : feeds) req.add_feed(f);
    for (const auto& f : fetches) req.add_fetch(f);
    for (const auto& t : targets) req.add_target(t);
    RegisterGraphResponse resp;
    absl::Status s = DoRegisterGraph(worker_.get(), req, &resp);
    if (!s.ok()) return s;
    return resp.graph_handle();
  }

  static RunGraphRequest RunRequest(
      const std::string& session, const std::string& graph, int64_t step,
      const std::vector<std::pair<std::string, Tensor>>& feeds = {}) {
    RunGraphRequest req;
    req.set_session_handle(session);
    req.set_graph_handle(graph);
    req.set_step_id(step);
    for (const auto& [name, t] : feeds) {
      NamedTensorProto* f = req.add_send();
      f->set_name(name);
      t.AsProto(f->mutable_tensor());
    }
    return req;
  }

  // The partition "r = Recv(never)" whose tensor is never sent: its steps
  // wait until something ends them.
  GraphDef BlockedGraph() const {
    GraphDef g;
    AddRecv(&g, "r", "never", kDev, kDev, kIncarnation);
    return g;
  }

  Device device_;
  std::unique_ptr<Worker> worker_;
};

}  // namespace cohort::runtime::testing

#endif  // COHORT_RUNTIME_WORKER_TEST_UTIL_H_
