#include "cohort/runtime/local_master.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::runtime {
namespace {

absl::Mutex registry_mu(absl::kConstInit);
// By target. A process holds a handful of servers at most.
std::map<std::string, std::shared_ptr<LocalMaster>>& Registry()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* registry =
      new std::map<std::string, std::shared_ptr<LocalMaster>>();
  return *registry;
}

}  // namespace

std::shared_ptr<LocalMaster> LocalMaster::Register(const std::string& target,
                                                   Master* master,
                                                   std::string job_token) {
  auto local =
      std::make_shared<LocalMaster>(target, master, std::move(job_token));
  absl::MutexLock lock(&registry_mu);
  Registry()[target] = local;
  return local;
}

std::shared_ptr<LocalMaster> LocalMaster::Find(const std::string& target,
                                               const std::string& job_token) {
  absl::MutexLock lock(&registry_mu);
  auto it = Registry().find(target);
  if (it == Registry().end() || it->second->job_token_ != job_token) {
    return nullptr;
  }
  return it->second;
}

void LocalMaster::Detach() {
  {
    absl::MutexLock lock(&registry_mu);
    auto it = Registry().find(target_);
    if (it != Registry().end() && it->second.get() == this) {
      Registry().erase(it);
    }
  }
  std::set<CallOptions*> calls;
  {
    absl::MutexLock lock(&mu_);
    master_ = nullptr;
    cancelling_ = true;
    calls = in_flight_;
  }
  // Outside mu_ (a cancel callback may do anything but wait for its own
  // call); no call leaves, and so no caller frees its options, meanwhile.
  for (CallOptions* opts : calls) opts->StartCancel();
  absl::MutexLock lock(&mu_);
  cancelling_ = false;
  mu_.Await(absl::Condition(
      +[](std::set<CallOptions*>* in_flight) { return in_flight->empty(); },
      &in_flight_));
}

Master* LocalMaster::Enter(CallOptions* opts) {
  absl::MutexLock lock(&mu_);
  if (master_ != nullptr) in_flight_.insert(opts);
  return master_;
}

void LocalMaster::Leave(CallOptions* opts) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* cancelling) { return !*cancelling; }, &cancelling_));
  in_flight_.erase(opts);
}

absl::Status LocalMaster::Detached() const {
  return absl::UnavailableError(absl::StrCat("the master at ", target_,
                                             " (in this process) has stopped"));
}

}  // namespace cohort::runtime
