// Kernels: the CPU code that runs one node, and the registry that picks a
// kernel for a node.
//
// Contract for kernel writers:
//  - A kernel is a subclass of OpKernel constructed once per node (per
//    executor) from an OpKernelConstruction: read attrs there with
//    ctx->GetAttr(...) and report bad attrs with COHORT_OP_REQUIRES_OK(ctx, ..)
//    (the node is then rejected when the graph is loaded).
//  - Compute(OpKernelContext*) may run concurrently for different steps, so
//    it must not mutate kernel members without its own lock. It reads inputs
//    with ctx->input(i), allocates outputs with ctx->allocate_output(...) or
//    sets them with ctx->set_output(i, tensor) (sharing a buffer is fine, e.g.
//    Identity), and reports failure with ctx->SetStatus / COHORT_OP_REQUIRES*
//    and returns. Every output must be set when Compute returns OK; the
//    executor checks output dtypes against the op definition.
//  - Allocate outputs and scratch tensors through the context: it checks
//    them against the step's memory budget (memory_budget.h), so a shape
//    taken from an input ("Fill me [2147483647, 512]") fails the step with
//    ResourceExhausted instead of the process. Never construct a tensor
//    whose size comes from input data with Tensor(dtype, shape).
//  - Error messages need not name the node: the executor prefixes
//    "node 'x' (op Y): ". Use InvalidArgument for bad input values/shapes,
//    FailedPrecondition for state that must be fixed first (uninitialised
//    variable), Cancelled/DeadlineExceeded from waits.
//  - Heavy numeric work uses ctx->eigen_cpu_device() (an
//    Eigen::ThreadPoolDevice over the device's intra-op pool), e.g.
//    out.device(ctx->eigen_cpu_device()) = a.contract(b, dims);
//  - Kernels that wait (Recv) derive from AsyncOpKernel and call `done`
//    exactly once, possibly from another thread; they must not block an
//    executor thread.
//  - Kernels are registered by explicit functions, e.g.
//      absl::Status RegisterMathKernels(KernelRegistry* r) {
//        return r->Register<AddOp<float>>(
//            KernelDefBuilder("Add").TypeConstraint<float>("T"));
//      }
//    and RegisterAllKernels (kernels/all_kernels.cc) calls each family.
//  - Test a kernel without a session with RunKernel (kernel_test_util.h).
//
// Thread safety: OpKernelContext is used by one thread at a time (the one
// running the kernel; for async kernels the thread calling `done` after the
// kernel's last use). KernelRegistry is thread-safe.
#ifndef COHORT_GRAPH_KERNEL_H_
#define COHORT_GRAPH_KERNEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/attr_value.h"
#include "cohort/graph/memory_budget.h"
#include "cohort/graph/op_registry.h"
#include "cohort/graph/tensor.h"

namespace Eigen {
struct ThreadPoolDevice;
}  // namespace Eigen

namespace cohort {

class Env;
class Device;
class ResourceMgr;
class Rendezvous;
class CancellationManager;
class OpKernelContext;

// Everything a kernel constructor may look at.
class OpKernelConstruction {
 public:
  OpKernelConstruction(const NodeDef* def, const OpDef* op_def,
                       std::vector<DataType> input_types,
                       std::vector<DataType> output_types, Device* device)
      : def_(def),
        op_def_(op_def),
        input_types_(std::move(input_types)),
        output_types_(std::move(output_types)),
        device_(device) {}

  const NodeDef& def() const { return *def_; }
  const OpDef& op_def() const { return *op_def_; }
  const std::vector<DataType>& input_types() const { return input_types_; }
  const std::vector<DataType>& output_types() const { return output_types_; }
  int num_inputs() const { return static_cast<int>(input_types_.size()); }
  int num_outputs() const { return static_cast<int>(output_types_.size()); }
  Device* device() const { return device_; }

  // InvalidArgument naming the node when missing or of another type.
  template <typename T>
  absl::Status GetAttr(absl::string_view attr_name, T* value) const {
    return GetNodeAttr(*def_, attr_name, value);
  }
  bool HasAttr(absl::string_view attr_name) const {
    return HasNodeAttr(*def_, attr_name);
  }

  // Records the first failure; the kernel is then discarded.
  void SetStatus(const absl::Status& s) {
    if (status_.ok()) status_ = s;
  }
  const absl::Status& status() const { return status_; }

 private:
  const NodeDef* def_;
  const OpDef* op_def_;
  std::vector<DataType> input_types_;
  std::vector<DataType> output_types_;
  Device* device_;
  absl::Status status_;
};

class OpKernel {
 public:
  explicit OpKernel(OpKernelConstruction* ctx);
  virtual ~OpKernel() = default;
  OpKernel(const OpKernel&) = delete;
  OpKernel& operator=(const OpKernel&) = delete;

  // Runs the node for one step; see the file comment.
  virtual void Compute(OpKernelContext* ctx) = 0;
  // Overridden by AsyncOpKernel.
  virtual bool IsAsync() const { return false; }
  // Cheap kernels (default: false for most, true for MatMul etc.) are run
  // inline by the executor instead of being scheduled on the pool.
  virtual bool IsExpensive() const { return expensive_; }

  const NodeDef& def() const { return def_; }
  const std::string& name() const { return def_.name(); }
  const std::string& type_string() const { return def_.op(); }
  const std::vector<DataType>& input_types() const { return input_types_; }
  const std::vector<DataType>& output_types() const { return output_types_; }
  int num_inputs() const { return static_cast<int>(input_types_.size()); }
  int num_outputs() const { return static_cast<int>(output_types_.size()); }

 protected:
  // Marks the kernel as expensive (scheduled on the pool, not inline).
  void set_expensive(bool e) { expensive_ = e; }

 private:
  const NodeDef def_;
  const std::vector<DataType> input_types_;
  const std::vector<DataType> output_types_;
  bool expensive_ = false;
};

class AsyncOpKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  using DoneCallback = std::function<void()>;
  // Must eventually call `done` exactly once (after setting outputs or
  // status). Must not block.
  virtual void ComputeAsync(OpKernelContext* ctx, DoneCallback done) = 0;
  bool IsAsync() const final { return true; }
  // Runs ComputeAsync and waits; for tests and non-executor callers only.
  void Compute(OpKernelContext* ctx) final;
};

// What a kernel sees while it runs for one step.
class OpKernelContext {
 public:
  struct Params {
    int64_t step_id = 0;
    const OpKernel* op_kernel = nullptr;
    Device* device = nullptr;  // Gives eigen device and resource manager.
    // The step's rendezvous for Send/Recv (may be null if the graph has none).
    Rendezvous* rendezvous = nullptr;
    // Cancels the step; kernels that wait register a callback.
    CancellationManager* cancellation_manager = nullptr;
    // The step's deadline (absl::InfiniteFuture() for none).
    absl::Time deadline = absl::InfiniteFuture();
    Env* env = nullptr;
    // What allocate_output/allocate_temp charge; null = unchecked (kernel
    // tests). The executor gives each step its own (memory_budget.h).
    MemoryBudget* memory_budget = nullptr;
    // Inputs: `num_inputs` contiguous tensors.
    const Tensor* inputs = nullptr;
    int num_inputs = 0;
  };

  explicit OpKernelContext(const Params* params);

  const OpKernel& op_kernel() const { return *params_->op_kernel; }
  int num_inputs() const { return params_->num_inputs; }
  const Tensor& input(int i) const { return params_->inputs[i]; }
  // Input i's tensor itself, to be written in place and made an output,
  // when nothing else holds its buffer (the step's slot was the only
  // reference: no other consumer, fetch or variable shares it): moved into
  // *out, leaving input(i) empty, and true. False, leaving both alone,
  // otherwise: the kernel then works on a copy.
  bool ForwardInput(int i, Tensor* out);
  DataType input_dtype(int i) const { return params_->inputs[i].dtype(); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  DataType expected_output_dtype(int i) const {
    return params_->op_kernel->output_types()[i];
  }

  // Allocates output `index` with the op's declared dtype and `shape`.
  // InvalidArgument for a bad index or a byte count that overflows;
  // ResourceExhausted (naming the output, its shape, the bytes and the
  // budget) when the step's memory budget cannot take it. Never blocks.
  absl::Status allocate_output(int index, const TensorShape& shape,
                               Tensor** out);
  // Output `output` of `shape` in input `input`'s buffer when ForwardInput
  // may take it (nothing else holds it) and its dtype and element count
  // fit, else allocate_output's: TensorFlow's
  // forward_input_or_allocate_output. For elementwise kernels, which then
  // write over their input rather than a second buffer as large (less
  // memory traffic, no allocation). After a forward, input(input) is empty:
  // take what the kernel needs of it (data pointers, shape) before the call,
  // and write out[i] only from input elements at i. `shape` is taken by
  // value as it may be input(input)'s own.
  absl::Status forward_input_or_allocate_output(int input, int output,
                                                TensorShape shape,
                                                Tensor** out);
  // Sets output `index` (may share a buffer with an input).
  void set_output(int index, Tensor tensor) {
    outputs_[index] = std::move(tensor);
  }
  Tensor* mutable_output(int index) { return &outputs_[index]; }
  // Allocates a scratch tensor that is not an output; errors as
  // allocate_output's.
  absl::Status allocate_temp(DataType dtype, const TensorShape& shape,
                             Tensor* out);

  void SetStatus(const absl::Status& s) {
    if (status_.ok()) status_ = s;
  }
  const absl::Status& status() const { return status_; }

  int64_t step_id() const { return params_->step_id; }
  Device* device() const { return params_->device; }
  // The device's resource manager (variables live here).
  ResourceMgr* resource_manager() const;
  Rendezvous* rendezvous() const { return params_->rendezvous; }
  CancellationManager* cancellation_manager() const {
    return params_->cancellation_manager;
  }
  absl::Time deadline() const { return params_->deadline; }
  Env* env() const { return params_->env; }
  MemoryBudget* memory_budget() const { return params_->memory_budget; }
  // Multithreaded Eigen device for heavy kernels (MatMul, reductions).
  const Eigen::ThreadPoolDevice& eigen_cpu_device() const;

  // For the executor: the produced outputs.
  absl::InlinedVector<Tensor, 4>* outputs() { return &outputs_; }

 private:
  const Params* params_;
  absl::InlinedVector<Tensor, 4> outputs_;
  absl::Status status_;
};

// In a kernel's Compute: fail the step with `status` when `cond` is false.
#define COHORT_OP_REQUIRES(ctx, cond, status) \
  do {                                        \
    if (!(cond)) {                            \
      (ctx)->SetStatus(status);               \
      return;                                 \
    }                                         \
  } while (0)

// In a kernel's Compute or constructor: fail with `expr` when not OK.
#define COHORT_OP_REQUIRES_OK(ctx, expr)       \
  do {                                         \
    ::absl::Status cohort_op_status_ = (expr); \
    if (!cohort_op_status_.ok()) {             \
      (ctx)->SetStatus(cohort_op_status_);     \
      return;                                  \
    }                                          \
  } while (0)

// Which nodes a kernel serves: an op name, a device type, and constraints
// on type attrs.
struct KernelDef {
  std::string op;
  std::string device_type = "CPU";
  std::vector<std::pair<std::string, DataType>> type_constraints;
  // "Add [CPU] T=float"
  std::string DebugString() const;
};

class KernelDefBuilder {
 public:
  explicit KernelDefBuilder(std::string op) { def_.op = std::move(op); }
  KernelDefBuilder& Device(std::string device_type) {
    def_.device_type = std::move(device_type);
    return *this;
  }
  KernelDefBuilder& TypeConstraint(std::string attr, DataType type) {
    def_.type_constraints.emplace_back(std::move(attr), type);
    return *this;
  }
  template <typename T>
  KernelDefBuilder& TypeConstraint(std::string attr) {
    return TypeConstraint(std::move(attr), DataTypeToEnum<T>::value);
  }
  const KernelDef& def() const { return def_; }

 private:
  KernelDef def_;
};

using KernelFactory =
    std::function<std::unique_ptr<OpKernel>(OpKernelConstruction*)>;

class KernelRegistry {
 public:
  KernelRegistry() = default;
  KernelRegistry(const KernelRegistry&) = delete;
  KernelRegistry& operator=(const KernelRegistry&) = delete;

  // AlreadyExists when a kernel with the same op, device and constraints
  // is registered. Non-blocking.
  absl::Status Register(const KernelDefBuilder& def, KernelFactory factory);
  template <typename K>
  absl::Status Register(const KernelDefBuilder& def) {
    return Register(def,
                    [](OpKernelConstruction* c) -> std::unique_ptr<OpKernel> {
                      return std::make_unique<K>(c);
                    });
  }

  // Builds the kernel for a validated node (defaults added). Errors name the
  // node: InvalidArgument "no CPU kernel for node 'x' (op Add) with
  // T=string; registered: Add [CPU] T=float, ...", or the constructor's
  // status.
  absl::StatusOr<std::unique_ptr<OpKernel>> CreateKernel(
      const NodeDef& node, const OpDef& op_def, Device* device,
      absl::string_view device_type = "CPU") const;
  // True when some kernel matches the node.
  bool HasKernel(const NodeDef& node,
                 absl::string_view device_type = "CPU") const;
  // All registered kernel defs (for tests and `cohort` listings).
  std::vector<KernelDef> ListKernels() const;

 private:
  struct Entry {
    KernelDef def;
    KernelFactory factory;
  };
  const Entry* Find(const NodeDef& node, absl::string_view device_type) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<Entry>> kernels_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort

#endif  // COHORT_GRAPH_KERNEL_H_
