// Session creators: how MonitoredSession gets a ready session, on creation
// and on every recovery (TensorFlow's ChiefSessionCreator and
// WorkerSessionCreator).
//
//   ChiefSessionCreator   finalizes the scaffold into the graph, then
//                         SessionManager::PrepareSession: restores the
//                         latest checkpoint of checkpoint_dir, else runs
//                         init_op / init_fn; checks readiness.
//   WorkerSessionCreator  finalizes the scaffold, then
//                         SessionManager::WaitForSession: waits (up to
//                         max_wait, polling every recovery_wait on the Env
//                         clock) until the chief has made the model ready.
//
// Thread safety: a creator is used by one MonitoredSession at a time;
// CreateSession builds into the graph (the scaffold's defaults, once).
#ifndef COHORT_TRAINING_SESSION_CREATOR_H_
#define COHORT_TRAINING_SESSION_CREATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/config.pb.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/session.h"
#include "cohort/training/scaffold.h"
#include "cohort/training/session_factory.h"

namespace cohort {
class Env;
}

namespace cohort::training {

class SessionCreator {
 public:
  virtual ~SessionCreator() = default;
  // A new session for `graph`'s graph, ready to train. Errors: see each
  // creator; Aborted/Unavailable make MonitoredSession try again.
  virtual absl::StatusOr<std::unique_ptr<Session>> CreateSession(
      const Scope& graph) = 0;
};

struct SessionCreatorOptions {
  std::string master;  // "", "local" or "grpc://host:port"
  ConfigProto config;
  Env* env = nullptr;      // null = Env::Default()
  SessionFactory factory;  // null = DefaultSessionFactory(env)
  // WaitForSession's sleep between attempts (TF 30 s).
  absl::Duration recovery_wait = absl::Seconds(30);
};

class ChiefSessionCreator : public SessionCreator {
 public:
  // `scaffold` null = a default Scaffold.
  ChiefSessionCreator(std::shared_ptr<Scaffold> scaffold,
                      SessionCreatorOptions options,
                      std::string checkpoint_dir = "",
                      std::string checkpoint_filename_with_path = "");
  // Errors: SessionManager::PrepareSession's and the graph's.
  absl::StatusOr<std::unique_ptr<Session>> CreateSession(
      const Scope& graph) override;
  const std::shared_ptr<Scaffold>& scaffold() const { return scaffold_; }

 private:
  const std::shared_ptr<Scaffold> scaffold_;
  const SessionCreatorOptions options_;
  const std::string checkpoint_dir_;
  const std::string checkpoint_filename_with_path_;
};

class WorkerSessionCreator : public SessionCreator {
 public:
  WorkerSessionCreator(std::shared_ptr<Scaffold> scaffold,
                       SessionCreatorOptions options,
                       absl::Duration max_wait = absl::Minutes(30));
  // Errors: SessionManager::WaitForSession's (DeadlineExceeded after
  // max_wait) and the graph's.
  absl::StatusOr<std::unique_ptr<Session>> CreateSession(
      const Scope& graph) override;
  const std::shared_ptr<Scaffold>& scaffold() const { return scaffold_; }

 private:
  const std::shared_ptr<Scaffold> scaffold_;
  const SessionCreatorOptions options_;
  const absl::Duration max_wait_;
};

}  // namespace cohort::training

#endif  // COHORT_TRAINING_SESSION_CREATOR_H_
