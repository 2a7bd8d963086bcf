#include "cohort/coord/local_coordination_client.h"

#include <atomic>

namespace cohort::coord {
namespace {

// Calls `done` once: either from the handler or from a cancellation.
StatusCallback Once(StatusCallback done, CallCancellation* cancellation) {
  if (cancellation == nullptr) return done;
  auto fired = std::make_shared<std::atomic<bool>>(false);
  auto shared = std::make_shared<StatusCallback>(std::move(done));
  cancellation->SetCanceller([fired, shared] {
    if (!fired->exchange(true)) {
      (*shared)(absl::CancelledError("call cancelled by the caller"));
    }
  });
  return [fired, shared](absl::Status s) {
    if (!fired->exchange(true)) (*shared)(std::move(s));
  };
}

}  // namespace

LocalCoordinationClient::LocalCoordinationClient(CoordinationService* service)
    : handler_(service) {}

#define COHORT_COORD_LOCAL_IMPL_(Name)                          \
  void LocalCoordinationClient::Name##Async(                    \
      const Name##Request& request, Name##Response* response,   \
      const CallOptions& options, StatusCallback done) {        \
    handler_.Name(request, response,                            \
                  Once(std::move(done), options.cancellation)); \
  }
COHORT_COORDINATION_RPCS(COHORT_COORD_LOCAL_IMPL_)
#undef COHORT_COORD_LOCAL_IMPL_

}  // namespace cohort::coord
