// `cohort task`: barrier execution mode from a shell. Any program started by
// `cohort launch` (a shell script, Python, ...) can synchronise its gang:
//
//   cohort task barrier            # wait for every task of the gang
//   cohort task allgather MSG      # prints ["msg of partition 0", ...]
//   cohort task info               # {"partition_id":1,"attempt_number":0,...}
//
// All three read the environment that `cohort launch` sets (see
// src/cohort/barrier/barrier_task_context.h) and exit non-zero with the
// coordinator's message on stderr when the sync fails.
#include <iostream>
#include <string>

#include "cohort/barrier/barrier_task_context.h"
#include "cohort/base/json.h"
#include "tools/cohort/commands.h"

namespace cohort::tools {
namespace {

int ReportError(const absl::Status& status) {
  std::cerr << "cohort task: " << status.message() << " ["
            << absl::StatusCodeToString(status.code()) << "]" << std::endl;
  return 1;
}

}  // namespace

void RegisterTaskCommand(CLI::App& app, int& exit_code) {
  CLI::App* task = app.add_subcommand(
      "task",
      "barrier execution mode for a task of `cohort launch`: barrier, "
      "allgather, info");
  task->require_subcommand(1);

  task->add_subcommand("barrier",
                       "wait until every task of the gang calls barrier")
      ->callback([&exit_code] {
        absl::StatusOr<barrier::BarrierTaskContext*> ctx =
            barrier::BarrierTaskContext::Get();
        if (!ctx.ok()) {
          exit_code = ReportError(ctx.status());
          return;
        }
        absl::Status status = (*ctx)->Barrier();
        if (!status.ok()) exit_code = ReportError(status);
      });

  auto message = std::make_shared<std::string>();
  CLI::App* allgather = task->add_subcommand(
      "allgather",
      "send MSG, wait for every task, print all messages as a JSON array "
      "ordered by partition id");
  allgather->add_option("MSG", *message, "this task's message")->required();
  allgather->callback([&exit_code, message] {
    absl::StatusOr<barrier::BarrierTaskContext*> ctx =
        barrier::BarrierTaskContext::Get();
    if (!ctx.ok()) {
      exit_code = ReportError(ctx.status());
      return;
    }
    absl::StatusOr<std::vector<std::string>> all = (*ctx)->AllGather(*message);
    if (!all.ok()) {
      exit_code = ReportError(all.status());
      return;
    }
    std::cout << JsonDump(Json(*all)) << std::endl;
  });

  task->add_subcommand("info",
                       "print this task's partition, attempt, gang size and "
                       "task addresses as one JSON object")
      ->callback([&exit_code] {
        absl::StatusOr<barrier::BarrierTaskContext*> ctx =
            barrier::BarrierTaskContext::Get();
        if (!ctx.ok()) {
          exit_code = ReportError(ctx.status());
          return;
        }
        Json infos = Json::array();
        for (const barrier::TaskInfo& info : (*ctx)->GetTaskInfos()) {
          infos.push_back(Json{{"address", info.address}});
        }
        Json out{{"partition_id", (*ctx)->partition_id()},
                 {"attempt_number", (*ctx)->attempt_number()},
                 {"num_tasks", (*ctx)->num_tasks()},
                 {"task_infos", infos}};
        std::cout << JsonDump(out) << std::endl;
      });
}

}  // namespace cohort::tools
