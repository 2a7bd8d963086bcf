#include "cohort/barrier/barrier_framed_handler.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cohort/barrier.pb.h"
#include "cohort/barrier/barrier_sync_proto.h"

namespace cohort::barrier {

void BarrierFramedHandler::OnRequest(
    const std::shared_ptr<rpc::FramedConnection>& c, std::string bytes) {
  cohort::BarrierSyncRequest proto;
  if (!proto.ParseFromString(bytes)) {
    c->Close(absl::StrCat("sent ", bytes.size(),
                          " bytes that are not a BarrierSyncRequest"));
    return;
  }
  absl::StatusOr<SyncRequest> request = SyncRequestFromProto(std::move(proto));
  if (!request.ok()) {
    c->Reply(request.status().code(), request.status().message());
    return;
  }
  const uint64_t id = coordinator_->NewRequestId();
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = parked_.try_emplace(c->id(), id);
    if (!inserted) {
      // The protocol allows one sync in flight per connection; a second one
      // means a broken or hostile client.
      c->Close("sent a second sync request while one was waiting");
      return;
    }
  }
  std::shared_ptr<rpc::FramedConnection> conn = c;
  coordinator_->Sync(
      id, *std::move(request),
      [this, conn, id](absl::StatusOr<SyncResult> result) {
        {
          absl::MutexLock lock(&mu_);
          auto it = parked_.find(conn->id());
          if (it != parked_.end() && it->second == id) parked_.erase(it);
        }
        if (!result.ok()) {
          conn->Reply(result.status().code(), result.status().message());
          return;
        }
        cohort::BarrierSyncResponse response;
        for (std::string& m : *result) response.add_messages(std::move(m));
        conn->Reply(absl::StatusCode::kOk, response.SerializeAsString());
      });
}

void BarrierFramedHandler::OnClose(
    const std::shared_ptr<rpc::FramedConnection>& c) {
  uint64_t parked = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = parked_.find(c->id());
    if (it == parked_.end()) return;
    parked = it->second;
    parked_.erase(it);
  }
  // The task went away: its request leaves the sync.
  coordinator_->Cancel(parked);
}

}  // namespace cohort::barrier
