// SessionFactory: how the training stack opens a Session on a master
// target, so creators and MonitoredTrainingSession run on this process or on
// a cluster alike, and tests can inject fakes.
//
//   ""  or "local"       LocalSession in this process
//   "grpc://host:port"   runtime::GrpcSession through that task's master,
//                        with the job token from COHORT_JOB_TOKEN (read
//                        through the Env)
//   anything else        InvalidArgument naming the target
//
// ConfigProto: operation_timeout_in_ms becomes the session's default step
// deadline; intra_op_parallelism_threads the local device's threads.
//
// Thread safety: the default factory is thread-safe.
#ifndef COHORT_TRAINING_SESSION_FACTORY_H_
#define COHORT_TRAINING_SESSION_FACTORY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cohort/config.pb.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/session.h"

namespace cohort {
class Env;
}

namespace cohort::training {

// Errors: those of creating the session (InvalidArgument for a bad graph;
// Unavailable for an unreachable master).
using SessionFactory = std::function<absl::StatusOr<std::unique_ptr<Session>>(
    const std::string& master, const GraphDef& graph,
    const ConfigProto& config)>;

// `env` (null = Env::Default()) supplies COHORT_JOB_TOKEN.
SessionFactory DefaultSessionFactory(Env* env = nullptr);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_SESSION_FACTORY_H_
