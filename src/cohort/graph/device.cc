#include "cohort/graph/device.h"

#include <random>
#include <thread>

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

}  // namespace

Device::Device(std::string name, int num_threads, uint64_t incarnation)
    : name_(std::move(name)),
      incarnation_(incarnation != 0 ? incarnation : NewIncarnation()) {
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
