// Fuzzes the worker's tensor decoding and its step handlers
// (src/cohort/runtime/worker_tensor_coding.h, worker.h): what a peer or a
// master sends in RunGraph and RecvTensor.
//
// Input: byte 0 picks how the rest is read; byte 1 holds flags.
//   0  TensorProto -> DecodeWireTensor, then an encode/decode round trip;
//   1  RecvTensorResponse -> its tensor decoded as a RemoteRendezvous does;
//   2  RunGraphRequest -> Worker::RunGraphAsync on a registered partition
//      (y = x + 2, x a float Placeholder); flag bit 0 puts the real session
//      and graph handles in, so the feeds reach the executor;
//   3  RecvTensorRequest -> Worker::RecvTensorAsync; flag bit 1 replaces the
//      key's source device and incarnation with the worker's own, so the
//      call waits in the step's rendezvous. CleanupGraph of the step then
//      ends any wait, so no input hangs.
//
// Checked: no crash; decode errors are InvalidArgument or ResourceExhausted
// and a decoded tensor survives a round trip; every handler answers exactly
// once with a code its contract lists.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/logging.h"
#include "cohort/graph/device.h"
#include "cohort/graph/rendezvous.h"
#include "cohort/runtime/worker.h"
#include "cohort/runtime/worker_tensor_coding.h"
#include "cohort/worker.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "tensor_known_bugs.h"

namespace {

using cohort::runtime::Worker;

constexpr char kTask[] = "/job:worker/replica:0/task:0";
constexpr char kDevice[] = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr uint64_t kIncarnation = 0x5eed;

struct State {
  std::unique_ptr<cohort::Device> device;
  std::unique_ptr<Worker> worker;
  std::string graph_handle;
};

State& Global() {
  static State* const state = new State;
  return *state;
}

bool CodeIs(const absl::Status& s, std::initializer_list<absl::StatusCode> ok) {
  for (absl::StatusCode c : ok) {
    if (s.code() == c) return true;
  }
  return false;
}

// Waits for a worker call's single answer (no call here can wait forever:
// the partition has no Recv, and RecvTensor waits are cleaned up).
template <typename Call>
absl::Status Await(Call call) {
  absl::Notification done;
  absl::Status result;
  int answers = 0;
  call([&](const absl::Status& s) {
    ++answers;
    result = s;
    done.Notify();
  });
  done.WaitForNotification();
  COHORT_CHECK(answers == 1) << answers << " answers";
  return result;
}

void CheckDecode(const cohort::TensorProto& proto) {
  // A legal broadcast may declare up to 1 GiB from a few bytes; allocating
  // that for every input would only slow the fuzzer down.
  if (cohort::fuzz::TensorDeclaresTooMuch(proto)) return;
  auto t = cohort::runtime::DecodeWireTensor(proto, "fuzz");
  if (!t.ok()) {
    COHORT_CHECK(CodeIs(t.status(), {absl::StatusCode::kInvalidArgument,
                                     absl::StatusCode::kResourceExhausted}))
        << t.status();
    return;
  }
  cohort::TensorProto again;
  COHORT_CHECK(cohort::runtime::EncodeWireTensor(*t, "fuzz", &again).ok());
  auto back = cohort::runtime::DecodeWireTensor(again, "fuzz");
  COHORT_CHECK(back.ok()) << back.status();
  COHORT_CHECK(back->Equals(*t)) << "round trip changed " << t->DebugString();
}

void Cleanup(int64_t step) {
  cohort::CleanupGraphRequest req;
  req.set_step_id(step);
  cohort::CleanupGraphResponse resp;
  absl::Status s = Await([&](auto done) {
    Global().worker->CleanupGraphAsync(nullptr, &req, &resp, done);
  });
  COHORT_CHECK(s.ok()) << s;
}

void RunGraph(cohort::RunGraphRequest req, bool real_handles) {
  for (const auto& send : req.send()) {
    if (cohort::fuzz::TensorDeclaresTooMuch(send.tensor())) return;
  }
  if (real_handles) {
    req.set_session_handle("s");
    req.set_graph_handle(Global().graph_handle);
  }
  // Keep the handler's own deadline short; a deadline is a legal outcome.
  if (req.timeout_in_ms() > 1000 || req.timeout_in_ms() < 0) {
    req.set_timeout_in_ms(1000);
  }
  cohort::RunGraphResponse resp;
  absl::Status s = Await([&](auto done) {
    Global().worker->RunGraphAsync(nullptr, &req, &resp, done);
  });
  COHORT_CHECK(CodeIs(
      s, {absl::StatusCode::kOk, absl::StatusCode::kInvalidArgument,
          absl::StatusCode::kAborted, absl::StatusCode::kResourceExhausted,
          absl::StatusCode::kDeadlineExceeded}))
      << s;
  if (s.ok()) COHORT_CHECK(resp.recv_size() == 1);
  Cleanup(req.step_id());
}

void RecvTensor(cohort::RecvTensorRequest req, bool local_key) {
  if (local_key) {
    auto parsed = cohort::Rendezvous::ParseKey(req.rendezvous_key());
    const std::string name = parsed.ok() ? parsed->edge_name : "t";
    req.set_rendezvous_key(
        cohort::Rendezvous::CreateKey(kDevice, kIncarnation, kDevice, name));
  }
  cohort::RecvTensorResponse resp;
  absl::Notification done;
  absl::Status status;
  Global().worker->RecvTensorAsync(nullptr, &req, &resp,
                                   [&](const absl::Status& s) {
                                     status = s;
                                     done.Notify();
                                   });
  // Ends a wait in the step's rendezvous (Aborted "Cleanup <id>").
  Cleanup(req.step_id());
  done.WaitForNotification();
  COHORT_CHECK(CodeIs(
      status, {absl::StatusCode::kInvalidArgument, absl::StatusCode::kAborted}))
      << status;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  cohort::SetMinLogLevel(cohort::LogLevel::kError);
  google::protobuf::SetLogHandler(nullptr);
  State& g = Global();
  g.device = std::make_unique<cohort::Device>(kDevice, 2, kIncarnation);
  cohort::runtime::WorkerEnv env;
  env.task_name = kTask;
  env.device = g.device.get();
  g.worker = std::make_unique<Worker>(env);

  cohort::CreateWorkerSessionRequest create;
  create.set_session_handle("s");
  cohort::CreateWorkerSessionResponse created;
  COHORT_CHECK(Await([&](auto done) {
                 g.worker->CreateWorkerSessionAsync(nullptr, &create, &created,
                                                    done);
               }).ok());
  cohort::RegisterGraphRequest reg;
  reg.set_session_handle("s");
  auto* x = reg.mutable_graph_def()->add_node();
  x->set_name("x");
  x->set_op("Placeholder");
  x->set_device(kDevice);
  (*x->mutable_attr())["dtype"].set_type(cohort::DT_FLOAT);
  auto* c = reg.mutable_graph_def()->add_node();
  c->set_name("c");
  c->set_op("Const");
  c->set_device(kDevice);
  (*c->mutable_attr())["dtype"].set_type(cohort::DT_FLOAT);
  cohort::Tensor(2.0f).AsProto((*c->mutable_attr())["value"].mutable_tensor());
  auto* y = reg.mutable_graph_def()->add_node();
  y->set_name("y");
  y->set_op("Add");
  y->set_device(kDevice);
  y->add_input("x");
  y->add_input("c");
  (*y->mutable_attr())["T"].set_type(cohort::DT_FLOAT);
  reg.add_feed("x");
  reg.add_fetch("y:0");
  cohort::RegisterGraphResponse registered;
  absl::Status s = Await([&](auto done) {
    g.worker->RegisterGraphAsync(nullptr, &reg, &registered, done);
  });
  COHORT_CHECK(s.ok()) << s;
  g.graph_handle = registered.graph_handle();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int mode = data[0] % 4;
  const uint8_t flags = data[1];
  data += 2;
  size -= 2;
  const int n = static_cast<int>(size);
  switch (mode) {
    case 0: {
      cohort::TensorProto proto;
      if (proto.ParseFromArray(data, n)) CheckDecode(proto);
      break;
    }
    case 1: {
      cohort::RecvTensorResponse resp;
      if (resp.ParseFromArray(data, n)) CheckDecode(resp.tensor());
      break;
    }
    case 2: {
      cohort::RunGraphRequest req;
      if (req.ParseFromArray(data, n)) RunGraph(std::move(req), flags & 1);
      break;
    }
    default: {
      cohort::RecvTensorRequest req;
      if (req.ParseFromArray(data, n)) RecvTensor(std::move(req), flags & 2);
      break;
    }
  }
  return 0;
}
