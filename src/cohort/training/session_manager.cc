#include "cohort/training/session_manager.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"

namespace cohort::training {
namespace {

std::string MaybeName(const std::string& name) {
  return name.empty() ? "None" : name;
}

// Closes a session whose model could not be made ready; its error is of no
// interest to the caller, who reports why the model was not ready.
void SafeClose(Session* session) {
  absl::Status s = session->Close();
  if (!s.ok()) COHORT_LOG(INFO) << "error closing a session: " << s;
}

}  // namespace

SessionManager::SessionManager(GraphDef graph, SessionManagerOptions options)
    : graph_(std::move(graph)),
      options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : Env::Default()),
      factory_(options_.factory ? options_.factory
                                : DefaultSessionFactory(env_)) {}

absl::StatusOr<std::unique_ptr<Session>> SessionManager::NewSession(
    const std::string& master, const ConfigProto& config) {
  return factory_(master, graph_, config);
}

absl::StatusOr<std::pair<bool, std::string>> SessionManager::Ready(
    Session* session, const std::string& op) {
  if (op.empty()) return std::make_pair(true, std::string());
  std::vector<Tensor> out;
  absl::Status s = session->Run({}, {op}, {}, &out);
  if (!s.ok()) {
    // TF: a FailedPrecondition about an uninitialised variable means "not
    // ready"; anything else is a real error.
    if (absl::IsFailedPrecondition(s) &&
        absl::StrContains(s.message(), "uninitialized")) {
      return std::make_pair(false, std::string(s.message()));
    }
    COHORT_LOG(WARNING) << "Model not ready : error [" << s << "]";
    return s;
  }
  if (out.size() != 1 || out[0].dtype() != DT_STRING ||
      out[0].NumElements() == 0) {
    return std::make_pair(true, std::string());
  }
  std::vector<std::string> names;
  auto flat = out[0].flat<std::string>();
  for (int64_t i = 0; i < out[0].NumElements(); ++i) names.push_back(flat(i));
  return std::make_pair(false, absl::StrCat("Variables not initialized: ",
                                            absl::StrJoin(names, ", ")));
}

absl::StatusOr<std::pair<bool, std::string>> SessionManager::TryRunLocalInitOp(
    Session* session) {
  if (options_.local_init_op.empty()) {
    return std::make_pair(true, std::string());
  }
  COHORT_ASSIGN_OR_RETURN(auto ready,
                          Ready(session, options_.ready_for_local_init_op));
  if (!ready.first) return ready;
  COHORT_LOG(INFO) << "Running local_init_op.";
  COHORT_RETURN_IF_ERROR(
      session->Run({}, {}, {options_.local_init_op}, nullptr));
  COHORT_LOG(INFO) << "Done running local_init_op.";
  return std::make_pair(true, std::string());
}

absl::StatusOr<std::unique_ptr<Session>> SessionManager::PrepareSession(
    const std::string& master, const ConfigProto& config,
    const PrepareSessionOptions& options) {
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                          NewSession(master, config));
  auto prepare = [&]() -> absl::Status {
    // A chief re-creating its session after a preemption error finds the
    // model ready when the ps kept its variables: restoring would roll
    // every worker's progress back to the last checkpoint (TF does that).
    // An explicit checkpoint file is always restored.
    bool ready_already = false;
    if (!options_.ready_op.empty() &&
        options.checkpoint_filename_with_path.empty()) {
      COHORT_ASSIGN_OR_RETURN(auto ready,
                              Ready(session.get(), options_.ready_op));
      ready_already = ready.first;
    }
    if (ready_already) {
      COHORT_LOG(INFO) << "Model is already initialized (its variables "
                          "outlived the previous session); not restoring or "
                          "initializing";
      return TryRunLocalInitOp(session.get()).status();
    }
    std::string path = options.checkpoint_filename_with_path;
    if (path.empty() && !options.checkpoint_dir.empty()) {
      auto latest = Saver::LatestCheckpoint(options.checkpoint_dir);
      if (latest.ok()) {
        path = *latest;
      } else if (!absl::IsNotFound(latest.status())) {
        return latest.status();
      }
    }
    if (options.saver != nullptr && !path.empty()) {
      COHORT_RETURN_IF_ERROR(options.saver->Restore(session.get(), path));
    } else {
      if (options.init_op.empty() && !options.init_fn &&
          options_.local_init_op.empty()) {
        return absl::FailedPreconditionError(
            "Model is not initialized and no init_op or init_fn or "
            "local_init_op was given");
      }
      if (!options.init_op.empty()) {
        COHORT_RETURN_IF_ERROR(
            session->Run({}, {}, {options.init_op}, nullptr));
      }
      if (options.init_fn)
        COHORT_RETURN_IF_ERROR(options.init_fn(session.get()));
    }
    COHORT_ASSIGN_OR_RETURN(auto local, TryRunLocalInitOp(session.get()));
    COHORT_ASSIGN_OR_RETURN(auto ready,
                            Ready(session.get(), options_.ready_op));
    if (!ready.first) {
      return absl::FailedPreconditionError(
          absl::StrCat("Init operations did not make model ready.  Init op: ",
                       MaybeName(options.init_op),
                       ", init fn: ", options.init_fn ? "init_fn" : "None",
                       ", local_init_op: ", MaybeName(options_.local_init_op),
                       ", error: ", local.first ? ready.second : local.second));
    }
    return absl::OkStatus();
  };
  absl::Status s = prepare();
  if (!s.ok()) {
    SafeClose(session.get());
    return s;
  }
  return session;
}

absl::StatusOr<std::unique_ptr<Session>> SessionManager::WaitForSession(
    const std::string& master, const ConfigProto& config,
    absl::Duration max_wait) {
  const absl::Time deadline = max_wait == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : env_->Now() + max_wait;
  while (true) {
    COHORT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                            NewSession(master, config));
    std::string not_ready_local = "None";
    std::string not_ready = "None";
    auto attempt = [&]() -> absl::StatusOr<bool> {
      COHORT_ASSIGN_OR_RETURN(auto local, TryRunLocalInitOp(session.get()));
      if (!local.first) {
        not_ready_local = local.second;
        return false;
      }
      COHORT_ASSIGN_OR_RETURN(auto ready,
                              Ready(session.get(), options_.ready_op));
      if (!ready.first) not_ready = ready.second;
      return ready.first;
    };
    absl::StatusOr<bool> ready = attempt();
    if (ready.ok() && *ready) return session;
    SafeClose(session.get());
    if (!ready.ok()) return ready.status();
    if (deadline - env_->Now() - options_.recovery_wait <
        absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("Session was not ready after waiting ",
                       absl::ToInt64Seconds(max_wait), " secs."));
    }
    COHORT_LOG(INFO) << "Waiting for model to be ready.  "
                     << "Ready_for_local_init_op:  " << not_ready_local
                     << ", ready: " << not_ready;
    env_->SleepFor(options_.recovery_wait);
  }
}

}  // namespace cohort::training
