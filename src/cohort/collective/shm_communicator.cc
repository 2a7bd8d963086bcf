#include "cohort/collective/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/status.h"
#include "cohort/collective/call_desc.h"
#include "cohort/collective/reduce.h"
#include "cohort/rpc/frame.h"
#include "cohort/rpc/socket.h"

namespace cohort::collective {

// "cohortCL": marks a segment as ours.
constexpr uint64_t kMagic = 0x4c4374726f686f63ULL;
constexpr size_t kDataAlign = 4096;

// The head of the segment. Fields written by one member and read by others
// are atomics, or plain fields published by a barrier (the barrier's
// release/acquire orders them).
struct ShmCommunicator::Control {
  uint64_t magic;
  uint32_t size;
  uint32_t reserved;
  uint64_t slot_bytes;
  // The barrier: members add to `arrived`; the last one resets it and bumps
  // `generation`, the futex word the others sleep on.
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
  // 0: fine; 1: a member is writing `failure`; 2: `failure` is published.
  alignas(64) std::atomic<uint32_t> failed;
  char failure[512];
  struct alignas(64) Member {
    std::atomic<int32_t> pid;        // 0 until it attached
    std::atomic<uint32_t> barriers;  // barriers it entered
    std::atomic<uint32_t> left;      // 1 once it unmapped the segment
    CallDesc desc[2];                // its current call, by parity
  } members[kMaxShmMembers];
};

namespace {

// How long a waiting member sleeps before it looks again at its peers'
// processes: a lost member is known within this (an elastic gang re-forms
// then), for one kill(pid, 0) per member per wake.
constexpr absl::Duration kLivenessPoll = absl::Milliseconds(10);

int FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
              absl::Duration timeout) {
  timespec ts = absl::ToTimespec(timeout);
  return static_cast<int>(syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
                                  FUTEX_WAIT, expected, &ts, nullptr, 0));
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX,
          nullptr, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// [lo, hi) of part q of a round of `len` elements split over n members;
// parts start on 16-element boundaries so each reduction loop is aligned.
void PartOf(int q, int n, size_t len, size_t* lo, size_t* hi) {
  size_t part = ((len + n - 1) / n + 15) & ~size_t{15};
  *lo = std::min(len, part * q);
  *hi = std::min(len, part * (q + 1));
}

}  // namespace

size_t ShmCommunicator::DataOffset() {
  return (sizeof(Control) + kDataAlign - 1) & ~(kDataAlign - 1);
}

size_t ShmCommunicator::SegmentBytes(int size, size_t slot_bytes) {
  return DataOffset() + 2 * static_cast<size_t>(size) * slot_bytes;
}

absl::StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::Create(
    ShmOptions options) {
  const int n = static_cast<int>(options.tasks.size());
  if (n < 1 || n > kMaxShmMembers || options.rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective group '", options.group,
        "': a shared-memory segment is created by rank 0 of 1 to ",
        kMaxShmMembers, " members (got rank ", options.rank, " of ", n, ")"));
  }
  // Slots hold whole 16-element parts of float64 and stay cache-aligned.
  options.slot_bytes =
      std::max<size_t>(4096, options.slot_bytes & ~size_t{127});
  const size_t bytes = SegmentBytes(n, options.slot_bytes);
  // 128 random bits: no other user can guess the name while it exists, and
  // O_EXCL refuses a name someone planted.
  std::string name =
      absl::StrCat("/cohort-collective-",
                   absl::BytesToHexString(rpc::RandomNonce().substr(0, 16)));
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return rpc::SocketError("shm_open(" + name + ")", errno, options.group);
  }
  rpc::UniqueFd owned(fd);
  // Reserve the pages now: a sparse file on a full /dev/shm would kill the
  // first process that touches a missing page (SIGBUS) instead of failing
  // here with an error.
  if (int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(
        "collective group '", options.group, "': cannot reserve ", bytes,
        " bytes of shared memory in /dev/shm for ", name, ": ", strerror(err),
        "; free space in /dev/shm (or mount it larger), or use the TCP "
        "transport"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    shm_unlink(name.c_str());
    return rpc::SocketError("mmap(" + name + ")", err, options.group);
  }
  // A fresh segment reads as zeros: every atomic starts at 0.
  auto* control = static_cast<Control*>(base);
  control->size = static_cast<uint32_t>(n);
  control->slot_bytes = options.slot_bytes;
  control->members[0].pid.store(getpid(), std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  control->magic = kMagic;
  return std::unique_ptr<ShmCommunicator>(
      new ShmCommunicator(std::move(options), std::move(name), base, bytes));
}

absl::StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::Attach(
    ShmOptions options, const std::string& name) {
  const int n = static_cast<int>(options.tasks.size());
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective group '", options.group, "': shared-memory segment ", name,
        " ", why, "; it must be the one rank 0 (",
        options.tasks.empty() ? "?" : options.tasks[0], ") created"));
  };
  if (n < 2 || n > kMaxShmMembers || options.rank <= 0 || options.rank >= n) {
    return refuse(
        absl::StrCat("cannot be joined as rank ", options.rank, " of ", n));
  }
  if (name.rfind("/cohort-collective-", 0) != 0 ||
      name.find('/', 1) != std::string::npos) {
    return refuse("is not a cohort collective segment name");
  }
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    return rpc::SocketError("shm_open(" + name + ")", errno,
                            "rank 0 (" + options.tasks[0] +
                                ") of collective group '" + options.group +
                                "'; is it on this host and still waiting?");
  }
  rpc::UniqueFd owned(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return rpc::SocketError("fstat(" + name + ")", errno, options.group);
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < DataOffset()) return refuse("is too small");
  // Only map what the file holds, so no access can fault past its end.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    return rpc::SocketError("mmap(" + name + ")", errno, options.group);
  }
  auto* control = static_cast<Control*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (control->magic != kMagic || control->size != static_cast<uint32_t>(n) ||
      control->slot_bytes == 0 || control->slot_bytes % 128 != 0 ||
      control->slot_bytes > bytes ||
      SegmentBytes(n, control->slot_bytes) != bytes) {
    munmap(base, bytes);
    return refuse(absl::StrCat("has a header or size (", bytes,
                               " bytes) that does not fit a group of ", n));
  }
  options.slot_bytes = control->slot_bytes;
  control->members[options.rank].pid.store(getpid(), std::memory_order_relaxed);
  return std::unique_ptr<ShmCommunicator>(
      new ShmCommunicator(std::move(options), name, base, bytes));
}

ShmCommunicator::ShmCommunicator(ShmOptions options, std::string name,
                                 void* base, size_t bytes)
    : options_([&] {
        if (options.env == nullptr) options.env = Env::Default();
        return std::move(options);
      }()),
      name_(std::move(name)),
      base_(base),
      bytes_(bytes),
      control_(static_cast<Control*>(base)),
      spin_(static_cast<unsigned>(options_.tasks.size()) <=
            std::max(1u, std::thread::hardware_concurrency())) {}

ShmCommunicator::~ShmCommunicator() {
  // Members still waiting for this one fail at once instead of at their
  // deadline (a member that finished its calls is never waited for).
  control_->members[options_.rank].left.store(1, std::memory_order_release);
  FutexWakeAll(&control_->generation);
  munmap(base_, bytes_);
}

std::string ShmCommunicator::Member(int rank) const {
  return absl::StrCat("rank ", rank, " (", options_.tasks[rank], ")");
}

char* ShmCommunicator::Slot(uint64_t round, int member) const {
  size_t bank = static_cast<size_t>(round & 1);
  return static_cast<char*>(base_) + DataOffset() +
         (bank * size() + member) * options_.slot_bytes;
}

void ShmCommunicator::Cancel(const absl::Status& why) {
  {
    absl::MutexLock lock(&cancel_mu_);
    if (cancel_why_.ok()) cancel_why_ = why;
  }
  cancelled_.store(true, std::memory_order_release);
}

absl::Status ShmCommunicator::FailCancelled() {
  absl::Status why;
  {
    absl::MutexLock lock(&cancel_mu_);
    why = cancel_why_;
  }
  return Fail(why);
}

absl::Status ShmCommunicator::Fail(absl::Status error) {
  if (broken_.ok()) broken_ = error;
  uint32_t none = 0;
  if (control_->failed.compare_exchange_strong(none, 1,
                                               std::memory_order_acq_rel)) {
    std::string text =
        absl::StrCat(Member(options_.rank), " failed: ", error.message());
    size_t len = std::min(text.size(), sizeof(control_->failure) - 1);
    std::memcpy(control_->failure, text.data(), len);
    control_->failure[len] = '\0';
    control_->failed.store(2, std::memory_order_release);
  }
  FutexWakeAll(&control_->generation);
  return error;
}

absl::Status ShmCommunicator::WaitAllAttached(absl::Time deadline) {
  absl::Status s = Barrier(deadline);
  // Whatever happened, the name must go: every member that will ever map
  // the segment has, or the job is failing anyway.
  if (options_.rank == 0) shm_unlink(name_.c_str());
  return s;
}

absl::Status ShmCommunicator::Barrier(absl::Time deadline) {
  // Cancelled before or during the call: this member does not arrive (a
  // barrier it completed would let the others believe it took part).
  if (cancelled_.load(std::memory_order_acquire)) return FailCancelled();
  Control& c = *control_;
  const uint32_t generation = c.generation.load(std::memory_order_acquire);
  const uint32_t mine = c.members[options_.rank].barriers.fetch_add(
                            1, std::memory_order_relaxed) +
                        1;
  if (c.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(size())) {
    // Last to arrive: reset for the next barrier before releasing anyone.
    c.arrived.store(0, std::memory_order_relaxed);
    c.generation.fetch_add(1, std::memory_order_release);
    FutexWakeAll(&c.generation);
    return absl::OkStatus();
  }
  if (spin_) {
    // Peers on their own cores usually arrive within microseconds; a futex
    // sleep and wake would cost more than the wait.
    for (int i = 0; i < 20000; ++i) {
      if (c.generation.load(std::memory_order_acquire) != generation) {
        return absl::OkStatus();
      }
      CpuRelax();
    }
  }
  for (int wait = 0;; ++wait) {
    if (c.generation.load(std::memory_order_acquire) != generation) {
      return absl::OkStatus();
    }
    // After the first sleep, every wake looks for a member whose process
    // is gone: an elastic gang's survivors re-form as soon as they know
    // (one kill(pid, 0) per member every kLivenessPoll).
    if (cancelled_.load(std::memory_order_acquire)) return FailCancelled();
    if (c.failed.load(std::memory_order_acquire) != 0 ||
        options_.env->Now() >= deadline || wait > 0) {
      absl::Status error = WaitError(deadline, mine);
      // The barrier may have completed while the error was put together.
      if (c.generation.load(std::memory_order_acquire) != generation) {
        return absl::OkStatus();
      }
      if (!error.ok()) return Fail(error);
    }
    FutexWait(&c.generation, generation, kLivenessPoll);
  }
}

absl::Status ShmCommunicator::WaitError(absl::Time deadline,
                                        uint32_t my_barriers) {
  Control& c = *control_;
  if (c.failed.load(std::memory_order_acquire) == 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "collective group '", options_.group,
        "': ", std::string(c.failure, strnlen(c.failure, sizeof(c.failure)))));
  }
  std::vector<std::string> missing, gone;
  for (int q = 0; q < size(); ++q) {
    if (q == options_.rank) continue;
    const int32_t pid = c.members[q].pid.load(std::memory_order_relaxed);
    const bool behind =
        c.members[q].barriers.load(std::memory_order_relaxed) < my_barriers;
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
      gone.push_back(absl::StrCat(Member(q), " pid ", pid, " exited"));
    } else if (behind &&
               c.members[q].left.load(std::memory_order_acquire) != 0) {
      gone.push_back(absl::StrCat(Member(q), " left the group"));
    } else if (behind) {
      missing.push_back(Member(q));
    }
  }
  if (!gone.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "collective group '", options_.group, "': ", absl::StrJoin(gone, ", "),
        " while ", Member(options_.rank),
        " waited for it; check that task's log for why it stopped"));
  }
  if (options_.env->Now() >= deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        "collective group '", options_.group, "': ", Member(options_.rank),
        " timed out waiting for ",
        missing.empty() ? std::string("the other members")
                        : absl::StrJoin(missing, ", "),
        "; check that every member is alive and makes the same collective "
        "calls in the same order"));
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::BeginCall(const CallDesc& desc,
                                        absl::Time deadline) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("collective group '", options_.group,
                     "' is broken by an earlier error: ", broken_.message()));
  }
  // Two descriptors per member, by call parity: a member cannot be two calls
  // ahead of any other (each call has a barrier), so the one others still
  // compare is never overwritten.
  const int parity = static_cast<int>(calls_++ & 1);
  control_->members[options_.rank].desc[parity] = desc;
  COHORT_RETURN_IF_ERROR(Barrier(deadline));
  for (int q = 0; q < size(); ++q) {
    const CallDesc& theirs = control_->members[q].desc[parity];
    if (!(theirs == desc)) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "collective group '", options_.group, "': ", Member(options_.rank),
          " called ", desc.ToString(), " but ", Member(q), " called ",
          theirs.ToString(),
          "; every member must make the same calls in the same order")));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllReduce(void* data, size_t count,
                                        ElementType type, ReduceOp op,
                                        int64_t instance, absl::Time deadline) {
  const size_t elem = ElementSize(type);
  COHORT_RETURN_IF_ERROR(BeginCall(
      CallDesc::AllReduce(type, op, count * elem, instance), deadline));
  const int n = size();
  const size_t per_round = options_.slot_bytes / elem;
  const double divisor = op == ReduceOp::kMean ? n : 1;
  std::vector<const void*> inputs(n);
  char* bytes = static_cast<char*>(data);
  const int me = options_.rank;
  for (size_t off = 0; off < count; off += per_round, ++round_) {
    const size_t len = std::min(per_round, count - off);
    char* mine = bytes + off * elem;
    char* slot = Slot(round_, me);
    size_t lo, hi;
    PartOf(me, n, len, &lo, &hi);
    // Only the parts the others reduce go to the slot; this member's own
    // part stays in its buffer, where it reduces it.
    std::memcpy(slot, mine, lo * elem);
    std::memcpy(slot + hi * elem, mine + hi * elem, (len - hi) * elem);
    COHORT_RETURN_IF_ERROR(Barrier(deadline));
    for (int q = 0; q < n; ++q) {
      inputs[q] = q == me ? mine + lo * elem : Slot(round_, q) + lo * elem;
    }
    ReduceInto(mine + lo * elem, inputs.data(), n, hi - lo, type, divisor);
    // Published for the others (still in cache: a part is a fraction of a
    // slot).
    std::memcpy(slot + lo * elem, mine + lo * elem, (hi - lo) * elem);
    COHORT_RETURN_IF_ERROR(Barrier(deadline));
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      PartOf(q, n, len, &lo, &hi);
      std::memcpy(mine + lo * elem, Slot(round_, q) + lo * elem,
                  (hi - lo) * elem);
    }
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Broadcast(void* data, size_t bytes, int root,
                                        int64_t instance, absl::Time deadline) {
  // Checked after the members compared their calls, so all of them see the
  // same bad root (or the disagreement) and fail together.
  COHORT_RETURN_IF_ERROR(
      BeginCall(CallDesc::Broadcast(root, bytes, instance), deadline));
  if (root < 0 || root >= size()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("collective group '", options_.group, "': root ", root,
                     " is not a member (", size(), " members)")));
  }
  char* p = static_cast<char*>(data);
  for (size_t off = 0; off < bytes; off += options_.slot_bytes, ++round_) {
    const size_t len = std::min(options_.slot_bytes, bytes - off);
    if (options_.rank == root) std::memcpy(Slot(round_, root), p + off, len);
    COHORT_RETURN_IF_ERROR(Barrier(deadline));
    if (options_.rank != root) std::memcpy(p + off, Slot(round_, root), len);
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllGather(const void* in, size_t bytes, void* out,
                                        int64_t instance, absl::Time deadline) {
  COHORT_RETURN_IF_ERROR(
      BeginCall(CallDesc::AllGather(bytes, instance), deadline));
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  for (size_t off = 0; off < bytes; off += options_.slot_bytes, ++round_) {
    const size_t len = std::min(options_.slot_bytes, bytes - off);
    std::memcpy(Slot(round_, options_.rank), src + off, len);
    COHORT_RETURN_IF_ERROR(Barrier(deadline));
    for (int q = 0; q < size(); ++q) {
      std::memcpy(dst + q * bytes + off, Slot(round_, q), len);
    }
  }
  return absl::OkStatus();
}

}  // namespace cohort::collective
