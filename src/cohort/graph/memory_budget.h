// MemoryBudget: a cap on the live bytes of the tensors a graph makes, so that
// one small graph (Fill with shape [2147483647, 512], a Const that
// broadcasts a value to 1 GiB, a checkpoint entry that declares more than
// it carries) fails its step with ResourceExhausted instead of taking the
// process down.
//
// Budgets form a chain: each step has its own budget (per-step limit) whose
// parent is its device's (the server's) budget, which is the process-wide
// budget unless the device was given a limit of its own (then it is a child
// of the process budget). A charge succeeds only when every budget on the
// chain stays within its limit; a tensor buffer allocated against a budget
// keeps a reference to it and releases its bytes when the buffer is freed,
// so the counts are live bytes: a variable's value counts against its
// server's budget for as long as the variable holds it, a fetched tensor
// until the caller drops it.
//
// Where allocations are checked (one place, not per kernel):
//  - OpKernelContext::allocate_output / allocate_temp, against the step's
//    budget (Executor::Run makes one per step);
//  - Tensor::FromProto(proto, budget), for Const values (the device's
//    budget) and checkpoint entries (Saver's budget);
//  - ReadCheckpointFile, which checks the file's size before reading it.
// Copies of a charged buffer (Tensor::DeepCopy, e.g. a variable copied
// before an in-place update while a reader holds it) are charged to the
// same budget without a check, so the counts stay right.
//
// Errors (Charge):
//  - ResourceExhausted: the bytes would take a budget on the chain over its
//    limit; the message names the budget, its limit, what is in use, the
//    bytes asked for, and how to raise the limit. Nothing is charged.
//
// Cost: a charge is one atomic add per budget on the chain (two or three),
// no lock; a release the same.
//
// Thread safety: thread-safe. Limits are fixed at creation, except the
// process budget's (SetProcessMemoryLimits, meant for startup).
#ifndef COHORT_GRAPH_MEMORY_BUDGET_H_
#define COHORT_GRAPH_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cohort {

// Limits for a device (server) and its steps; 0 means the default.
struct MemoryLimits {
  // Live bytes the kernels of one step may hold. Default: 4 GiB, or the
  // server's limit when that is smaller.
  int64_t per_step_bytes = 0;
  // Live bytes of every tensor the graphs of one device (a LocalSession, a
  // server) made: step tensors, variables, Const values, restored
  // checkpoints. Default: 8 GiB, or half the physical memory when that is
  // smaller (at least 256 MiB).
  int64_t per_server_bytes = 0;
};

inline constexpr int64_t kDefaultStepMemoryBytes = int64_t{4} << 30;
inline constexpr int64_t kDefaultServerMemoryBytes = int64_t{8} << 30;

// Sets the process-wide defaults: the process budget's limit
// (per_server_bytes) and the per-step limit of devices that have none of
// their own. Zero fields get the defaults above. Call at startup, before
// steps run (`cohort server --max-server-memory/--max-step-memory`).
void SetProcessMemoryLimits(const MemoryLimits& limits);
// The per-step limit of devices without their own.
int64_t DefaultStepMemoryLimit();

class MemoryBudget {
 public:
  struct Unrefer {
    void operator()(MemoryBudget* b) const { b->Unref(); }
  };
  using Ptr = std::unique_ptr<MemoryBudget, Unrefer>;

  // A budget of `limit_bytes` (> 0) whose charges also go to `parent` (may
  // be null; referenced until this budget is destroyed). `name` ("the
  // step", "the server") and `how_to_raise` appear in errors.
  static Ptr Create(std::string name, int64_t limit_bytes, MemoryBudget* parent,
                    std::string how_to_raise);
  // The process-wide budget (never destroyed); its limit is set by
  // SetProcessMemoryLimits.
  static MemoryBudget* Process();

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Charges `bytes` (>= 0) to this budget and its ancestors, or nothing:
  // see the file comment for errors. `what` starts the message ("output 0
  // (float [2,3])").
  absl::Status Charge(int64_t bytes, absl::string_view what);
  // Charges without a check (copies of charged buffers).
  void ForceCharge(int64_t bytes);
  // Gives back bytes charged before, to this budget and its ancestors.
  void Release(int64_t bytes);

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();

  const std::string& name() const { return name_; }
  int64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  MemoryBudget* parent() const { return parent_; }

 private:
  friend void SetProcessMemoryLimits(const MemoryLimits& limits);
  MemoryBudget(std::string name, int64_t limit, MemoryBudget* parent,
               std::string how_to_raise);
  ~MemoryBudget();
  absl::Status OverBudget(int64_t bytes, absl::string_view what, int64_t in_use,
                          int64_t limit) const;

  const std::string name_;
  const std::string how_to_raise_;
  MemoryBudget* const parent_;  // Referenced; null for the process budget.
  // Changed only by SetProcessMemoryLimits (process budget).
  std::atomic<int64_t> limit_;
  // Live bytes charged; may pass limit_ only by ForceCharge.
  std::atomic<int64_t> used_{0};
  std::atomic<int32_t> refs_{1};
};

}  // namespace cohort

#endif  // COHORT_GRAPH_MEMORY_BUDGET_H_
