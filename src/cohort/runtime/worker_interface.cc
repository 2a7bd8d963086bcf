#include "cohort/runtime/worker_interface.h"

#include "absl/synchronization/notification.h"

namespace cohort::runtime {

absl::Status WaitFor(const std::function<void(StatusCallback done)>& call) {
  absl::Notification finished;
  absl::Status result;
  call([&](const absl::Status& status) {
    result = status;
    finished.Notify();
  });
  finished.WaitForNotification();
  return result;
}

}  // namespace cohort::runtime
