#include "cohort/graph/device.h"

#include <thread>

namespace cohort {

Device::Device(std::string name, int num_threads) : name_(std::move(name)) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::thread::hardware_concurrency());
    if (num_threads <= 0) num_threads = 1;
  }
  pool_ = std::make_unique<Eigen::ThreadPool>(num_threads);
  eigen_device_ =
      std::make_unique<Eigen::ThreadPoolDevice>(pool_.get(), num_threads);
}

Device::~Device() {
  eigen_device_.reset();
  pool_.reset();  // Joins the threads after running queued closures.
}

}  // namespace cohort
