// The commands that run until interrupted (`cohort launch`, `coordinator`,
// `server`, `ui`) take SIGINT and SIGTERM with sigwait on one thread rather
// than with a handler (a handler runs on whichever thread the kernel picks;
// under ThreadSanitizer it waits until that thread next enters the runtime,
// which a thread parked in a futex may never do).
#ifndef COHORT_TOOLS_COHORT_STOP_SIGNALS_H_
#define COHORT_TOOLS_COHORT_STOP_SIGNALS_H_

#include <signal.h>

namespace cohort::tools {

// Blocks SIGINT and SIGTERM in the calling thread, and so in every thread
// it starts afterwards: call it before any thread starts (gRPC's too).
// Returns the set, for sigwait; `old` (may be null) gets the mask before.
inline sigset_t BlockStopSignals(sigset_t* old = nullptr) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, old);
  return signals;
}

}  // namespace cohort::tools

#endif  // COHORT_TOOLS_COHORT_STOP_SIGNALS_H_
