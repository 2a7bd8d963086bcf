#include "cohort/coord/coordination_client.h"

#include "absl/synchronization/notification.h"

namespace cohort::coord {

void CallCancellation::Cancel() {
  std::function<void()> canceller;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    canceller = std::move(canceller_);
  }
  if (canceller) canceller();
}

void CallCancellation::SetCanceller(std::function<void()> canceller) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      canceller_ = std::move(canceller);
      return;
    }
  }
  canceller();
}

bool CallCancellation::cancelled() {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

#define COHORT_COORD_CLIENT_SYNC_IMPL_(Name)                          \
  absl::Status CoordinationClient::Name(const Name##Request& request, \
                                        Name##Response* response,     \
                                        const CallOptions& options) { \
    absl::Notification done;                                          \
    absl::Status status;                                              \
    Name##Async(request, response, options, [&](absl::Status s) {     \
      status = std::move(s);                                          \
      done.Notify();                                                  \
    });                                                               \
    done.WaitForNotification();                                       \
    return status;                                                    \
  }
COHORT_COORDINATION_RPCS(COHORT_COORD_CLIENT_SYNC_IMPL_)
#undef COHORT_COORD_CLIENT_SYNC_IMPL_

}  // namespace cohort::coord
