#include "cohort/graph/resource_mgr.h"

#include <algorithm>

namespace cohort {

std::string Var::DebugString() const {
  absl::ReaderMutexLock lock(&mu_);
  return absl::StrCat("Var(", DataTypeName(dtype_), ", ",
                      is_initialized_ ? tensor_.shape().DebugString()
                                      : std::string("uninitialized"),
                      ")");
}

void Var::PrepareForUpdate() {
  if (tensor_.IsInitialized() && !tensor_.RefCountIsOne()) {
    tensor_ = tensor_.DeepCopy();
  }
}

absl::Status ResourceMgr::Create(absl::string_view container,
                                 absl::string_view name,
                                 std::shared_ptr<ResourceBase> resource) {
  absl::MutexLock lock(&mu_);
  auto& c = containers_[Container(container)];
  if (!c.emplace(std::string(name), std::move(resource)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("resource '", name, "' already exists in container '",
                     Container(container), "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ResourceBase>> ResourceMgr::LookupBase(
    absl::string_view container, absl::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  std::string cname = Container(container);
  auto cit = containers_.find(cname);
  if (cit != containers_.end()) {
    auto it = cit->second.find(name);
    if (it != cit->second.end()) return it->second;
  }
  return absl::NotFoundError(absl::StrCat(
      "resource '", name, "' does not exist in container '", cname,
      "'; was it created (e.g. the variable's VarHandleOp and initializer "
      "run) on this device, and not cleared by Reset?"));
}

absl::Status ResourceMgr::Delete(absl::string_view container,
                                 absl::string_view name) {
  std::shared_ptr<ResourceBase> doomed;  // Destroyed outside the lock.
  absl::MutexLock lock(&mu_);
  std::string cname = Container(container);
  auto cit = containers_.find(cname);
  if (cit != containers_.end()) {
    auto it = cit->second.find(name);
    if (it != cit->second.end()) {
      doomed = std::move(it->second);
      cit->second.erase(it);
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(absl::StrCat("cannot delete resource '", name,
                                          "': not in container '", cname, "'"));
}

void ResourceMgr::Cleanup(absl::string_view container) {
  absl::flat_hash_map<std::string, std::shared_ptr<ResourceBase>> doomed;
  absl::MutexLock lock(&mu_);
  auto it = containers_.find(Container(container));
  if (it == containers_.end()) return;
  doomed = std::move(it->second);
  containers_.erase(it);
}

void ResourceMgr::Clear() {
  decltype(containers_) doomed;
  absl::MutexLock lock(&mu_);
  doomed.swap(containers_);
}

std::vector<std::tuple<std::string, std::string, std::string>>
ResourceMgr::List() const {
  std::vector<std::tuple<std::string, std::string, std::string>> out;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [cname, c] : containers_) {
      for (const auto& [name, r] : c)
        out.emplace_back(cname, name, r->TypeName());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cohort
