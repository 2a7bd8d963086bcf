// Fuzzes the coordination service through its transport-independent RPC
// handler (coordination_rpc_handler.h), which both the gRPC service and the
// local client call with a request proto parsed from a peer's bytes.
//
// Input:
//   byte 0  the RPC, an index into COHORT_COORDINATION_RPCS (mod 20);
//   byte 1  the service's options and the state it is in before the call:
//           bit 0 register_with_barrier; bit 1 a 5 s shutdown barrier;
//           bit 2 job "ps" recoverable; bit 3 allow_new_incarnation_to_
//           reconnect; bit 4 worker:0..2 and ps:0 registered (incarnations
//           1, 2, 3 and 9); bit 5 keys "a", "dir/x", "dir/y/z" and the
//           counter "n" set; bit 6 calls parked (worker:1 at barrier "b"
//           with a 5 s timeout, worker:0 in PollForError, a get of "later"
//           and a job-state watch, both with a 5 s deadline); bit 7 worker:2
//           reported an error;
//   byte 2  how far the fake clock moves after the call (low 2 bits: not,
//           6 s, 11 s or 2 h, which fires parked deadlines and heartbeat
//           timeouts);
//   rest    the request, parsed as that RPC's request proto.
// A fresh service (job {"worker": 4, "ps": 1}, FakeEnv) serves each input,
// so inputs are reproducible alone and memory stays bounded. (That costs
// speed: under ASan, starting and joining the service's timer thread
// dominates, about 1 ms per input.) Every call completes: a parked one is
// answered by its deadline (the harness moves the clock and waits until the
// service's timer thread has fired all that fell due) or by Stop(), which
// must fail every parked call.
//
// Checked: no crash, no hang, no leak; every callback of the handler runs
// exactly once (by the time the service is destroyed), and every non-OK
// status it passes carries the service-error payload (IsServiceError), as
// the handler's header promises.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/logging.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/coord/coordination_rpc_handler.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coordination.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "settling_env.h"

namespace {

using cohort::coord::CoordinationRpcHandler;
using cohort::coord::CoordinationService;
using cohort::coord::CoordinationServiceOptions;
using cohort::coord::StatusCallback;
using cohort::fuzz::SettlingEnv;

// One call through the handler: its response and what `done` reported.
struct Call {
  explicit Call(std::string what) : what(std::move(what)) {}

  StatusCallback Done() {
    return [this](absl::Status status) {
      absl::MutexLock lock(&mu);
      ++calls;
      last = std::move(status);
    };
  }
  void CheckFinished() {
    absl::MutexLock lock(&mu);
    COHORT_CHECK(calls == 1) << what << ": done ran " << calls << " times";
    COHORT_CHECK(last.ok() || cohort::coord::IsServiceError(last))
        << what << ": status without the service-error payload: " << last;
  }

  const std::string what;
  std::unique_ptr<google::protobuf::Message> response;
  absl::Mutex mu;
  int calls ABSL_GUARDED_BY(mu) = 0;
  absl::Status last ABSL_GUARDED_BY(mu);
};

// Calls `Method` of the handler with `request`; `response` lives in `call`.
template <typename Request, typename Response,
          void (CoordinationRpcHandler::*Method)(const Request&, Response*,
                                                 StatusCallback)>
void Invoke(CoordinationRpcHandler& handler, const Request& request,
            Call& call) {
  auto response = std::make_unique<Response>();
  Response* out = response.get();
  call.response = std::move(response);
  (handler.*Method)(request, out, call.Done());
}

// Parses `bytes` as the request of `Method` and calls it.
template <typename Request, typename Response,
          void (CoordinationRpcHandler::*Method)(const Request&, Response*,
                                                 StatusCallback)>
bool ParseAndInvoke(CoordinationRpcHandler& handler, absl::string_view bytes,
                    Call& call) {
  Request request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return false;
  }
  Invoke<Request, Response, Method>(handler, request, call);
  return true;
}

struct Rpc {
  const char* name;
  bool (*invoke)(CoordinationRpcHandler&, absl::string_view, Call&);
};

#define COHORT_FUZZ_RPC_(Name)                              \
  Rpc{#Name, &ParseAndInvoke<cohort::coord::Name##Request,  \
                             cohort::coord::Name##Response, \
                             &CoordinationRpcHandler::Name>},
constexpr Rpc kRpcs[] = {COHORT_COORDINATION_RPCS(COHORT_FUZZ_RPC_)};
#undef COHORT_FUZZ_RPC_
constexpr size_t kNumRpcs = sizeof(kRpcs) / sizeof(kRpcs[0]);

cohort::coord::CoordinatedTask Task(const char* job, int index) {
  cohort::coord::CoordinatedTask task;
  task.set_job_name(job);
  task.set_task_id(index);
  return task;
}

// Puts the fresh service in the state `flags` asks for, through the
// handler like any client.
void Prelude(uint8_t flags, CoordinationRpcHandler& handler,
             std::deque<Call>& calls) {
  namespace c = cohort::coord;
  if (flags & 16) {
    const std::pair<const char*, int> tasks[] = {
        {"worker", 0}, {"worker", 1}, {"worker", 2}, {"ps", 0}};
    for (const auto& [job, index] : tasks) {
      c::RegisterTaskRequest r;
      *r.mutable_source_task() = Task(job, index);
      r.set_incarnation(job[0] == 'p' ? 9 : index + 1);
      Invoke<c::RegisterTaskRequest, c::RegisterTaskResponse,
             &CoordinationRpcHandler::RegisterTask>(
          handler, r, calls.emplace_back("prelude RegisterTask"));
    }
  }
  if (flags & 32) {
    for (const char* key : {"a", "dir/x", "dir/y/z"}) {
      c::InsertKeyValueRequest r;
      r.mutable_kv()->set_key(key);
      r.mutable_kv()->set_value(key);
      Invoke<c::InsertKeyValueRequest, c::InsertKeyValueResponse,
             &CoordinationRpcHandler::InsertKeyValue>(
          handler, r, calls.emplace_back("prelude InsertKeyValue"));
    }
    c::IncrementKeyValueRequest r;
    r.set_key("n");
    r.set_increment(5);
    Invoke<c::IncrementKeyValueRequest, c::IncrementKeyValueResponse,
           &CoordinationRpcHandler::IncrementKeyValue>(
        handler, r, calls.emplace_back("prelude IncrementKeyValue"));
  }
  if (flags & 64) {
    c::BarrierRequest barrier;
    barrier.set_barrier_id("b");
    barrier.set_timeout_ms(5000);
    *barrier.mutable_source_task() = Task("worker", 1);
    Invoke<c::BarrierRequest, c::BarrierResponse,
           &CoordinationRpcHandler::Barrier>(
        handler, barrier, calls.emplace_back("prelude Barrier"));
    c::PollForErrorRequest poll;
    *poll.mutable_source_task() = Task("worker", 0);
    poll.set_incarnation(1);
    Invoke<c::PollForErrorRequest, c::PollForErrorResponse,
           &CoordinationRpcHandler::PollForError>(
        handler, poll, calls.emplace_back("prelude PollForError"));
    c::GetKeyValueRequest get;
    get.set_key("later");
    get.set_timeout_ms(5000);
    Invoke<c::GetKeyValueRequest, c::GetKeyValueResponse,
           &CoordinationRpcHandler::GetKeyValue>(
        handler, get, calls.emplace_back("prelude GetKeyValue"));
    Call& status = calls.emplace_back("prelude GetJobStatus");
    Invoke<c::GetJobStatusRequest, c::GetJobStatusResponse,
           &CoordinationRpcHandler::GetJobStatus>(
        handler, c::GetJobStatusRequest(), status);
    c::WatchJobStateRequest watch;
    watch.set_version_number(
        static_cast<c::GetJobStatusResponse*>(status.response.get())
            ->version_number());
    watch.set_timeout_ms(5000);
    Invoke<c::WatchJobStateRequest, c::WatchJobStateResponse,
           &CoordinationRpcHandler::WatchJobState>(
        handler, watch, calls.emplace_back("prelude WatchJobState"));
  }
  if (flags & 128) {
    c::ReportErrorToServiceRequest r;
    *r.mutable_source_task() = Task("worker", 2);
    r.set_error_code(static_cast<int>(absl::StatusCode::kInternal));
    r.set_error_message("prelude failure");
    Invoke<c::ReportErrorToServiceRequest, c::ReportErrorToServiceResponse,
           &CoordinationRpcHandler::ReportErrorToService>(
        handler, r, calls.emplace_back("prelude ReportErrorToService"));
  }
}

// Keeps stderr for libFuzzer's own output: the code under test logs every
// refused request, and protobuf every string field that is not UTF-8.
void Quiet() {
  cohort::SetMinLogLevel(cohort::LogLevel::kError);
  google::protobuf::SetLogHandler(nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  Quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const Rpc& rpc = kRpcs[data[0] % kNumRpcs];
  const uint8_t state = data[1];
  const absl::Duration advance[] = {absl::ZeroDuration(), absl::Seconds(6),
                                    absl::Seconds(11), absl::Hours(2)};
  const absl::Duration step = advance[data[2] & 3];
  const absl::string_view request(reinterpret_cast<const char*>(data) + 3,
                                  size - 3);

  SettlingEnv env;
  CoordinationServiceOptions options;
  options.jobs = {{"worker", 4}, {"ps", 1}};
  options.env = &env;
  options.register_with_barrier = state & 1;
  options.cluster_register_timeout = absl::Seconds(5);
  if (state & 2) options.shutdown_barrier_timeout = absl::Seconds(5);
  if (state & 4) options.recoverable_jobs = {"ps"};
  options.allow_new_incarnation_to_reconnect = state & 8;
  auto service = CoordinationService::Create(options);
  COHORT_CHECK(service.ok()) << service.status();
  std::deque<Call> calls;  // stable addresses: the callbacks point here
  {
    CoordinationRpcHandler handler(service->get());
    Prelude(state, handler, calls);
    Call& call = calls.emplace_back(rpc.name);
    if (!rpc.invoke(handler, request, call)) {
      calls.pop_back();  // not a request of this RPC: nothing was called
    } else if (step > absl::ZeroDuration()) {
      // Deadlines fire on the service's timer thread.
      env.AdvanceAndSettle(step);
    }
    // Answers every parked call; later calls are refused.
    (*service)->Stop();
    // Joins the timer thread, so no callback runs after this.
    service->reset();
  }
  for (Call& call : calls) call.CheckFinished();
  return 0;
}
