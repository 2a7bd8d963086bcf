// Resources that outlive a step (variables, and later queues or iterators),
// held per device in a ResourceMgr, grouped in named containers.
//
// Contract:
//  - A resource is named by (container, name); the empty container means the
//    manager's default container. A ResourceHandle (types.h) carries the
//    device, container, name and type name; VarHandleOp produces one.
//  - Resources are shared_ptr-owned: a kernel that looked one up keeps it
//    alive even if Cleanup()/Clear() removes it from the manager meanwhile.
//  - Var: a variable's value. Readers take a *snapshot*: lock mu() shared and
//    copy the Tensor (sharing its buffer). Writers lock mu() exclusively;
//    to update elements in place (AssignAdd, Apply*) they first call
//    PrepareForUpdate(), which copies the buffer when a reader still shares
//    it, so snapshots never change under a reader.
//
// Errors: NotFound (no such resource: "variable 'w' in container 'c' does
// not exist"), AlreadyExists (Create of an existing name), InvalidArgument
// (a resource of another type).
//
// Thread safety: ResourceMgr is thread-safe; calls block only on its own
// short lock. LookupOrCreate runs its creator under that lock, so the
// creator must be quick and must not call back into the manager. Resources
// are destroyed outside the lock. Var is thread-safe through mu().
#ifndef COHORT_GRAPH_RESOURCE_MGR_H_
#define COHORT_GRAPH_RESOURCE_MGR_H_

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "cohort/graph/tensor.h"
#include "cohort/graph/types.h"

namespace cohort {

class ResourceBase {
 public:
  virtual ~ResourceBase() = default;
  // The resource's type, e.g. "Var".
  virtual std::string TypeName() const = 0;
  virtual std::string DebugString() const = 0;
};

class Var : public ResourceBase {
 public:
  // `shape` is the declared shape (values assigned must be compatible);
  // `name` is used in error messages.
  explicit Var(DataType dtype, PartialTensorShape shape = PartialTensorShape(),
               std::string name = "")
      : dtype_(dtype), shape_(std::move(shape)), name_(std::move(name)) {}
  static constexpr const char* kTypeName = "Var";
  std::string TypeName() const override { return kTypeName; }
  std::string DebugString() const override;

  DataType dtype() const { return dtype_; }
  const PartialTensorShape& declared_shape() const { return shape_; }
  const std::string& name() const { return name_; }
  absl::Mutex* mu() ABSL_LOCK_RETURNED(mu_) { return &mu_; }
  // The value; meaningful only when is_initialized().
  Tensor* tensor() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return &tensor_; }
  const Tensor& value() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return tensor_;
  }
  bool is_initialized() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return is_initialized_;
  }
  // Replaces the value (shares `t`'s buffer) and marks it initialised.
  void Assign(Tensor t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    tensor_ = std::move(t);
    is_initialized_ = true;
  }
  // Makes tensor() safe to modify in place (see the file comment).
  void PrepareForUpdate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the value.
  void Uninitialize() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    tensor_ = Tensor();
    is_initialized_ = false;
  }

 private:
  const DataType dtype_;
  const PartialTensorShape shape_;
  const std::string name_;
  mutable absl::Mutex mu_;
  Tensor tensor_ ABSL_GUARDED_BY(mu_);
  bool is_initialized_ ABSL_GUARDED_BY(mu_) = false;
};

class ResourceMgr {
 public:
  explicit ResourceMgr(std::string default_container = "localhost")
      : default_container_(std::move(default_container)) {}
  ResourceMgr(const ResourceMgr&) = delete;
  ResourceMgr& operator=(const ResourceMgr&) = delete;

  const std::string& default_container() const { return default_container_; }

  // AlreadyExists if (container, name) is taken.
  absl::Status Create(absl::string_view container, absl::string_view name,
                      std::shared_ptr<ResourceBase> resource);
  // NotFound / InvalidArgument (other type).
  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> Lookup(absl::string_view container,
                                            absl::string_view name) const;
  // Returns the existing resource or stores creator()'s.
  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> LookupOrCreate(
      absl::string_view container, absl::string_view name,
      const std::function<absl::StatusOr<std::shared_ptr<T>>()>& creator);
  // NotFound when absent.
  absl::Status Delete(absl::string_view container, absl::string_view name);
  // Removes a whole container; OK if it does not exist.
  void Cleanup(absl::string_view container);
  // Removes everything.
  void Clear();
  // (container, name, type name) of every resource, sorted.
  std::vector<std::tuple<std::string, std::string, std::string>> List() const;

  // Lookup by handle (container resolved against the default).
  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> Lookup(const ResourceHandle& h) const {
    return Lookup<T>(h.container, h.name);
  }

 private:
  std::string Container(absl::string_view c) const {
    return c.empty() ? default_container_ : std::string(c);
  }
  absl::StatusOr<std::shared_ptr<ResourceBase>> LookupBase(
      absl::string_view container, absl::string_view name) const;

  const std::string default_container_;
  mutable absl::Mutex mu_;
  // container -> name -> resource
  absl::flat_hash_map<
      std::string,
      absl::flat_hash_map<std::string, std::shared_ptr<ResourceBase>>>
      containers_ ABSL_GUARDED_BY(mu_);
};

template <typename T>
absl::StatusOr<std::shared_ptr<T>> ResourceMgr::Lookup(
    absl::string_view container, absl::string_view name) const {
  auto base = LookupBase(container, name);
  if (!base.ok()) return base.status();
  auto typed = std::dynamic_pointer_cast<T>(*base);
  if (typed == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resource '", name, "' in container '", Container(container), "' is a ",
        (*base)->TypeName(), ", not a ", T::kTypeName));
  }
  return typed;
}

template <typename T>
absl::StatusOr<std::shared_ptr<T>> ResourceMgr::LookupOrCreate(
    absl::string_view container, absl::string_view name,
    const std::function<absl::StatusOr<std::shared_ptr<T>>()>& creator) {
  absl::MutexLock lock(&mu_);
  auto& c = containers_[Container(container)];
  auto it = c.find(name);
  if (it != c.end()) {
    auto typed = std::dynamic_pointer_cast<T>(it->second);
    if (typed == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resource '", name, "' in container '", Container(container),
          "' is a ", it->second->TypeName(), ", not a ", T::kTypeName));
    }
    return typed;
  }
  auto created = creator();
  if (!created.ok()) return created.status();
  c.emplace(std::string(name), *created);
  return *created;
}

}  // namespace cohort

#endif  // COHORT_GRAPH_RESOURCE_MGR_H_
