#include "cohort/runtime/worker_interface.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cohort/runtime/worker_tensor_coding.h"

namespace cohort::runtime {

void WorkerInterface::RecvTensorValueAsync(CallOptions* opts,
                                           const RecvTensorRequest* request,
                                           RecvTensorValue* value,
                                           StatusCallback done) {
  auto response = std::make_shared<RecvTensorResponse>();
  RecvTensorAsync(
      opts, request, response.get(),
      [request, value, response, done = std::move(done)](absl::Status s) {
        if (s.ok()) {
          absl::StatusOr<Tensor> t = DecodeWireTensor(
              response->tensor(),
              absl::StrCat("RecvTensor '", request->rendezvous_key(), "'"));
          if (t.ok()) {
            value->tensor = *std::move(t);
            value->is_dead = response->is_dead();
            value->send_start_micros = response->send_start_micros();
          } else {
            s = t.status();
          }
        }
        done(s);
      });
}

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
