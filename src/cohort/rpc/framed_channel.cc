#include "cohort/rpc/framed_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
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

  uint32_t Start(absl::string_view head, absl::string_view body,
                 absl::Time deadline, Done done) {
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
      absl::MutexLock lock(&write_mu_);
      sent = WriteAll(frame, deadline);
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
      }
      pending.swap(pending_);
      deadlines_.clear();
    }
    for (auto& [tag, call] : pending) call.done(status);
  }

  void ReadLoop() {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (broken_) break;
      }
      const absl::Time now = absl::Now();
      absl::Time wake_at = now + kDeadlineSlack;
      {
        absl::MutexLock lock(&mu_);
        if (!deadlines_.empty()) {
          wake_at = std::min(wake_at, deadlines_.begin()->first);
        }
      }
      pollfd p[2] = {{fd_.get(), POLLIN | POLLRDHUP, 0},
                     {wake_fd_.get(), POLLIN, 0}};
      const int r = poll(p, 2, PollTimeoutMs(wake_at));
      if (r < 0 && errno != EINTR) {
        Fail(SocketError("poll() on", errno, address_));
        break;
      }
      if (r > 0 && (p[1].revents & POLLIN)) {
        uint64_t count;
        ssize_t ignored = read(wake_fd_.get(), &count, sizeof(count));
        (void)ignored;
      }
      if (r > 0 && p[0].revents != 0 && !ReadReplies()) break;
      ExpireDeadlines(absl::Now());
    }
    Fail(absl::UnavailableError(
        absl::StrCat("the connection to ", address_, " was shut down")));
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
              "the server at ", address_,
              " did not take a request before its deadline (it stopped "
              "reading)"));
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
    while (true) {
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
  // Reader thread only.
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
};

absl::StatusOr<std::unique_ptr<FramedChannel>> FramedChannel::Connect(
    const std::string& address, const std::string& job_token,
    absl::Time deadline, size_t max_frame_bytes) {
  COHORT_ASSIGN_OR_RETURN(
      std::unique_ptr<FramedClient> client,
      FramedClient::Connect(address, job_token, deadline, max_frame_bytes));
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
  core_->Complete(tag, std::move(status));
}

absl::StatusOr<TaggedReply> FramedChannel::Call(absl::string_view head,
                                                absl::string_view body,
                                                absl::Time deadline) {
  struct Slot {
    absl::Notification ended;
    absl::StatusOr<TaggedReply> result;
  };
  auto slot = std::make_shared<Slot>();
  const uint32_t tag =
      Start(head, body, deadline, [slot](absl::StatusOr<TaggedReply> r) {
        slot->result = std::move(r);
        slot->ended.Notify();
      });
  if (!slot->ended.WaitForNotificationWithDeadline(deadline)) {
    Abandon(tag, absl::DeadlineExceededError(absl::StrCat(
                     "no answer from ", address_, " before the deadline")));
    slot->ended.WaitForNotification();
  }
  return std::move(slot->result);
}

void FramedChannel::Shutdown() { core_->Shutdown(); }

bool FramedChannel::broken() const { return core_->broken(); }

size_t FramedChannel::in_flight() const { return core_->in_flight(); }

}  // namespace cohort::rpc
