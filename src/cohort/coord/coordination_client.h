// CoordinationClient: how an agent (or a tool) talks to a coordination
// service, whatever the transport.
//
// Implementations: grpc_coordination_client.h (over the network) and
// local_coordination_client.h (in-process, for tests and for a task that
// hosts the service). Every method is asynchronous: it returns at once and
// calls `done` exactly once, from any thread, with the call's status; the
// response is filled before `done` runs and must stay alive until then.
//
// COHORT_COORDINATION_RPCS(X) lists every RPC once, as X(Name); the client
// interface, both implementations and the gRPC service are generated from
// it, so adding an RPC is one line here plus its handler.
//
// Thread safety: implementations are thread-safe.
#ifndef COHORT_COORD_COORDINATION_CLIENT_H_
#define COHORT_COORD_COORDINATION_CLIENT_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/coordination.pb.h"

#define COHORT_COORDINATION_RPCS(X) \
  X(RegisterTask)                   \
  X(Heartbeat)                      \
  X(ShutdownTask)                   \
  X(ResetTask)                      \
  X(ReportErrorToService)           \
  X(GetTaskState)                   \
  X(WatchJobState)                  \
  X(GetJobStatus)                   \
  X(InsertKeyValue)                 \
  X(GetKeyValue)                    \
  X(TryGetKeyValue)                 \
  X(IncrementKeyValue)              \
  X(CompareAndSwapKeyValue)         \
  X(GetKeyValueDir)                 \
  X(DeleteKeyValue)                 \
  X(WatchKeyValue)                  \
  X(Barrier)                        \
  X(CancelBarrier)                  \
  X(GetAliveTasks)                  \
  X(PollForError)

namespace cohort::coord {

// The environment variable that gives a task the target of its job's
// coordination service ("host:port", or "framed:host:port"); `cohort launch`
// sets it.
inline constexpr char kEnvCoordinationAddress[] =
    "COHORT_COORDINATION_SERVICE_ADDRESS";
// After how long without a heartbeat a task of the program counts as silent
// (an absl duration, "10s": the launcher's --heartbeat-timeout; at least
// 10 s under an engine); `cohort launch` sets it, so that an agent that
// heartbeats beats often enough.
inline constexpr char kEnvHeartbeatTimeout[] = "COHORT_HEARTBEAT_TIMEOUT";

using StatusCallback = std::function<void(absl::Status)>;

// Lets the caller abandon a call in flight. Thread-safe.
class CallCancellation {
 public:
  // Runs the transport's canceller (once). A call cancelled this way ends
  // with Cancelled, unless it finished first.
  void Cancel();
  // Called by the transport when the call starts; runs `canceller` at once
  // if Cancel() came first.
  void SetCanceller(std::function<void()> canceller);
  bool cancelled();

 private:
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> canceller_ ABSL_GUARDED_BY(mu_);
};

struct CallOptions {
  // Client-side deadline (InfiniteDuration: none). Blocking RPCs also carry
  // their own timeout in the request; make this a little longer so the
  // service's explicit answer, which names whom it waited for, arrives first.
  absl::Duration timeout = absl::InfiniteDuration();
  // Wait for the service to come up instead of failing fast (RegisterTask).
  bool wait_for_ready = false;
  CallCancellation* cancellation = nullptr;  // not owned; may be null
};

class CoordinationClient {
 public:
  virtual ~CoordinationClient() = default;

  // NameAsync: asynchronous, as described above. Name: the same call,
  // blocking the caller until it completes; the default waits for NameAsync,
  // transports may do better (the gRPC client drives the call on the
  // calling thread, saving two thread hops per call).
#define COHORT_COORD_CLIENT_METHOD_(Name)                     \
  virtual void Name##Async(                                   \
      const Name##Request& request, Name##Response* response, \
      const CallOptions& options, StatusCallback done) = 0;   \
  virtual absl::Status Name(const Name##Request& request,     \
                            Name##Response* response,         \
                            const CallOptions& options);
  COHORT_COORDINATION_RPCS(COHORT_COORD_CLIENT_METHOD_)
#undef COHORT_COORD_CLIENT_METHOD_
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_COORDINATION_CLIENT_H_
