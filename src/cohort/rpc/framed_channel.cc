#include "cohort/rpc/framed_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cohort/base/status.h"
#include "cohort/rpc/framed_client.h"
#include "cohort/rpc/socket.h"

namespace cohort::rpc {

// The connection and its calls, shared by the channel and its reader thread
// (which may outlive the channel when a callback destroys it).
class FramedChannel::Core {
 public:
  Core(UniqueFd fd, std::string address, size_t max_frame_bytes)
      : fd_(std::move(fd)),
        wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
        address_(std::move(address)),
        reader_(max_frame_bytes) {}

  // `blocking`: the caller reads for the call itself (CallBlocking);
  // otherwise the reader thread is woken if nobody reads.
  uint32_t Start(absl::string_view head, absl::string_view body,
                 absl::Time deadline, Done done, bool blocking = false) {
    uint32_t tag = 0;
    absl::Status broken;
    {
      absl::MutexLock lock(&mu_);
      if (broken_) {
        broken = broken_status_;
      } else {
        do {
          tag = next_tag_++;
        } while (tag == 0 || pending_.contains(tag));
        // A reader thread that went idle with nothing in flight sleeps up to
        // kDeadlineSlack; the first call in flight wakes it so that it looks
        // again within kIdleRecheck. (Not every call: a pipelined write
        // before each blocking call would cost a wake-up each.)
        if (!blocking && pending_.empty()) reader_cv_.Signal();
        pending_.emplace(tag, Pending{std::move(done), deadline});
        if (deadline != absl::InfiniteFuture()) {
          deadlines_.insert({deadline, tag});
        }
      }
    }
    if (!broken.ok()) {
      done(std::move(broken));
      return 0;
    }
    std::string frame;
    frame.reserve(8 + head.size() + body.size());
    AppendTaggedRequestFrame(&frame, tag, head, body);
    absl::Status sent;
    {
      // The write is bounded by the channel's timeout, not the call's: a
      // short call deadline must not break the connection that every call
      // of the process shares. A server that takes nothing for that long
      // is gone.
      absl::MutexLock lock(&write_mu_);
      sent = WriteAll(frame, absl::Now() + kWriteTimeout);
    }
    // A request half written leaves the stream unusable for every call.
    if (!sent.ok()) Fail(sent);
    return tag;
  }

  void Complete(uint32_t tag, absl::StatusOr<TaggedReply> result) {
    Done done;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(tag);
      if (it == pending_.end()) return;  // ended already: a late reply
      done = std::move(it->second.done);
      if (it->second.deadline != absl::InfiniteFuture()) {
        deadlines_.erase({it->second.deadline, tag});
      }
      pending_.erase(it);
    }
    done(std::move(result));
  }

  // Ends call `tag` early; a blocking caller reading for it sees that.
  void Abandon(uint32_t tag, absl::Status status) {
    Complete(tag, std::move(status));
    Wake();
  }

  // Breaks the connection and ends every call in flight with `status`.
  void Fail(absl::Status status) {
    absl::flat_hash_map<uint32_t, Pending> pending;
    {
      absl::MutexLock lock(&mu_);
      if (!broken_) {
        broken_ = true;
        broken_status_ = status;
        shutdown(fd_.get(), SHUT_RDWR);
        Wake();
        reader_cv_.Signal();
      }
      pending.swap(pending_);
      deadlines_.clear();
    }
    for (auto& [tag, call] : pending) call.done(status);
  }

  // A blocking call: Start() and wait for its end. While nobody reads the
  // socket the caller reads it itself, delivering every reply that arrives
  // until its own has come, so that a reply wakes exactly the thread that
  // waits for it; otherwise it waits, on its own lock (no contention with
  // the other waiters), to be handed its reply or the reading.
  absl::StatusOr<TaggedReply> CallBlocking(
      absl::string_view head, absl::string_view body, absl::Time deadline,
      const std::function<void(uint32_t)>& started) {
    auto w = std::make_shared<Waiter>();
    const uint32_t tag = Start(
        head, body, deadline,
        [w](absl::StatusOr<TaggedReply> r) {
          absl::MutexLock lock(&w->mu);
          w->result = std::move(r);
          w->ended = true;
          w->cv.Signal();
        },
        /*blocking=*/true);
    if (started) started(tag);
    // Invariant at the top of the loop: `w` is not in waiters_, so once it
    // has ended and holds no handed-over reading, nothing can hand it one.
    while (true) {
      bool lead = false;
      {
        absl::MutexLock lock(&w->mu);
        lead = std::exchange(w->lead, false);
        if (w->ended && !lead) return std::move(w->result);
      }
      if (!lead && absl::Now() >= deadline) {
        Complete(tag,
                 absl::DeadlineExceededError(absl::StrCat(
                     "no answer from ", address_, " before the deadline")));
        continue;
      }
      if (!lead) {
        absl::MutexLock lock(&mu_);
        if (!reading_ && !broken_) {
          reading_ = true;
          lead = true;
        } else if (!broken_) {
          waiters_.push_back(w);
          // The reader thread steps aside for a blocking caller.
          if (thread_reading_ && !kicked_) {
            kicked_ = true;
            Wake();
          }
        }
      }
      if (!lead) {
        {
          absl::MutexLock lock(&w->mu);
          while (!w->ended && !w->lead && absl::Now() < deadline) {
            w->cv.WaitWithDeadline(&w->mu, deadline);
          }
        }
        // Out of the queue before looking again (a hand-over that came
        // first is seen at the top of the loop).
        absl::MutexLock lock(&mu_);
        auto it = std::find(waiters_.begin(), waiters_.end(), w);
        if (it != waiters_.end()) waiters_.erase(it);
        continue;
      }
      // Holding the reading: read until the call ends, the channel breaks
      // or the deadline passes (the top of the loop then ends the call),
      // then hand the reading on.
      Lead(*w, deadline);
    }
  }

  // The reader thread: reads while no blocking caller does and calls are in
  // flight (asynchronous ones, parked ones), and ends calls past their
  // deadline.
  void ReadLoop() {
    absl::MutexLock lock(&mu_);
    while (!broken_) {
      if (reading_ || pending_.empty()) {
        // A blocking caller that stops reading does not wake this thread
        // (that would cost a wake-up per call); calls left in flight are
        // picked up within kIdleRecheck.
        reader_cv_.WaitWithTimeout(
            &mu_, pending_.empty() ? kDeadlineSlack : kIdleRecheck);
        mu_.Unlock();
        ExpireDeadlines(absl::Now());
        mu_.Lock();
        continue;
      }
      reading_ = true;
      thread_reading_ = true;
      absl::Time wake_at = absl::Now() + kDeadlineSlack;
      if (!deadlines_.empty()) {
        wake_at = std::min(wake_at, deadlines_.begin()->first);
      }
      mu_.Unlock();
      pollfd p[2] = {{fd_.get(), POLLIN | POLLRDHUP, 0},
                     {wake_fd_.get(), POLLIN, 0}};
      const int r = poll(p, 2, PollTimeoutMs(wake_at));
      bool open = true;
      if (r < 0 && errno != EINTR) {
        Fail(SocketError("poll() on", errno, address_));
        open = false;
      }
      if (r > 0 && (p[1].revents & POLLIN)) DrainWakeFd();
      if (open && r > 0 && p[0].revents != 0) ReadReplies();
      ExpireDeadlines(absl::Now());
      mu_.Lock();
      thread_reading_ = false;
      kicked_ = false;
      HandOffLocked();
    }
  }

  void Shutdown() {
    Fail(absl::UnavailableError(
        absl::StrCat("the connection to ", address_, " was shut down")));
  }

  bool broken() {
    absl::MutexLock lock(&mu_);
    return broken_;
  }

  size_t in_flight() {
    absl::MutexLock lock(&mu_);
    return pending_.size();
  }

 private:
  struct Pending {
    Done done;
    absl::Time deadline;
  };

  // How long a request may wait for room in the socket before the server is
  // given up (the channel breaks).
  static constexpr absl::Duration kWriteTimeout = absl::Seconds(30);
  // How soon the reader thread takes up the reading that a blocking caller
  // left while other calls are in flight.
  static constexpr absl::Duration kIdleRecheck = absl::Milliseconds(10);

  // A blocking caller, as the others see it.
  struct Waiter {
    absl::Mutex mu;
    absl::CondVar cv;
    bool ended ABSL_GUARDED_BY(mu) = false;
    bool lead ABSL_GUARDED_BY(mu) = false;  // handed the reading
    absl::StatusOr<TaggedReply> result ABSL_GUARDED_BY(mu);
  };

  // Holding the reading (reading_), reads for blocking caller `w` until its
  // call ends, the socket fails or its deadline passes; then hands the
  // reading on.
  void Lead(Waiter& w, absl::Time deadline) {
    while (true) {
      {
        absl::MutexLock lock(&w.mu);
        if (w.ended) break;
      }
      if (broken() || absl::Now() >= deadline) break;
      // The wake fd: Abandon() of the call this thread reads for.
      pollfd p[2] = {{fd_.get(), POLLIN | POLLRDHUP, 0},
                     {wake_fd_.get(), POLLIN, 0}};
      const int r = poll(p, 2, PollTimeoutMs(deadline));
      if (r < 0 && errno != EINTR) {
        Fail(SocketError("poll() on", errno, address_));
      } else if (r > 0) {
        if (p[1].revents & POLLIN) DrainWakeFd();
        if (p[0].revents != 0) ReadReplies();
      }
    }
    absl::MutexLock lock(&mu_);
    HandOffLocked();
  }

  // Passes the reading, held by the caller, to the oldest blocking caller
  // still waiting, or frees it (the reader thread looks again on its own
  // within kIdleRecheck).
  void HandOffLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!waiters_.empty()) {
      std::shared_ptr<Waiter> next = std::move(waiters_.front());
      waiters_.pop_front();
      absl::MutexLock lock(&next->mu);
      if (next->ended) continue;  // answered while it waited
      next->lead = true;
      next->cv.Signal();
      return;  // reading_ stays set: it is theirs now
    }
    reading_ = false;
  }

  void DrainWakeFd() {
    uint64_t count;
    ssize_t ignored = read(wake_fd_.get(), &count, sizeof(count));
    (void)ignored;
  }

  void Wake() {
    const uint64_t one = 1;
    ssize_t ignored = write(wake_fd_.get(), &one, sizeof(one));
    (void)ignored;
  }

  absl::Status WriteAll(absl::string_view bytes, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = send(fd_.get(), bytes.data() + done,
                             bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (deadline <= absl::Now()) {
          return absl::DeadlineExceededError(absl::StrCat(
              "the server at ", address_, " took no request bytes for ",
              absl::FormatDuration(kWriteTimeout), " (it stopped reading)"));
        }
        pollfd p{fd_.get(), POLLOUT, 0};
        const int r = poll(&p, 1, PollTimeoutMs(deadline));
        if (r < 0 && errno != EINTR) {
          return SocketError("poll() on", errno, address_);
        }
        continue;
      }
      return SocketError("lost the connection to", errno, address_);
    }
    return absl::OkStatus();
  }

  // Reads what is there and completes the calls it answers. False when the
  // channel broke.
  bool ReadReplies() {
    constexpr size_t kReadBytes = 65536;
    // At most this many full reads per call: a flood of replies must not
    // keep the reader from its deadlines (poll reports the rest at once).
    constexpr int kMaxReads = 16;
    for (int reads = 0;; ++reads) {
      const absl::Span<char> space = reader_.ReadSpace(kReadBytes);
      const ssize_t n =
          recv(fd_.get(), space.data(), space.size(), MSG_DONTWAIT);
      reader_.Commit(n > 0 ? static_cast<size_t>(n) : 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        DeliverFrames();
        Fail(n == 0 ? absl::UnavailableError(absl::StrCat(
                          "the server at ", address_, " closed the connection"))
                    : SocketError("lost the connection to", errno, address_));
        return false;
      }
      if (!DeliverFrames()) return false;
      if (n < 0 || static_cast<size_t>(n) < space.size()) return true;
      if (reads + 1 >= kMaxReads) return true;
    }
  }

  bool DeliverFrames() {
    std::string payload;
    while (true) {
      uint64_t announced = 0;
      const FrameReader::Result r = reader_.Next(&payload, &announced);
      if (r == FrameReader::Result::kNeedMore) return true;
      if (r == FrameReader::Result::kTooLarge) {
        Fail(absl::DataLossError(absl::StrCat(
            "the server at ", address_, " sent a frame of ", announced,
            " bytes, over this client's cap; closing the connection")));
        return false;
      }
      absl::StatusOr<TaggedReply> reply = ParseTaggedReply(std::move(payload));
      if (!reply.ok()) {
        Fail(Annotate(reply.status(), absl::StrCat("server ", address_)));
        return false;
      }
      const uint32_t tag = reply->tag;
      Complete(tag, *std::move(reply));
    }
  }

  void ExpireDeadlines(absl::Time now) {
    std::vector<uint32_t> expired;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = deadlines_.begin();
           it != deadlines_.end() && it->first <= now; ++it) {
        expired.push_back(it->second);
      }
    }
    for (uint32_t tag : expired) {
      Complete(tag, absl::DeadlineExceededError(absl::StrCat(
                        "no answer from ", address_, " before the deadline")));
    }
  }

  const UniqueFd fd_;
  const UniqueFd wake_fd_;
  const std::string address_;
  // Only the thread that holds the reading (reading_) uses it.
  FrameReader reader_;

  absl::Mutex write_mu_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // The finite deadlines of pending calls, earliest first.
  absl::btree_set<std::pair<absl::Time, uint32_t>> deadlines_
      ABSL_GUARDED_BY(mu_);
  uint32_t next_tag_ ABSL_GUARDED_BY(mu_) = 1;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status broken_status_ ABSL_GUARDED_BY(mu_);
  // Someone reads the socket: a blocking caller or the reader thread
  // (thread_reading_, which a blocking caller wakes once: kicked_).
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool thread_reading_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  // Blocking callers waiting for their reply or for the reading, oldest
  // first (some may have been answered meanwhile).
  std::deque<std::shared_ptr<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  absl::CondVar reader_cv_;
};

absl::StatusOr<std::unique_ptr<FramedChannel>> FramedChannel::Connect(
    const std::string& address, const std::string& job_token,
    absl::Time deadline, size_t max_frame_bytes,
    const std::string& server_identity) {
  COHORT_ASSIGN_OR_RETURN(
      std::unique_ptr<FramedClient> client,
      FramedClient::Connect(address, job_token, deadline, max_frame_bytes,
                            server_identity));
  COHORT_ASSIGN_OR_RETURN(UniqueFd fd, client->TakeConnection());
  auto core = std::make_shared<Core>(std::move(fd), address, max_frame_bytes);
  return std::unique_ptr<FramedChannel>(new FramedChannel(core, address));
}

FramedChannel::FramedChannel(std::shared_ptr<Core> core, std::string address)
    : core_(std::move(core)), address_(std::move(address)) {
  reader_ = std::thread([core = core_] { core->ReadLoop(); });
}

FramedChannel::~FramedChannel() {
  core_->Shutdown();
  // A callback may drop the last reference on the reader thread itself; the
  // reader then finishes on its own (it holds the core).
  if (reader_.get_id() == std::this_thread::get_id()) {
    reader_.detach();
  } else {
    reader_.join();
  }
}

uint32_t FramedChannel::Start(absl::string_view head, absl::string_view body,
                              absl::Time deadline, Done done) {
  return core_->Start(head, body, deadline, std::move(done));
}

void FramedChannel::Abandon(uint32_t tag, absl::Status status) {
  core_->Abandon(tag, std::move(status));
}

absl::StatusOr<TaggedReply> FramedChannel::Call(
    absl::string_view head, absl::string_view body, absl::Time deadline,
    const std::function<void(uint32_t tag)>& started) {
  // The core stays alive for the call even if a callback this thread runs
  // destroys the channel.
  const std::shared_ptr<Core> core = core_;
  return core->CallBlocking(head, body, deadline, started);
}

void FramedChannel::Shutdown() { core_->Shutdown(); }

bool FramedChannel::broken() const { return core_->broken(); }

size_t FramedChannel::in_flight() const { return core_->in_flight(); }

}  // namespace cohort::rpc
