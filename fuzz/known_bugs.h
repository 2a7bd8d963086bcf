// Filters for input classes that hit project bugs the fuzzers already found
// (reproducers and diagnoses in fuzz/crashes-found/<fuzzer>/README.md), so
// a fuzzer keeps looking for new bugs instead of re-finding a known one
// every few seconds. Set COHORT_FUZZ_KNOWN_BUGS=1 to turn every filter off,
// e.g. to check a fix against the reproducers:
//   COHORT_FUZZ_KNOWN_BUGS=1 build-fuzz/bin/fuzz_checkpoint \
//       fuzz/crashes-found/checkpoint/*
// Remove a filter together with the fix of its bug. Filters that need a
// library live next to it (tensor_known_bugs.h for cohort_graph).
//
// Thread safety: thread-safe.
#ifndef COHORT_FUZZ_KNOWN_BUGS_H_
#define COHORT_FUZZ_KNOWN_BUGS_H_

#include <cstdlib>

namespace cohort::fuzz {

// False when COHORT_FUZZ_KNOWN_BUGS is set.
inline bool SkipKnownBugs() {
  static const bool skip = std::getenv("COHORT_FUZZ_KNOWN_BUGS") == nullptr;
  return skip;
}

}  // namespace cohort::fuzz

#endif  // COHORT_FUZZ_KNOWN_BUGS_H_
