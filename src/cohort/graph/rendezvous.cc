#include "cohort/graph/rendezvous.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"

namespace cohort {

std::string Rendezvous::CreateKey(absl::string_view src_device,
                                  uint64_t src_incarnation,
                                  absl::string_view dst_device,
                                  absl::string_view tensor_name,
                                  int64_t frame_id, int64_t iter_id) {
  return absl::StrFormat("%s;%016x;%s;%s;%d:%d", src_device, src_incarnation,
                         dst_device, tensor_name, frame_id, iter_id);
}

absl::StatusOr<Rendezvous::ParsedKey> Rendezvous::ParseKey(
    absl::string_view key) {
  std::vector<absl::string_view> parts = absl::StrSplit(key, ';');
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid rendezvous key '", key, "': ", why,
        "; expected src_device;incarnation;dst_device;tensor_name;frame:iter"));
  };
  if (parts.size() != 5) return bad("needs 5 ';'-separated parts");
  ParsedKey k;
  k.full_key = std::string(key);
  k.src_device = std::string(parts[0]);
  if (!absl::SimpleHexAtoi(parts[1], &k.src_incarnation)) {
    return bad("incarnation is not hex");
  }
  k.dst_device = std::string(parts[2]);
  k.edge_name = std::string(parts[3]);
  if (k.src_device.empty() || k.dst_device.empty() || k.edge_name.empty()) {
    return bad("empty device or tensor name");
  }
  std::vector<absl::string_view> fi = absl::StrSplit(parts[4], ':');
  if (fi.size() != 2 || !absl::SimpleAtoi(fi[0], &k.frame_id) ||
      !absl::SimpleAtoi(fi[1], &k.iter_id)) {
    return bad("frame:iter is not two integers");
  }
  return k;
}

absl::Status Rendezvous::Recv(const ParsedKey& key, Tensor* value,
                              absl::Time deadline) {
  struct State {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
    Tensor value ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  RecvAsync(key, [state](const absl::Status& s, const Tensor& v) {
    absl::MutexLock lock(&state->mu);
    state->status = s;
    state->value = v;
    state->done = true;
  });
  absl::MutexLock lock(&state->mu);
  if (!state->mu.AwaitWithDeadline(absl::Condition(&state->done), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "timed out waiting for tensor '", key.edge_name, "' from ",
        key.src_device, " (rendezvous key ", key.full_key,
        "); check that the sending task is running the matching step"));
  }
  if (state->status.ok()) *value = state->value;
  return state->status;
}

absl::Status LocalRendezvous::Send(const ParsedKey& key, const Tensor& value) {
  // A local receiver does not ask when the tensor was sent.
  return table_.Send(key.full_key, key.edge_name, value, absl::Time());
}

void LocalRendezvous::RecvAsync(const ParsedKey& key, DoneCallback done) {
  table_.Recv(key.full_key, key.edge_name, std::move(done));
}

void LocalRendezvous::StartAbort(const absl::Status& status) {
  table_.Abort(status);
}

}  // namespace cohort
