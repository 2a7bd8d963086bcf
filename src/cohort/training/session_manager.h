// SessionManager: opens sessions on a master and brings their model to a
// ready state (TensorFlow's tf.train.SessionManager).
//
// A model is "ready" when its ready_op (a 1-D string tensor of the names of
// uninitialised variables, e.g. Scaffold's default) evaluates to an empty
// tensor; an empty ready_op name means always ready.
//
// Thread safety: thread-safe (no mutable state); calls block on the session
// and, in WaitForSession, on the Env clock.
#ifndef COHORT_TRAINING_SESSION_MANAGER_H_
#define COHORT_TRAINING_SESSION_MANAGER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/config.pb.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/session.h"
#include "cohort/training/saver.h"
#include "cohort/training/session_factory.h"

namespace cohort {
class Env;
}

namespace cohort::training {

struct SessionManagerOptions {
  std::string ready_op;
  std::string ready_for_local_init_op;
  std::string local_init_op;
  // Sleep between WaitForSession attempts (TF: 30 s).
  absl::Duration recovery_wait = absl::Seconds(30);
  Env* env = nullptr;      // null = Env::Default()
  SessionFactory factory;  // null = DefaultSessionFactory(env)
};

struct PrepareSessionOptions {
  std::string init_op;
  std::function<absl::Status(Session*)> init_fn;
  std::shared_ptr<Saver> saver;
  // Restored from when it names a checkpoint (pointer file), unless
  // checkpoint_filename_with_path is given, which wins.
  std::string checkpoint_dir;
  std::string checkpoint_filename_with_path;
};

class SessionManager {
 public:
  SessionManager(GraphDef graph, SessionManagerOptions options);

  // Creates a session. When ready_op says the model is ready already (the
  // variables on the ps outlived a failed session), uses it as it is --
  // unlike TensorFlow, which restores and so rolls training back. Else
  // restores the latest checkpoint when `saver` and a
  // checkpoint are given (logging "Restoring parameters from <path>"),
  // else runs init_op then init_fn; then local_init_op when ready for it;
  // then checks ready_op. Errors:
  //  - the factory's and the session's (a failed restore included);
  //  - FailedPrecondition "Model is not initialized and no init_op or
  //    init_fn or local_init_op was given";
  //  - FailedPrecondition "Init operations did not make model ready.  Init
  //    op: <n>, init fn: <f>, local_init_op: <l>, error: <msg>".
  // The session is closed on error.
  absl::StatusOr<std::unique_ptr<Session>> PrepareSession(
      const std::string& master, const ConfigProto& config,
      const PrepareSessionOptions& options);

  // Creates sessions until one is ready (another task, the chief,
  // initialises the model), sleeping recovery_wait between attempts and
  // logging "Waiting for model to be ready.  Ready_for_local_init_op:  <m>,
  // ready: <m>". Errors: the factory's and the session's except
  // "uninitialized" FailedPreconditions of the ready checks;
  // DeadlineExceeded "Session was not ready after waiting <n> secs." when
  // the next attempt would end after `max_wait`.
  absl::StatusOr<std::unique_ptr<Session>> WaitForSession(
      const std::string& master, const ConfigProto& config,
      absl::Duration max_wait = absl::InfiniteDuration());

 private:
  // (ready, message): message is "Variables not initialized: a, b", the
  // error text of an "uninitialized" FailedPrecondition, or empty.
  absl::StatusOr<std::pair<bool, std::string>> Ready(Session* session,
                                                     const std::string& op);
  // Runs local_init_op when ready for it: (ran or none needed, message).
  absl::StatusOr<std::pair<bool, std::string>> TryRunLocalInitOp(
      Session* session);
  absl::StatusOr<std::unique_ptr<Session>> NewSession(
      const std::string& master, const ConfigProto& config);

  const GraphDef graph_;
  const SessionManagerOptions options_;
  Env* const env_;
  const SessionFactory factory_;
};

}  // namespace cohort::training

#endif  // COHORT_TRAINING_SESSION_MANAGER_H_
