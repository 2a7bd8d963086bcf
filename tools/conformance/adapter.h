// Conformance adapters: how `cohort_conformance` turns one case of
// resolver_cases.jsonl (format: docs/conformance.md)
// into calls on the C++ implementation.
//
// A case names a `resolver` ("TFConfig", "Slurm.expand_hostlist", ...). The
// runner looks that name up in an AdapterRegistry; without an adapter the case
// is skipped with "no adapter for resolver X". An adapter gets the whole case
// and returns one StepOutcome per step of `input.calls` (or per expected
// result for call-less cases); the runner compares them with
// `expect.results`. Adapters interpret the case format generically and must
// never look at `source` or recognise particular cases.
//
// Two kinds of adapter:
//   - Adapter: anything (ClusterSpec, multi_worker_util,
//   Slurm.expand_hostlist).
//   - ResolverAdapter: only builds a ClusterResolver from a resolver spec
//     ({"ctor": ..., "fake": ...}, the case's `input` or one entry of Union's
//     `input.resolvers`); the shared script interpreter executes the common
//     steps (cluster_spec, master, num_accelerators, get/set of task_type,
//     task_id, rpc_layer, environment, get_env, construct). Resolver-specific
//     calls go through ExtraStep.
//
// To add adapters: write `void RegisterXAdapters(AdapterRegistry*)` in
// tools/conformance/x_adapter.cc, declare it in adapters.h and call it from
// RegisterAllAdapters in adapters.cc; add the .cc to CMakeLists.txt.
//
// Thread safety: the runner is single-threaded; adapters are const and may
// be reused across cases, all per-case state lives in CaseContext.
#ifndef COHORT_TOOLS_CONFORMANCE_ADAPTER_H_
#define COHORT_TOOLS_CONFORMANCE_ADAPTER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/json.h"
#include "cohort/cluster/cluster_resolver.h"

namespace cohort::conformance {

// What one step produced: a value, plain success, or an error status.
struct StepOutcome {
  absl::Status status;
  std::optional<Json> value;

  static StepOutcome Value(Json v) { return {absl::OkStatus(), std::move(v)}; }
  static StepOutcome Ok() { return {absl::OkStatus(), std::nullopt}; }
  static StepOutcome Error(absl::Status s) {
    return {std::move(s), std::nullopt};
  }
  // OK+value from a StatusOr<Json>, or its error.
  static StepOutcome From(absl::StatusOr<Json> v) {
    if (!v.ok()) return Error(v.status());
    return Value(*std::move(v));
  }
};

// What an adapter returns for a case.
struct CaseRun {
  std::vector<StepOutcome> steps;
  // Set when the part the case exercises is not there (printed by the runner).
  std::optional<std::string> skip_reason;
};

class AdapterRegistry;

// The canonical code of a TensorFlow error class name (tf.errors:
// "InvalidArgumentError" -> kInvalidArgument, ...; OpError's codes are
// absl's); nullopt for any other name.
std::optional<absl::StatusCode> TfErrorCode(const std::string& name);

// Devices from the case's `input.devices`: a list [{name, device_type}], or
// {"raises": TfErrorName, "match": text} for a listing that fails (every
// call) with that code and text, as TensorFlow's tests mock list_devices
// with a side effect.
class FakeDeviceLister : public DeviceLister {
 public:
  explicit FakeDeviceLister(std::vector<DeviceInfo> devices)
      : devices_(std::move(devices)) {}
  explicit FakeDeviceLister(absl::Status error) : error_(std::move(error)) {}
  absl::StatusOr<std::vector<DeviceInfo>> ListDevices(
      absl::string_view master) override {
    if (!error_.ok()) return error_;
    return devices_;
  }

 private:
  std::vector<DeviceInfo> devices_;
  absl::Status error_;
};

// Per-case state: a FakeEnv seeded from `input.env` (and `input.env_unset`),
// the fake device listing, and anything an adapter must keep alive until the
// case ends (fake HTTP servers, ...).
class CaseContext {
 public:
  CaseContext(const Json& input, const AdapterRegistry* registry);
  ~CaseContext();

  // The case's `input` with object keys in file order (Json sorts them);
  // for values whose order is observable, such as a cluster's job order.
  const nlohmann::ordered_json& ordered_input() const { return ordered_input_; }
  void set_ordered_input(nlohmann::ordered_json input) {
    ordered_input_ = std::move(input);
  }

  FakeEnv* env() { return &env_; }
  // Null when the case has no `input.devices`.
  DeviceLister* devices() { return devices_.get(); }
  const AdapterRegistry& registry() const { return *registry_; }

  // Keeps `object` alive until the case is done; destroyed in reverse order
  // of registration, before the FakeEnv.
  void KeepAlive(std::shared_ptr<void> object) {
    keep_alive_.push_back(std::move(object));
  }
  // Marks the whole case skipped (first reason wins).
  void Skip(std::string reason) {
    if (!skip_reason_) skip_reason_ = std::move(reason);
  }
  const std::optional<std::string>& skip_reason() const { return skip_reason_; }

 private:
  FakeEnv env_;
  nlohmann::ordered_json ordered_input_;
  std::unique_ptr<DeviceLister> devices_;
  const AdapterRegistry* registry_;
  std::vector<std::shared_ptr<void>> keep_alive_;
  std::optional<std::string> skip_reason_;
};

class Adapter {
 public:
  virtual ~Adapter() = default;
  // `test_case` is the whole case line; read `input`, never `source`.
  virtual CaseRun Run(const Json& test_case, CaseContext& ctx) const = 0;
};

class ResolverAdapter : public Adapter {
 public:
  // Builds the resolver of `spec` (`ctor`, `fake`, ... ; for nested resolvers
  // also `kind`). A construction error is the outcome of a `construct` step.
  // To skip the case (e.g. a nested kind without adapter) call ctx.Skip and
  // return an error.
  virtual absl::StatusOr<std::unique_ptr<ClusterResolver>> Build(
      const Json& spec, CaseContext& ctx) const = 0;

  // A step the common interpreter does not know (a resolver-specific call or
  // attribute); nullopt when this adapter does not know it either.
  virtual std::optional<StepOutcome> ExtraStep(ClusterResolver& resolver,
                                               const Json& step,
                                               CaseContext& ctx) const {
    return std::nullopt;
  }

  // Builds the resolver from the case's `input` and interprets the script.
  CaseRun Run(const Json& test_case, CaseContext& ctx) const override;

  // Interprets one common step on `resolver`; nullopt when it is not common.
  static std::optional<StepOutcome> CommonStep(ClusterResolver& resolver,
                                               const Json& step,
                                               CaseContext& ctx);
};

class AdapterRegistry {
 public:
  // Registering a name twice is a programming error (checked).
  void Register(const std::string& resolver, std::unique_ptr<Adapter> adapter);
  // Exact name first; for "A+B" (a combination such as "Union+GCE") the
  // adapter of "A".
  const Adapter* Find(const std::string& resolver) const;
  // A ResolverAdapter by nested `kind`; null when absent or not a resolver.
  const ResolverAdapter* FindResolver(const std::string& kind) const;

 private:
  std::map<std::string, std::unique_ptr<Adapter>> adapters_;
};

// ---- Helpers for adapters: typed access to case JSON -----------------------
// Each returns InvalidArgument naming `key` when the value has the wrong type.

// `obj[key]` or null when absent.
const Json& Field(const Json& obj, const char* key);
absl::StatusOr<std::optional<std::string>> OptString(const Json& obj,
                                                     const char* key);
absl::StatusOr<std::optional<int64_t>> OptInt(const Json& obj, const char* key);
// Devices from a JSON list of {name, device_type}.
std::vector<DeviceInfo> ParseDevices(const Json& list);
// JSON for optional values: null when absent.
Json ToJson(const std::optional<std::string>& v);
Json ToJson(const std::optional<int64_t>& v);
Json ToJson(const AcceleratorCounts& counts);
// A ClusterDef in the cases' form: [{name, tasks: {"0": addr}}] sorted.
Json ClusterDefToJson(const ClusterDef& def);
// A ServerDef as {cluster (ClusterDefToJson), job_name, task_index,
// protocol}.
Json ServerDefToJson(const ServerDef& def);

}  // namespace cohort::conformance

#endif  // COHORT_TOOLS_CONFORMANCE_ADAPTER_H_
