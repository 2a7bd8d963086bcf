#include "cohort/training/session_creator.h"

#include <utility>

#include "cohort/base/status.h"
#include "cohort/training/session_manager.h"

namespace cohort::training {
namespace {

absl::StatusOr<SessionManager> MakeManager(Scaffold* scaffold,
                                           const Scope& graph,
                                           const SessionCreatorOptions& o) {
  COHORT_RETURN_IF_ERROR(scaffold->Finalize(graph));
  GraphDef def;
  COHORT_RETURN_IF_ERROR(graph.ToGraphDef(&def));
  SessionManagerOptions m;
  m.ready_op = scaffold->ready_op;
  m.ready_for_local_init_op = scaffold->ready_for_local_init_op;
  m.local_init_op = scaffold->local_init_op;
  m.recovery_wait = o.recovery_wait;
  m.env = o.env;
  m.factory = o.factory;
  return SessionManager(std::move(def), std::move(m));
}

}  // namespace

ChiefSessionCreator::ChiefSessionCreator(
    std::shared_ptr<Scaffold> scaffold, SessionCreatorOptions options,
    std::string checkpoint_dir, std::string checkpoint_filename_with_path)
    : scaffold_(scaffold != nullptr ? std::move(scaffold)
                                    : std::make_shared<Scaffold>()),
      options_(std::move(options)),
      checkpoint_dir_(std::move(checkpoint_dir)),
      checkpoint_filename_with_path_(std::move(checkpoint_filename_with_path)) {
}

absl::StatusOr<std::unique_ptr<Session>> ChiefSessionCreator::CreateSession(
    const Scope& graph) {
  COHORT_ASSIGN_OR_RETURN(SessionManager manager,
                          MakeManager(scaffold_.get(), graph, options_));
  PrepareSessionOptions p;
  p.init_op = scaffold_->init_op;
  p.init_fn = scaffold_->init_fn;
  p.saver = scaffold_->saver;
  p.checkpoint_dir = checkpoint_dir_;
  p.checkpoint_filename_with_path = checkpoint_filename_with_path_;
  return manager.PrepareSession(options_.master, options_.config, p);
}

WorkerSessionCreator::WorkerSessionCreator(std::shared_ptr<Scaffold> scaffold,
                                           SessionCreatorOptions options,
                                           absl::Duration max_wait)
    : scaffold_(scaffold != nullptr ? std::move(scaffold)
                                    : std::make_shared<Scaffold>()),
      options_(std::move(options)),
      max_wait_(max_wait) {}

absl::StatusOr<std::unique_ptr<Session>> WorkerSessionCreator::CreateSession(
    const Scope& graph) {
  COHORT_ASSIGN_OR_RETURN(SessionManager manager,
                          MakeManager(scaffold_.get(), graph, options_));
  return manager.WaitForSession(options_.master, options_.config, max_wait_);
}

}  // namespace cohort::training
