#include "cohort/training/monitored_session.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"

namespace cohort::training {
namespace {

// TensorFlow's log lines, word for word: operators search for them.
constexpr char kCreateErrorLog[] =
    "An error was raised while a session was being created. This may be due "
    "to a preemption of a connected worker or parameter server. A new "
    "session will be created. This error may also occur due to a gRPC "
    "failure caused by high memory or network bandwidth usage in the "
    "parameter servers. If this error occurs repeatedly, try increasing the "
    "number of parameter servers assigned to the job. Error: ";
constexpr char kRunErrorLog[] =
    "An error was raised. This may be due to a preemption in a connected "
    "worker or parameter server. The current session will be closed and a "
    "new session will be created. This error may also occur due to a gRPC "
    "failure caused by high memory or network bandwidth usage in the "
    "parameter servers. If this error occurs repeatedly, try increasing the "
    "number of parameter servers assigned to the job. Error: ";
constexpr char kStopCheckErrorLog[] =
    "An error was raised while considering whether the session is complete. "
    "This may be due to a preemption in a connected worker or parameter "
    "server. The current session will be closed and a new session will be "
    "created. This error may also occur due to a gRPC failure caused by high "
    "memory or network bandwidth usage in the parameter servers. If this "
    "error occurs repeatedly, try increasing the number of parameter servers "
    "assigned to the job. Error: ";
constexpr char kCloseErrorLog[] =
    "An error occurred when attempting to close the session. This may be due "
    "to a preemption in a connected worker or parameter server. Error: ";

// "x" and "x:0" feed the same tensor.
std::string CanonicalTensorName(const std::string& name) {
  return name.find(':') == std::string::npos ? absl::StrCat(name, ":0") : name;
}

std::string ConflictList(const std::vector<std::string>& names) {
  return absl::StrCat("['", absl::StrJoin(names, "', '"), "']");
}

}  // namespace

bool IsPreemptionError(const absl::Status& s) {
  return absl::IsAborted(s) || absl::IsUnavailable(s);
}

Session* StepContext::session() const { return owner_->session_.get(); }

absl::Status StepContext::RunWithHooks(
    const std::vector<std::pair<std::string, Tensor>>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, std::vector<Tensor>* outputs) {
  COHORT_RETURN_IF_ERROR(owner_->CheckRunnable());
  return owner_->RunHooked(RunOptions(), feeds, fetches, targets, outputs);
}

MonitoredSession::MonitoredSession(Scope graph,
                                   std::unique_ptr<SessionCreator> creator,
                                   HookList hooks,
                                   MonitoredSessionOptions options)
    : graph_(std::move(graph)),
      creator_(std::move(creator)),
      hooks_(std::move(hooks)),
      options_(options),
      env_(options.env != nullptr ? options.env : Env::Default()),
      backoff_(options.initial_backoff, options.max_backoff) {}

absl::StatusOr<std::unique_ptr<MonitoredSession>> MonitoredSession::Create(
    const Scope& graph, std::unique_ptr<SessionCreator> creator, HookList hooks,
    MonitoredSessionOptions options) {
  std::unique_ptr<MonitoredSession> m(new MonitoredSession(
      Scope::RootOf(graph), std::move(creator), std::move(hooks), options));
  Scope root = m->graph_;
  for (const auto& h : m->hooks_) COHORT_RETURN_IF_ERROR(h->Begin(&root));
  COHORT_RETURN_IF_ERROR(root.status());
  COHORT_RETURN_IF_ERROR(m->CreateSessionWithRecovery());
  return m;
}

MonitoredSession::~MonitoredSession() {
  if (!closed_ && session_ != nullptr) {
    if (coord_ != nullptr) coord_->RequestStop();
    absl::Status s = session_->Close();
    if (!s.ok()) COHORT_LOG(WARNING) << "closing the session: " << s;
  }
}

absl::Status MonitoredSession::CreateSessionOnce() {
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                          creator_->CreateSession(graph_));
  auto coord = std::make_unique<Coordinator>(env_);
  for (const auto& h : hooks_) {
    absl::Status s = h->AfterCreateSession(session.get(), coord.get());
    if (!s.ok()) {
      coord->RequestStop();
      absl::Status c = session->Close();
      if (!c.ok()) COHORT_LOG(INFO) << kCloseErrorLog << c;
      return s;
    }
  }
  session_ = std::move(session);
  coord_ = std::move(coord);
  return absl::OkStatus();
}

absl::Status MonitoredSession::CreateSessionWithRecovery() {
  while (true) {
    absl::Status s = CreateSessionOnce();
    if (s.ok()) return s;
    if (options_.should_recover && IsPreemptionError(s)) {
      COHORT_LOG(INFO) << kCreateErrorLog << s;
    }
    COHORT_RETURN_IF_ERROR(PrepareRecovery(s));
  }
}

void MonitoredSession::CloseSessionForRecovery() {
  // The coordinator's threads may use the session: they end first.
  if (coord_ != nullptr) {
    coord_->RequestStop();
    absl::Status j = coord_->Join(options_.stop_grace_period);
    if (absl::IsDeadlineExceeded(j)) COHORT_LOG(WARNING) << j;
  }
  if (session_ != nullptr) {
    absl::Status c = session_->Close();
    if (!c.ok()) COHORT_LOG(INFO) << kCloseErrorLog << c;
  }
  coord_.reset();
  session_.reset();
}

absl::Status MonitoredSession::PrepareRecovery(const absl::Status& error) {
  if (!options_.should_recover || !IsPreemptionError(error)) return error;
  CloseSessionForRecovery();
  // TF retries at once and forever (tensorflow#45088); a backoff lets a
  // restarting ps come back without a storm of sessions, and the limit
  // turns a cluster that never returns into an error.
  absl::Time now = env_->Now();
  if (!recovery_start_.has_value()) recovery_start_ = now;
  if (now + backoff_.current() - *recovery_start_ > options_.max_recovery) {
    COHORT_LOG(ERROR) << "giving up recovery after "
                      << absl::FormatDuration(now - *recovery_start_)
                      << " (max_recovery "
                      << absl::FormatDuration(options_.max_recovery)
                      << "); last error: " << error;
    recovery_start_.reset();
    backoff_.Reset();
    return error;
  }
  env_->SleepFor(backoff_.Next());
  return absl::OkStatus();
}

absl::Status MonitoredSession::CheckRunnable() const {
  if (closed_) {
    return absl::FailedPreconditionError("Session is already closed.");
  }
  if (stop_requested_ || (coord_ != nullptr && coord_->ShouldStop())) {
    return absl::FailedPreconditionError(
        "Run called even after should_stop requested.");
  }
  return absl::OkStatus();
}

absl::Status MonitoredSession::ExplainWithCoordinator(
    const absl::Status& s) const {
  if (s.ok() || IsPreemptionError(s) || coord_ == nullptr) return s;
  absl::Status recorded = coord_->RaiseRequestedException();
  return IsPreemptionError(recorded) ? recorded : s;
}

absl::Status MonitoredSession::Run(
    const RunOptions& options,
    const std::vector<std::pair<std::string, Tensor>>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, std::vector<Tensor>* outputs) {
  COHORT_RETURN_IF_ERROR(CheckRunnable());
  return WithRecovery(
      [&] { return RunHooked(options, feeds, fetches, targets, outputs); });
}

absl::Status MonitoredSession::RunStepFn(
    const std::function<absl::Status(StepContext*)>& fn) {
  COHORT_RETURN_IF_ERROR(CheckRunnable());
  return WithRecovery([&] {
    StepContext ctx(this);
    absl::Status s = fn(&ctx);
    if (ctx.stop_requested_) stop_requested_ = true;
    return s;
  });
}

absl::Status MonitoredSession::WithRecovery(
    const std::function<absl::Status()>& attempt) {
  while (true) {
    // CreateSessionWithRecovery has its own retries: its error is final.
    if (session_ == nullptr) {
      COHORT_RETURN_IF_ERROR(CreateSessionWithRecovery());
    }
    absl::Status s = ExplainWithCoordinator(attempt());
    if (s.ok()) {
      recovery_start_.reset();
      backoff_.Reset();
      return s;
    }
    if (options_.should_recover && IsPreemptionError(s)) {
      COHORT_LOG(INFO) << kRunErrorLog << s;
    }
    COHORT_RETURN_IF_ERROR(PrepareRecovery(s));
  }
}

absl::Status MonitoredSession::RunHooked(
    const RunOptions& options,
    const std::vector<std::pair<std::string, Tensor>>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, std::vector<Tensor>* outputs) {
  SessionRunContext ctx(SessionRunArgs{fetches, feeds, targets, options},
                        session_.get());
  std::vector<std::optional<SessionRunArgs>> hook_args;
  hook_args.reserve(hooks_.size());
  for (const auto& h : hooks_) {
    COHORT_ASSIGN_OR_RETURN(std::optional<SessionRunArgs> a,
                            h->BeforeRun(&ctx));
    hook_args.push_back(std::move(a));
  }

  // Merge: the caller's request first, then each hook's in hook order.
  std::vector<std::pair<std::string, Tensor>> all_feeds = feeds;
  std::vector<std::string> all_fetches = fetches;
  std::vector<std::string> all_targets = targets;
  RunOptions all_options = options;
  absl::flat_hash_map<std::string, int> hook_fed;  // tensor -> count
  std::vector<std::string> hook_conflicts;
  std::vector<size_t> fetch_start(hooks_.size());
  for (size_t i = 0; i < hooks_.size(); ++i) {
    fetch_start[i] = all_fetches.size();
    if (!hook_args[i].has_value()) continue;
    const SessionRunArgs& a = *hook_args[i];
    for (const auto& [name, value] : a.feeds) {
      std::string key = CanonicalTensorName(name);
      if (++hook_fed[key] == 2) hook_conflicts.push_back(key);
      all_feeds.emplace_back(name, value);
    }
    all_fetches.insert(all_fetches.end(), a.fetches.begin(), a.fetches.end());
    for (const auto& t : a.targets) {
      if (std::find(all_targets.begin(), all_targets.end(), t) ==
          all_targets.end()) {
        all_targets.push_back(t);
      }
    }
    all_options.timeout = std::max(all_options.timeout, a.options.timeout);
  }
  if (!hook_conflicts.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Same tensor is fed by two hooks. Conflict(s): ",
                     ConflictList(hook_conflicts)));
  }
  std::vector<std::string> user_conflicts;
  for (const auto& feed : feeds) {
    std::string key = CanonicalTensorName(feed.first);
    if (hook_fed.contains(key)) user_conflicts.push_back(key);
  }
  if (!user_conflicts.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Same tensor is fed by a SessionRunHook and user. Conflict(s): ",
        ConflictList(user_conflicts)));
  }

  std::vector<Tensor> results;
  COHORT_RETURN_IF_ERROR(session_->Run(all_options, all_feeds, all_fetches,
                                       all_targets, &results));
  for (size_t i = 0; i < hooks_.size(); ++i) {
    size_t end = i + 1 < hooks_.size() ? fetch_start[i + 1] : results.size();
    SessionRunValues values;
    values.results.assign(results.begin() + fetch_start[i],
                          results.begin() + end);
    values.options = all_options;
    COHORT_RETURN_IF_ERROR(hooks_[i]->AfterRun(&ctx, values));
  }
  if (ctx.stop_requested()) stop_requested_ = true;
  if (outputs != nullptr) {
    outputs->assign(results.begin(), results.begin() + fetches.size());
  }
  return absl::OkStatus();
}

bool MonitoredSession::ShouldStop() {
  if (closed_ || stop_requested_) return true;
  if (session_ == nullptr) return true;
  absl::Status recorded = coord_->RaiseRequestedException();
  if (!recorded.ok()) {
    if (!options_.should_recover || !IsPreemptionError(recorded)) return true;
    COHORT_LOG(INFO) << kStopCheckErrorLog << recorded;
    CloseSessionForRecovery();
    absl::Status s = CreateSessionWithRecovery();
    if (!s.ok()) {
      COHORT_LOG(ERROR) << "could not recreate the session: " << s;
      return true;
    }
    return false;
  }
  return coord_->ShouldStop();
}

absl::Status MonitoredSession::Close(const absl::Status& status) {
  if (closed_) {
    return absl::FailedPreconditionError("Session is already closed.");
  }
  closed_ = true;
  absl::Status end_status;
  if ((status.ok() || absl::IsOutOfRange(status)) && session_ != nullptr) {
    for (const auto& h : hooks_) {
      end_status = h->End(session_.get());
      if (!end_status.ok()) break;
    }
  }
  absl::Status close_status;
  if (coord_ != nullptr) {
    absl::Status j = coord_->Join(options_.stop_grace_period);
    if (absl::IsDeadlineExceeded(j)) COHORT_LOG(WARNING) << j;
  }
  if (session_ != nullptr) close_status = session_->Close();
  coord_.reset();  // Before the session its threads may still hold.
  session_.reset();
  return end_status.ok() ? close_status : end_status;
}

}  // namespace cohort::training
