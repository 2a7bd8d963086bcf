#include "cohort/graph/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"

namespace cohort {
namespace {

constexpr int64_t kMinServerMemoryBytes = int64_t{256} << 20;

// 8 GiB, or half the machine when that is smaller: a server shares its
// machine with other tasks (a ps next to a worker is the common layout), so
// one graph must not be able to claim all of it.
int64_t DefaultServerMemoryLimit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  int64_t limit = kDefaultServerMemoryBytes;
  if (pages > 0 && page_size > 0) {
    limit = std::min(limit, static_cast<int64_t>(pages) / 2 * page_size);
  }
  return std::max(limit, kMinServerMemoryBytes);
}

// Per-step limit of devices without their own (SetProcessMemoryLimits).
std::atomic<int64_t> default_step_limit{0};

}  // namespace

MemoryBudget::MemoryBudget(std::string name, int64_t limit,
                           MemoryBudget* parent, std::string how_to_raise)
    : name_(std::move(name)),
      how_to_raise_(std::move(how_to_raise)),
      parent_(parent),
      limit_(limit) {
  if (parent_ != nullptr) parent_->Ref();
}

MemoryBudget::~MemoryBudget() {
  if (parent_ != nullptr) parent_->Unref();
}

MemoryBudget::Ptr MemoryBudget::Create(std::string name, int64_t limit_bytes,
                                       MemoryBudget* parent,
                                       std::string how_to_raise) {
  COHORT_CHECK(limit_bytes > 0)
      << "memory budget " << name << " of " << limit_bytes << " bytes";
  return Ptr(new MemoryBudget(std::move(name), limit_bytes, parent,
                              std::move(how_to_raise)));
}

MemoryBudget* MemoryBudget::Process() {
  static MemoryBudget* const process = new MemoryBudget(
      "the process", DefaultServerMemoryLimit(), nullptr,
      "raise it with MemoryLimits::per_server_bytes (SetProcessMemoryLimits; "
      "`cohort server --max-server-memory`)");
  return process;
}

void SetProcessMemoryLimits(const MemoryLimits& limits) {
  const int64_t server = limits.per_server_bytes > 0
                             ? limits.per_server_bytes
                             : DefaultServerMemoryLimit();
  MemoryBudget::Process()->limit_.store(server, std::memory_order_relaxed);
  default_step_limit.store(limits.per_step_bytes, std::memory_order_relaxed);
}

int64_t DefaultStepMemoryLimit() {
  const int64_t set = default_step_limit.load(std::memory_order_relaxed);
  if (set > 0) return set;
  return std::min(kDefaultStepMemoryBytes, MemoryBudget::Process()->limit());
}

absl::Status MemoryBudget::Charge(int64_t bytes, absl::string_view what) {
  const int64_t limit = limit_.load(std::memory_order_relaxed);
  // A request over the whole limit is refused before it is added, so the
  // counter never overflows however large the request.
  if (bytes > limit) return OverBudget(bytes, what, used(), limit);
  // Add first and undo on failure: one atomic operation on the fast path,
  // no compare-and-swap loop. Concurrent charges near the limit may both
  // fail where one would have fitted; never both succeed past it.
  const int64_t before = used_.fetch_add(bytes, std::memory_order_relaxed);
  if (before > limit - bytes) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    return OverBudget(bytes, what, before, limit);
  }
  if (parent_ != nullptr) {
    absl::Status s = parent_->Charge(bytes, what);
    if (!s.ok()) {
      used_.fetch_sub(bytes, std::memory_order_relaxed);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status MemoryBudget::OverBudget(int64_t bytes, absl::string_view what,
                                      int64_t in_use, int64_t limit) const {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " needs ", bytes, " bytes, over ", name_,
                   "'s memory budget of ", limit, " bytes (", in_use,
                   " bytes in use); make the graph allocate "
                   "less, or ",
                   how_to_raise_));
}

void MemoryBudget::ForceCharge(int64_t bytes) {
  for (MemoryBudget* b = this; b != nullptr; b = b->parent_) {
    b->used_.fetch_add(bytes, std::memory_order_relaxed);
  }
}

void MemoryBudget::Release(int64_t bytes) {
  for (MemoryBudget* b = this; b != nullptr; b = b->parent_) {
    b->used_.fetch_sub(bytes, std::memory_order_relaxed);
  }
}

void MemoryBudget::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

}  // namespace cohort
