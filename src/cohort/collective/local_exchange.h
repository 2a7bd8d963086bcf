// LocalExchange: the Exchange (collective_group.h) of members that are
// threads of one process, for tests, benchmarks and single-process jobs.
//
//   LocalExchange exchange(2);
//   // thread r:
//   auto group = CollectiveGroup::Create(options_r, exchange.For(r));
//
// Thread safety: thread-safe; the object must outlive every Exchange made
// from it.
#ifndef COHORT_COLLECTIVE_LOCAL_EXCHANGE_H_
#define COHORT_COLLECTIVE_LOCAL_EXCHANGE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cohort/collective/collective_group.h"

namespace cohort::collective {

class LocalExchange {
 public:
  explicit LocalExchange(int size) : size_(size) {}

  // Member `rank`'s Exchange: round k returns once every member handed its
  // string for round k; DeadlineExceeded naming the round otherwise.
  Exchange For(int rank);

 private:
  const int size_;
  absl::Mutex mu_;
  std::map<int, std::vector<std::string>> rounds_ ABSL_GUARDED_BY(mu_);
  std::map<int, int> arrived_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::collective

#endif  // COHORT_COLLECTIVE_LOCAL_EXCHANGE_H_
