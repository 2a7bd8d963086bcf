// A C++ gang job: every task of `cohort launch` runs this program.
//
//   cohort launch -n 4 -- build/bin/barrier_gang_job
//
// Each task learns its place in the gang, does its share of the "work",
// waits for the others at a barrier, then exchanges a message with every
// other task. Partition 0 prints what everybody reported.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/barrier/barrier_task_context.h"

int main() {
  using cohort::barrier::BarrierTaskContext;
  absl::StatusOr<BarrierTaskContext*> ctx = BarrierTaskContext::Get();
  if (!ctx.ok()) {
    std::cerr << ctx.status().message() << std::endl;
    return 1;
  }
  BarrierTaskContext& task = **ctx;
  std::cout << "partition " << task.partition_id() << " of " << task.num_tasks()
            << " (attempt " << task.attempt_number() << ") starting"
            << std::endl;

  // Phase 1: everybody finishes its setup before anybody goes on.
  if (absl::Status s = task.Barrier(); !s.ok()) {
    std::cerr << "barrier failed: " << s.message() << std::endl;
    return 1;
  }

  // Phase 2: share a result; the answer is ordered by partition id.
  const std::string mine = absl::StrCat(
      "partition ", task.partition_id(),
      " sum=", task.partition_id() * (task.partition_id() + 1) / 2);
  absl::StatusOr<std::vector<std::string>> all = task.AllGather(mine);
  if (!all.ok()) {
    std::cerr << "allGather failed: " << all.status().message() << std::endl;
    return 1;
  }
  if (static_cast<int>(all->size()) != task.num_tasks() ||
      (*all)[task.partition_id()] != mine) {
    std::cerr << "allGather returned an unexpected result" << std::endl;
    return 1;
  }
  if (task.partition_id() == 0) {
    for (const std::string& m : *all)
      std::cout << "gathered: " << m << std::endl;
    for (const auto& info : task.GetTaskInfos()) {
      std::cout << "task address: " << info.address << std::endl;
    }
  }
  std::cout << "partition " << task.partition_id() << " done" << std::endl;
  return 0;
}
