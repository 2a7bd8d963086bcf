// PhaseStats: where a process's training steps spend their time, phase by
// phase (issue 27: "measure the time a step spends in each phase").
//
// The runtime adds one sample per event it times: a kernel's Compute, a
// RecvTensor call, a tensor served to a peer, a partition's RunGraph, a
// master step. Each phase keeps a count, the summed duration and the
// summed bytes, process-wide. Recording is off until Enable(true) (a
// program's flag, e.g. train_ps --phase-stats), so a run that does not ask
// pays one relaxed atomic load per event.
//
// Phases overlap: a step's Recvs run while its kernels compute, and several
// steps run at once on a parameter server. Totals are therefore sums of
// each event's own duration, not slices of one wall-clock span; divide by
// the number of steps for "per step" figures (Summary does).
//
//   PhaseStats::Enable(true);
//   ... train ...
//   std::cout << PhaseStats::Summary(local_steps);
//
// Thread safety: thread-safe (atomics; Add never blocks).
#ifndef COHORT_BASE_PHASE_STATS_H_
#define COHORT_BASE_PHASE_STATS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace cohort {

enum class Phase : int {
  // A master's step (MasterSession::Run/RunCallable), start to answer.
  kMasterStep = 0,
  // One partition's RunGraph executed on this task (the executor's Run).
  kRunGraph,
  // The master's wait for other tasks' partitions after its own finished.
  kRemotePartitionsWait,
  // A synchronous kernel's Compute (every op but the asynchronous Recv).
  kKernelCompute,
  // A RecvTensor this task issued, from the call to its answer; bytes: the
  // tensor's.
  kRecvTensorCall,
  // A RecvTensor a peer asked of this task: from the request's arrival to
  // the tensor being ready here (the producer's Send).
  kServeWait,
  // From the tensor being ready to the last byte handed to the kernel;
  // bytes: the tensor's.
  kServeWrite,
  kNumPhases,
};

// "master_step", "run_graph", ... (the names Summary prints).
const char* PhaseName(Phase phase);

class PhaseStats {
 public:
  struct Totals {
    int64_t count = 0;
    int64_t nanos = 0;
    int64_t bytes = 0;
  };

  static bool enabled();
  static void Enable(bool on);
  // The clock events are timed with where the caller has no Env of its own
  // (Env::Default()'s; durations only, never a decision).
  static absl::Time Now();
  // Records one event; a no-op while disabled.
  static void Add(Phase phase, absl::Duration elapsed, int64_t bytes = 0);
  static Totals Get(Phase phase);
  // Zeroes every phase (the enabled flag stays).
  static void Reset();
  // One line per phase that has events: "phase count/step ms/step MB/step
  // mean-ms", per `steps` (clamped to >= 1).
  static std::string Summary(int64_t steps);
};

}  // namespace cohort

#endif  // COHORT_BASE_PHASE_STATS_H_
