// Device: where kernels run. For now one kind, the CPU device of a task,
// named like TensorFlow ("/job:worker/replica:0/task:0/device:CPU:0"). It
// owns the task's ResourceMgr (variables) and two thread pools, as
// TensorFlow's inter-op and intra-op pools: the executor schedules nodes on
// the first; heavy kernels split their work over the second through an
// Eigen::ThreadPoolDevice (e.g. MatMul). They must differ: a kernel waits for
// its parallelFor's pieces, and with one pool two such kernels running at
// once could occupy every thread while their pieces sit queued behind them.
//
// Every Device has an incarnation: a random non-zero uint64 chosen when it is
// constructed (once per server start). The distributed runtime reports it in
// GetStatus and writes it into Send/Recv nodes and rendezvous keys, so a
// tensor or RecvTensor call meant for a task's previous life is told apart
// from one for the restarted task.
//
// Every Device has a memory budget for the tensors its graphs make
// (memory_budget.h): the process-wide one, or, when given
// MemoryLimits::per_server_bytes, its own (a child of the process budget).
// Each step the executor runs gets a budget of step_memory_limit() bytes
// under it.
//
// Thread safety: thread-safe; the pool and Eigen device may be used from any
// thread. Destruction waits for scheduled closures to finish.
#ifndef COHORT_GRAPH_DEVICE_H_
#define COHORT_GRAPH_DEVICE_H_

#ifndef EIGEN_USE_THREADS
#define EIGEN_USE_THREADS  // Also set by CMake for every cohort_graph user.
#endif
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cohort/graph/memory_budget.h"
#include "cohort/graph/resource_mgr.h"
#include "unsupported/Eigen/CXX11/Tensor"
#include "unsupported/Eigen/CXX11/ThreadPool"

namespace cohort {

class Device {
 public:
  // `num_threads` <= 0 means the number of hardware threads. `incarnation`
  // 0 (the default) draws a random non-zero one from the OS's entropy
  // source; tests pass a fixed value to get predictable rendezvous keys.
  // `limits`: zero fields take the process-wide defaults
  // (SetProcessMemoryLimits).
  explicit Device(
      std::string name = "/job:localhost/replica:0/task:0/device:CPU:0",
      int num_threads = 0, uint64_t incarnation = 0,
      const MemoryLimits& limits = MemoryLimits());
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const { return name_; }
  const std::string& device_type() const { return device_type_; }
  // Non-zero; fixed for the Device's lifetime.
  uint64_t incarnation() const { return incarnation_; }
  ResourceMgr* resource_manager() { return &resource_mgr_; }
  // Runs `fn` on the device's inter-op pool. Never blocks.
  void Schedule(std::function<void()> fn) { pool_->Schedule(std::move(fn)); }
  // Threads of each pool.
  int num_threads() const { return pool_->NumThreads(); }
  const Eigen::ThreadPoolDevice& eigen_cpu_device() const {
    return *eigen_device_;
  }
  // The budget of every tensor this device's graphs make (see above).
  MemoryBudget* memory_budget() const { return memory_budget_.get(); }
  // The limit of each step's budget: the device's own, else the process
  // default at the time of the call.
  int64_t step_memory_limit() const {
    return step_limit_ > 0 ? step_limit_ : DefaultStepMemoryLimit();
  }

 private:
  const std::string name_;
  const std::string device_type_ = "CPU";
  const uint64_t incarnation_;
  const int64_t step_limit_;  // 0: the process default.
  // Referenced by the buffers charged to it, so it outlives the device
  // while they do.
  const MemoryBudget::Ptr memory_budget_;
  ResourceMgr resource_mgr_;
  std::unique_ptr<Eigen::ThreadPool> pool_;           // Inter-op: nodes.
  std::unique_ptr<Eigen::ThreadPool> intra_op_pool_;  // Kernels' pieces.
  std::unique_ptr<Eigen::ThreadPoolDevice> eigen_device_;
};

}  // namespace cohort

#endif  // COHORT_GRAPH_DEVICE_H_
