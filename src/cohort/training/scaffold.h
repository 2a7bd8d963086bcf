// Scaffold: the pieces that turn a graph into a ready training session
// (TensorFlow's tf.train.Scaffold): how to initialise the model, how to
// tell it is ready, and the Saver.
//
// Fields name graph nodes ("init") or tensors ("report_uninitialized:0");
// empty means "use the default" until Finalize, which fills:
//   init_op   a NoOp running every variable initializer of the graph
//             (Scope::Initializers, as ops::GlobalVariablesInitializer)
//   ready_op  a ReportUninitializedVariables over every variable, fed by one
//             VarIsInitializedOp per variable (each colocated with its
//             variable, so variables may live on different ps tasks)
//   saver     a training::Saver over every variable
// ready_for_local_init_op and local_init_op stay empty unless given (cohort
// has no local variables); init_fn is optional.
//
// Thread safety: thread-compatible; Finalize builds into the graph
// (single-threaded, as builder.h) and is idempotent.
#ifndef COHORT_TRAINING_SCAFFOLD_H_
#define COHORT_TRAINING_SCAFFOLD_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/session.h"
#include "cohort/training/saver.h"

namespace cohort::training {

struct Scaffold {
  std::string init_op;                  // node run as a target
  std::string ready_op;                 // 1-D string tensor; empty = ready
  std::string ready_for_local_init_op;  // 1-D string tensor
  std::string local_init_op;            // node run as a target
  std::shared_ptr<Saver> saver;
  // Run after init_op when the model was not restored.
  std::function<absl::Status(Session*)> init_fn;
  SaverOptions saver_options;  // for the default saver

  // Fills the defaults above into `graph`'s graph. Errors: the graph's.
  absl::Status Finalize(const Scope& graph);
  bool finalized() const { return finalized_; }

 private:
  bool finalized_ = false;
};

}  // namespace cohort::training

#endif  // COHORT_TRAINING_SCAFFOLD_H_
