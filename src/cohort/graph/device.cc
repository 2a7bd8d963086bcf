#include "cohort/graph/device.h"

#include <random>
#include <thread>

#include "absl/strings/str_cat.h"

namespace cohort {
namespace {

// A restarted task must get a different incarnation from its predecessor
// even when both start in the same instant with the same pid, so it comes
// from the OS's entropy source (std::random_device reads getrandom /
// /dev/urandom on Linux), not from a clock-seeded generator. Zero is
// reserved: Send/Recv attrs default to it, meaning "no incarnation".
uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t value = 0;
  while (value == 0) value = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return value;
}

// The device's own budget when it has a limit, else a reference to the
// process's (so every device without one shares the process limit).
MemoryBudget::Ptr DeviceBudget(const std::string& device, int64_t limit) {
  if (limit <= 0) {
    MemoryBudget::Process()->Ref();
    return MemoryBudget::Ptr(MemoryBudget::Process());
  }
  return MemoryBudget::Create(
      absl::StrCat("device ", device), limit, MemoryBudget::Process(),
      "raise MemoryLimits::per_server_bytes (SessionOptions::memory)");
}

}  // namespace

Device::Device(std::string name, int num_threads, uint64_t incarnation,
               const MemoryLimits& limits)
    : name_(std::move(name)),
      incarnation_(incarnation != 0 ? incarnation : NewIncarnation()),
      step_limit_(limits.per_step_bytes),
      memory_budget_(DeviceBudget(name_, limits.per_server_bytes)) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::thread::hardware_concurrency());
    if (num_threads <= 0) num_threads = 1;
  }
  pool_ = std::make_unique<Eigen::ThreadPool>(num_threads);
  intra_op_pool_ = std::make_unique<Eigen::ThreadPool>(num_threads);
  eigen_device_ = std::make_unique<Eigen::ThreadPoolDevice>(
      intra_op_pool_.get(), num_threads);
}

Device::~Device() {
  // Joins the threads after running queued closures; nodes first, as they
  // may still hand pieces to the intra-op pool.
  pool_.reset();
  eigen_device_.reset();
  intra_op_pool_.reset();
}

}  // namespace cohort
