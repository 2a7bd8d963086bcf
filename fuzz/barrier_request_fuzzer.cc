// Fuzzes what a barrier task sends the coordinator (both transports hand a
// cohort.BarrierSyncRequest to SyncRequestFromProto and then to
// BarrierCoordinator::Sync): bytes parsed as the proto, converted, and joined
// to a real coordinator's gangs.
//
// Input: byte 0 holds flags, byte 1 more flags, the rest is the serialized
// request.
//   bit 0    normalise: point the request at an open gang (stage, attempt,
//            num_tasks, current epoch, partition in range), so it is
//            accepted and the fuzzer reaches the sync logic;
//   bit 1    with bit 0: the 1-task gang instead of the 4-task one;
//   bits 2-3 send 0..3 more copies with the next partition ids (4 copies
//            complete a sync of the 4-task gang);
//   bit 4    the last copy uses the other method (a mixed sync);
//   bit 5    ClearStage after the first request;
//   bit 6    repeat the whole batch once (the next epoch);
//   bit 7    cancel the first request before the copies.
// byte 1:
//   bit 0    before the cancels, move the clock past the sync timeout and
//            wait until the coordinator's timer thread has failed the
//            pending syncs (DeadlineExceeded naming the missing partitions).
// Every request is cancelled at the end, and the gangs are reopened for each
// input, so no state carries over between inputs (one coordinator, built
// once, serves them all).
//
// Checked: no crash and no allocation sized by the request (num_tasks,
// partition ids and epochs come from the peer; libFuzzer's malloc limit
// catches a large allocation); every `done` runs exactly once, with a code
// the header lists for what the input did; a completed sync answers num_tasks
// messages in partition order; nothing stays pending after Cancel.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/barrier.pb.h"
#include "cohort/barrier/barrier_coordinator.h"
#include "cohort/barrier/barrier_sync_proto.h"
#include "cohort/base/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "settling_env.h"

namespace {

using cohort::barrier::BarrierCoordinator;
using cohort::barrier::SyncMethod;
using cohort::barrier::SyncRequest;
using cohort::barrier::SyncResult;

struct GangId {
  int64_t stage_id;
  int stage_attempt;
  int num_tasks;
};
// The launcher opens gangs; a request never does. Stage 0 attempt 0 is what
// `cohort launch` uses; the 1-task gang completes a sync on every request.
constexpr GangId kGangs[] = {{0, 0, 4}, {5, 1, 1}};
// Small, so the fuzzer reaches the max_sync_bytes refusal with short inputs.
constexpr size_t kMaxSyncBytes = 256;

// Sync timeout of the coordinator.
constexpr absl::Duration kSyncTimeout = absl::Seconds(60);

// Built once: the coordinator starts a timer thread. Its clock moves only
// when an input asks, so otherwise no sync times out and every `done` runs
// on the calling thread.
struct Harness {
  cohort::fuzz::SettlingEnv env;
  BarrierCoordinator coordinator{&env, kSyncTimeout, kMaxSyncBytes};
};

Harness& GetHarness() {
  static Harness* const harness = new Harness;  // never destroyed
  return *harness;
}

struct Call {
  uint64_t id = 0;
  SyncRequest request;  // as sent
  std::atomic<int> calls{0};
  std::optional<absl::StatusOr<SyncResult>> result;
};

bool IsListedCode(absl::StatusCode code, bool timed_out) {
  switch (code) {
    case absl::StatusCode::kDeadlineExceeded:  // the sync timed out
      return timed_out;
    case absl::StatusCode::kNotFound:         // gang not open
    case absl::StatusCode::kInvalidArgument:  // partition, num_tasks, mix, cap
    case absl::StatusCode::kFailedPrecondition:  // stale epoch, duplicate
    case absl::StatusCode::kAborted:             // state cleared / stopped
    case absl::StatusCode::kCancelled:           // Cancel()
      return true;
    default:  // Unavailable: the coordinator never shuts down here
      return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Keeps stderr for libFuzzer's own output.
  cohort::SetMinLogLevel(cohort::LogLevel::kError);
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const bool time_out = data[1] & 1;
  cohort::BarrierSyncRequest proto;
  if (!proto.ParseFromArray(data + 2, static_cast<int>(size - 2))) return 0;
  const int32_t proto_partition = proto.partition_id();
  const cohort::BarrierMethod proto_method = proto.method();
  absl::StatusOr<SyncRequest> converted =
      cohort::barrier::SyncRequestFromProto(std::move(proto));
  if (!converted.ok()) {
    COHORT_CHECK(converted.status().code() ==
                 absl::StatusCode::kInvalidArgument)
        << converted.status();
    COHORT_CHECK(proto_method != cohort::BARRIER &&
                 proto_method != cohort::ALL_GATHER);
    return 0;
  }
  COHORT_CHECK(converted->partition_id == proto_partition);

  BarrierCoordinator& coordinator = GetHarness().coordinator;
  for (const GangId& g : kGangs) {
    absl::Status opened =
        coordinator.OpenGang(g.stage_id, g.stage_attempt, g.num_tasks);
    COHORT_CHECK(opened.ok()) << opened;
  }

  const bool normalise = flags & 1;
  const GangId& gang = kGangs[(flags >> 1) & 1];
  const int copies = (flags >> 2) & 3;
  const bool mix = flags & 16;
  const bool clear = flags & 32;
  const int rounds = (flags & 64) ? 2 : 1;
  const bool cancel_first = flags & 128;

  std::deque<Call> calls;  // stable addresses for the callbacks
  auto send = [&](SyncRequest request) {
    Call& call = calls.emplace_back();
    call.id = coordinator.NewRequestId();
    call.request = request;
    coordinator.Sync(call.id, std::move(request),
                     [&call](absl::StatusOr<SyncResult> result) {
                       call.result = std::move(result);
                       call.calls.fetch_add(1);
                     });
  };

  for (int round = 0; round < rounds; ++round) {
    SyncRequest base = *converted;
    if (normalise) {
      base.stage_id = gang.stage_id;
      base.stage_attempt = gang.stage_attempt;
      base.num_tasks = gang.num_tasks;
      auto snapshot = coordinator.Snapshot(gang.stage_id, gang.stage_attempt);
      COHORT_CHECK(snapshot.has_value());
      base.barrier_epoch = snapshot->epoch;
      base.partition_id = static_cast<int>(
          (static_cast<int64_t>(base.partition_id) % gang.num_tasks +
           gang.num_tasks) %
          gang.num_tasks);
    }
    send(base);
    if (clear) {
      coordinator.ClearStage(base.stage_id, base.stage_attempt, "fuzz");
    }
    if (cancel_first) coordinator.Cancel(calls.back().id);
    for (int k = 1; k <= copies; ++k) {
      SyncRequest copy = base;
      if (base.num_tasks > 0) {
        copy.partition_id = static_cast<int>(
            (static_cast<int64_t>(base.partition_id) + k) % base.num_tasks);
      }
      if (mix && k == copies) {
        copy.method = base.method == SyncMethod::kBarrier
                          ? SyncMethod::kAllGather
                          : SyncMethod::kBarrier;
      }
      send(std::move(copy));
    }
  }

  if (time_out) {
    GetHarness().env.AdvanceAndSettle(kSyncTimeout + absl::Seconds(1));
  }
  // Withdraw whatever still waits, as a transport does when its peer goes.
  for (const Call& call : calls) coordinator.Cancel(call.id);
  for (const GangId& g : kGangs) {
    auto snapshot = coordinator.Snapshot(g.stage_id, g.stage_attempt);
    COHORT_CHECK(snapshot.has_value());
    COHORT_CHECK(snapshot->waiting.empty())
        << snapshot->waiting.size() << " request(s) still pending in stage "
        << g.stage_id << " after Cancel";
  }

  for (const Call& call : calls) {
    COHORT_CHECK(call.calls.load() == 1)
        << "done ran " << call.calls.load() << " times for request " << call.id;
    const absl::StatusOr<SyncResult>& result = *call.result;
    if (!result.ok()) {
      COHORT_CHECK(IsListedCode(result.status().code(), time_out))
          << result.status();
      continue;
    }
    // Only an open gang's full sync answers; it answers every partition.
    const GangId* owner = nullptr;
    for (const GangId& g : kGangs) {
      if (g.stage_id == call.request.stage_id &&
          g.stage_attempt == call.request.stage_attempt) {
        owner = &g;
      }
    }
    COHORT_CHECK(owner != nullptr);
    COHORT_CHECK(static_cast<int>(result->size()) == owner->num_tasks);
    COHORT_CHECK((*result)[call.request.partition_id] == call.request.message);
  }

  for (const GangId& g : kGangs) {
    coordinator.CloseGang(g.stage_id, g.stage_attempt, "fuzz input done");
  }
  return 0;
}
