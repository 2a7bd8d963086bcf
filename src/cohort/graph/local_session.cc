#include "cohort/graph/local_session.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/env.h"
#include "cohort/base/status.h"
#include "cohort/graph/standard_registries.h"

namespace cohort {

LocalSession::LocalSession(const SessionOptions& options)
    : options_(options),
      env_(options.env != nullptr ? options.env : Env::Default()),
      device_(std::make_unique<Device>(options.device_name, options.num_threads,
                                       /*incarnation=*/0, options.memory)) {
  if (options_.op_registry == nullptr)
    options_.op_registry = StandardOpRegistry();
  if (options_.kernels == nullptr) options_.kernels = StandardKernelRegistry();
}

LocalSession::~LocalSession() { (void)Close(); }

absl::StatusOr<std::unique_ptr<LocalSession>> LocalSession::Create(
    const GraphDef& graph, const SessionOptions& options) {
  std::unique_ptr<LocalSession> s(new LocalSession(options));
  COHORT_ASSIGN_OR_RETURN(auto g,
                          Graph::FromGraphDef(graph, s->options_.op_registry));
  absl::MutexLock lock(&s->graph_mu_);
  s->graph_ = std::move(g);
  return s;
}

absl::Status LocalSession::CheckOpen() const {
  if (closed_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError(
        "the session is closed; create a new session");
  }
  return absl::OkStatus();
}

absl::Status LocalSession::Extend(const GraphDef& graph) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  absl::MutexLock lock(&graph_mu_);
  return graph_->Extend(graph);
}

absl::Status LocalSession::GetGraphDef(GraphDef* out) {
  absl::ReaderMutexLock lock(&graph_mu_);
  graph_->ToGraphDef(out);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Executor>> LocalSession::BuildExecutor(
    const std::vector<std::string>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  Executor::Options eo;
  eo.device = device_.get();
  eo.kernels = options_.kernels;
  eo.env = env_;
  absl::ReaderMutexLock lock(&graph_mu_);
  return Executor::Create(*graph_, feeds, fetches, targets, eo);
}

absl::Status LocalSession::RunExecutor(Executor* executor,
                                       const RunOptions& options,
                                       const std::vector<Tensor>& feeds,
                                       std::vector<Tensor>* fetches) {
  Executor::RunArgs args;
  args.step_id = next_step_id_.fetch_add(1, std::memory_order_relaxed);
  args.feeds = feeds;
  args.cancellation = &cancellation_;
  absl::Duration timeout = options.timeout > absl::ZeroDuration()
                               ? options.timeout
                               : options_.default_timeout;
  if (timeout > absl::ZeroDuration()) args.deadline = env_->Now() + timeout;
  std::vector<Tensor> scratch;
  absl::Status s = executor->Run(args, fetches != nullptr ? fetches : &scratch);
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(
        absl::StrCat("run timed out after ", absl::FormatDuration(timeout),
                     ": ", s.message()));
  }
  if (absl::IsCancelled(s) && closed_.load()) {
    return absl::CancelledError(
        absl::StrCat("the session was closed: ", s.message()));
  }
  return s;
}

absl::Status LocalSession::Run(
    const RunOptions& options,
    const std::vector<std::pair<std::string, Tensor>>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, std::vector<Tensor>* outputs) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  std::vector<std::string> feed_names;
  std::vector<Tensor> feed_values;
  feed_names.reserve(feeds.size());
  feed_values.reserve(feeds.size());
  for (const auto& [name, value] : feeds) {
    feed_names.push_back(name);
    feed_values.push_back(value);
  }
  std::string key = absl::StrCat(absl::StrJoin(feed_names, ","), "|",
                                 absl::StrJoin(fetches, ","), "|",
                                 absl::StrJoin(targets, ","));
  std::shared_ptr<Callable> callable;
  {
    absl::MutexLock lock(&mu_);
    auto it = run_cache_.find(key);
    if (it != run_cache_.end()) callable = it->second;
  }
  if (callable == nullptr) {
    COHORT_ASSIGN_OR_RETURN(auto ex,
                            BuildExecutor(feed_names, fetches, targets));
    callable = std::make_shared<Callable>();
    callable->executor = std::move(ex);
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = run_cache_.emplace(key, callable);
    if (!inserted) callable = it->second;
  }
  return RunExecutor(callable->executor.get(), options, feed_values, outputs);
}

absl::StatusOr<LocalSession::CallableHandle> LocalSession::MakeCallable(
    const CallableOptions& options) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  COHORT_ASSIGN_OR_RETURN(
      auto ex, BuildExecutor(options.feeds, options.fetches, options.targets));
  auto callable = std::make_shared<Callable>();
  callable->executor = std::move(ex);
  callable->run_options = options.run_options;
  absl::MutexLock lock(&mu_);
  CallableHandle h = next_handle_++;
  callables_.emplace(h, std::move(callable));
  return h;
}

absl::Status LocalSession::RunCallable(CallableHandle handle,
                                       const std::vector<Tensor>& feeds,
                                       std::vector<Tensor>* fetches,
                                       const RunOptions* options) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  std::shared_ptr<Callable> callable;
  {
    absl::MutexLock lock(&mu_);
    auto it = callables_.find(handle);
    if (it == callables_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no callable with handle ", handle, " (released, or never made)"));
    }
    callable = it->second;
  }
  return RunExecutor(callable->executor.get(),
                     options != nullptr ? *options : callable->run_options,
                     feeds, fetches);
}

absl::Status LocalSession::ReleaseCallable(CallableHandle handle) {
  std::shared_ptr<Callable> doomed;  // Destroyed outside the lock.
  absl::MutexLock lock(&mu_);
  auto it = callables_.find(handle);
  if (it == callables_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no callable with handle ", handle));
  }
  doomed = std::move(it->second);
  callables_.erase(it);
  return absl::OkStatus();
}

absl::Status LocalSession::Close() {
  if (closed_.exchange(true)) return absl::OkStatus();
  cancellation_.StartCancel();
  return absl::OkStatus();
}

absl::Status LocalSession::Reset(const std::vector<std::string>& containers) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  ResourceMgr* rm = device_->resource_manager();
  if (containers.empty()) {
    rm->Clear();
  } else {
    for (const auto& c : containers) rm->Cleanup(c);
  }
  return absl::OkStatus();
}

}  // namespace cohort
