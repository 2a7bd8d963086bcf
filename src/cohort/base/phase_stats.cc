#include "cohort/base/phase_stats.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_format.h"
#include "cohort/base/env.h"

namespace cohort {
namespace {

constexpr int kNumPhases = static_cast<int>(Phase::kNumPhases);

struct Counters {
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> nanos{0};
  std::atomic<int64_t> bytes{0};
};

std::atomic<bool> enabled_flag{false};
// Constant-initialised: usable from any thread before and after main.
Counters counters[kNumPhases];

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kMasterStep:
      return "master_step";
    case Phase::kRunGraph:
      return "run_graph";
    case Phase::kRemotePartitionsWait:
      return "remote_partitions_wait";
    case Phase::kKernelCompute:
      return "kernel_compute";
    case Phase::kRecvTensorCall:
      return "recv_tensor_call";
    case Phase::kServeWait:
      return "serve_wait";
    case Phase::kServeWrite:
      return "serve_write";
    case Phase::kNumPhases:
      break;
  }
  return "unknown";
}

bool PhaseStats::enabled() {
  return enabled_flag.load(std::memory_order_relaxed);
}

void PhaseStats::Enable(bool on) {
  enabled_flag.store(on, std::memory_order_relaxed);
}

absl::Time PhaseStats::Now() { return Env::Default()->Now(); }

void PhaseStats::Add(Phase phase, absl::Duration elapsed, int64_t bytes) {
  const int i = static_cast<int>(phase);
  if (!enabled() || i < 0 || i >= kNumPhases) return;
  Counters& c = counters[i];
  c.count.fetch_add(1, std::memory_order_relaxed);
  c.nanos.fetch_add(absl::ToInt64Nanoseconds(elapsed),
                    std::memory_order_relaxed);
  c.bytes.fetch_add(bytes, std::memory_order_relaxed);
}

PhaseStats::Totals PhaseStats::Get(Phase phase) {
  const int i = static_cast<int>(phase);
  Totals t;
  if (i < 0 || i >= kNumPhases) return t;
  t.count = counters[i].count.load(std::memory_order_relaxed);
  t.nanos = counters[i].nanos.load(std::memory_order_relaxed);
  t.bytes = counters[i].bytes.load(std::memory_order_relaxed);
  return t;
}

void PhaseStats::Reset() {
  for (Counters& c : counters) {
    c.count.store(0, std::memory_order_relaxed);
    c.nanos.store(0, std::memory_order_relaxed);
    c.bytes.store(0, std::memory_order_relaxed);
  }
}

std::string PhaseStats::Summary(int64_t steps) {
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  std::string out;
  for (int i = 0; i < kNumPhases; ++i) {
    const Totals t = Get(static_cast<Phase>(i));
    if (t.count == 0) continue;
    absl::StrAppendFormat(
        &out, "%-22s %8.2f/step %8.3f ms/step %8.3f MB/step %8.3f ms each\n",
        PhaseName(static_cast<Phase>(i)), t.count / n, t.nanos / 1e6 / n,
        t.bytes / 1e6 / n, t.nanos / 1e6 / t.count);
  }
  return out;
}

}  // namespace cohort
