// RecentRequestIds: refuses a request id seen recently, so that a retried
// non-idempotent RPC (RunStep, RunGraph, RecvTensor, ...) is not executed
// twice (docs/runtime.md).
//
//   RecentRequestIds ids(100000);
//   COHORT_RETURN_IF_ERROR(
//       ids.TrackUnique(req.request_id(), "RunGraph (Worker)", req));
//
// Contract:
//  - A window of the last `num_tracked` distinct non-zero ids, evicted in
//    arrival order (FIFO): seeing an id again does not refresh it.
//  - Id 0 is never checked (callers that do not dedup send 0).
//  - The ids are split into `num_shards` shards by `id % num_shards`, each
//    holding num_tracked / num_shards of them (rounded up), so concurrent
//    callers rarely share a lock.
//
// TrackUnique errors:
//  - Aborted `The same <method> request was received twice. <request>`
//    where <request> is the request's ShortDebugString (cut at 512
//    characters with "..."); the id stays tracked.
//
// Thread safety: thread-safe; calls take one shard's short lock.
#ifndef COHORT_RUNTIME_RECENT_REQUEST_IDS_H_
#define COHORT_RUNTIME_RECENT_REQUEST_IDS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/message.h"

namespace cohort::runtime {

class RecentRequestIds {
 public:
  explicit RecentRequestIds(int num_tracked, int num_shards = 1);
  RecentRequestIds(const RecentRequestIds&) = delete;
  RecentRequestIds& operator=(const RecentRequestIds&) = delete;

  // OK and remembers `request_id` when it is 0 or new; Aborted (see above)
  // when it is in the window. Never blocks beyond the shard lock.
  absl::Status TrackUnique(int64_t request_id, absl::string_view method_name,
                           const google::protobuf::Message& request);

 private:
  struct Shard {
    absl::Mutex mu;
    std::deque<int64_t> order ABSL_GUARDED_BY(mu);
    absl::flat_hash_set<int64_t> ids ABSL_GUARDED_BY(mu);
  };
  // True when the id was new.
  bool Insert(int64_t request_id);

  const size_t per_shard_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_RECENT_REQUEST_IDS_H_
