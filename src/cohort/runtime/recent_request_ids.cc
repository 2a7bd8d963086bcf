#include "cohort/runtime/recent_request_ids.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace cohort::runtime {
namespace {

// A RunGraph or RecvTensor request can carry up to a gigabyte of tensor
// bytes, and printing it whole (then cutting) would build that string on a
// request thread. The message only has to let a reader recognise the
// request: its type and its singular scalar and short string fields
// (handles, step id, key, request id); repeated and message fields, which
// hold the tensors, are left out.
constexpr size_t kMaxRequestTextChars = 512;
constexpr size_t kMaxFieldChars = 128;

std::string ShortRequestText(const google::protobuf::Message& request) {
  const google::protobuf::Descriptor* d = request.GetDescriptor();
  const google::protobuf::Reflection* r = request.GetReflection();
  std::string text = d->name();
  text += " {";
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated() ||
        f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
        !r->HasField(request, f)) {
      continue;
    }
    std::string value;
    google::protobuf::TextFormat::PrintFieldValueToString(request, f, -1,
                                                          &value);
    if (value.size() > kMaxFieldChars) {
      value.resize(kMaxFieldChars);
      value += "...";
    }
    absl::StrAppend(&text, " ", f->name(), ": ", value);
    if (text.size() > kMaxRequestTextChars) break;
  }
  text += " }";
  return text;
}

}  // namespace

RecentRequestIds::RecentRequestIds(int num_tracked, int num_shards)
    : per_shard_(static_cast<size_t>(
          (std::max(num_tracked, 1) + std::max(num_shards, 1) - 1) /
          std::max(num_shards, 1))) {
  const int n = std::max(num_shards, 1);
  shards_.reserve(n);
  for (int i = 0; i < n; ++i) shards_.push_back(std::make_unique<Shard>());
}

bool RecentRequestIds::Insert(int64_t request_id) {
  // The shard is picked from the unsigned value so negative ids (the wire
  // type is int64) land in a valid shard too.
  Shard& shard = *shards_[static_cast<uint64_t>(request_id) % shards_.size()];
  absl::MutexLock lock(&shard.mu);
  if (!shard.ids.insert(request_id).second) return false;
  shard.order.push_back(request_id);
  // FIFO, not LRU: TensorFlow's window evicts the oldest arrival, so a
  // client retrying forever cannot pin its id.
  if (shard.order.size() > per_shard_) {
    shard.ids.erase(shard.order.front());
    shard.order.pop_front();
  }
  return true;
}

absl::Status RecentRequestIds::TrackUnique(
    int64_t request_id, absl::string_view method_name,
    const google::protobuf::Message& request) {
  // 0 means "the caller does not de-duplicate" (older clients).
  if (request_id == 0) return absl::OkStatus();
  if (Insert(request_id)) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("The same ", method_name,
                                         " request was received twice. ",
                                         ShortRequestText(request)));
}

}  // namespace cohort::runtime
