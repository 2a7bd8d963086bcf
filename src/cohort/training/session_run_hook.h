// SessionRunHook: the extension point of MonitoredSession (TensorFlow's
// tf.train.SessionRunHook), and the small value types it exchanges.
//
// Lifecycle, driven by MonitoredSession (monitored_session.h):
//   Begin(graph)                      once per MonitoredSession, in hook order,
//                                     before the graph is turned into a
//                                     session; a hook may find or add nodes.
//   AfterCreateSession(session, coord) after every session creation,
//                                     recoveries included.
//   BeforeRun(ctx) -> args            before each Run, in order; the args'
//                                     fetches, feeds and targets join the
//                                     caller's (see MonitoredSession::Run).
//   AfterRun(ctx, values)             after each successful Run, in order;
//                                     `values.results` are exactly this
//                                     hook's own fetches.
//   End(session)                      once, on a clean Close.
// Every method defaults to a no-op returning OK. An error from any of them
// fails the call that invoked it (Aborted/Unavailable make a recoverable
// MonitoredSession recover; see there).
//
// Thread safety: hooks are called from the thread that drives the
// MonitoredSession, one call at a time. SessionRunContext is not
// synchronised.
#ifndef COHORT_TRAINING_SESSION_RUN_HOOK_H_
#define COHORT_TRAINING_SESSION_RUN_HOOK_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/session.h"
#include "cohort/graph/tensor.h"

namespace cohort::training {

class Coordinator;

// What a hook adds to a Run (or what the caller asked for, as
// SessionRunContext::original_args()).
struct SessionRunArgs {
  std::vector<std::string> fetches;  // "node:i"
  std::vector<std::pair<std::string, Tensor>> feeds;
  std::vector<std::string> targets;  // nodes run for their effects
  RunOptions options;
};

// What a hook gets back: the values of its own fetches, in its order.
struct SessionRunValues {
  std::vector<Tensor> results;
  RunOptions options;
};

class SessionRunContext {
 public:
  SessionRunContext(SessionRunArgs original_args, Session* session)
      : original_args_(std::move(original_args)), session_(session) {}

  // The caller's fetches and feeds (hooks' additions not included).
  const SessionRunArgs& original_args() const { return original_args_; }
  // The raw session: runs without hooks (hooks poll through it).
  Session* session() const { return session_; }
  // Makes MonitoredSession::ShouldStop() true once this Run's AfterRun
  // calls are done; the current Run still returns its results.
  void RequestStop() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_; }

 private:
  SessionRunArgs original_args_;
  Session* session_;
  bool stop_requested_ = false;
};

class SessionRunHook {
 public:
  virtual ~SessionRunHook() = default;

  // `graph` is a scope at the root of the graph under construction.
  virtual absl::Status Begin(Scope* graph) { return absl::OkStatus(); }
  virtual absl::Status AfterCreateSession(Session* session,
                                          Coordinator* coord) {
    return absl::OkStatus();
  }
  // nullopt (or empty args) = nothing to add.
  virtual absl::StatusOr<std::optional<SessionRunArgs>> BeforeRun(
      SessionRunContext* ctx) {
    return std::optional<SessionRunArgs>();
  }
  virtual absl::Status AfterRun(SessionRunContext* ctx,
                                const SessionRunValues& values) {
    return absl::OkStatus();
  }
  virtual absl::Status End(Session* session) { return absl::OkStatus(); }
};

using HookList = std::vector<std::shared_ptr<SessionRunHook>>;

}  // namespace cohort::training

#endif  // COHORT_TRAINING_SESSION_RUN_HOOK_H_
