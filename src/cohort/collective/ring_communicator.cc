#include "cohort/collective/ring_communicator.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/collective/reduce.h"
#include "cohort/rpc/coding.h"

namespace cohort::collective {
namespace {

// u64 sequence number, then the call's descriptor.
constexpr size_t kPieceHeader = 8 + CallDesc::kEncodedBytes;
// The sequence number of an abort: the sender failed, and says why.
constexpr uint64_t kAbortSeq = ~uint64_t{0};
constexpr size_t kMaxAbortMessage = 2048;

// [lo, hi) of part q of `len` elements over n members (16-element bounds,
// as the shared-memory transport splits them).
void PartOf(int q, int n, size_t len, size_t* lo, size_t* hi) {
  size_t part = ((len + n - 1) / n + 15) & ~size_t{15};
  *lo = std::min(len, part * q);
  *hi = std::min(len, part * (q + 1));
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

// The endpoint's handler: accepts the previous member's one connection and
// queues its pieces in order. Runs on the server's loop thread; never
// blocks.
class RingCommunicator::Inbox : public rpc::FramedServer::Handler {
 public:
  Inbox(const RingOptions& options, int prev)
      : options_(options),
        prev_(prev),
        prev_name_(
            absl::StrCat("rank ", prev, " (", options.tasks[prev], ")")) {}

  void OnRequest(const std::shared_ptr<rpc::FramedConnection>& c,
                 std::string request) override {
    absl::MutexLock lock(&mu_);
    if (sender_ == 0) {
      // The first request names the sender; only the previous member may
      // feed this inbox.
      if (request.size() < 4 ||
          rpc::DecodeFixed32(request.data()) != static_cast<uint32_t>(prev_) ||
          absl::string_view(request).substr(4) != options_.group) {
        c->Close("not the previous member of collective group '" +
                 options_.group + "'");
        return;
      }
      sender_ = c->id();
      c->Reply(absl::StatusCode::kOk, "");
      return;
    }
    if (c->id() != sender_) {
      c->Close("a second connection to collective group '" + options_.group +
               "' claims to be " + prev_name_);
      return;
    }
    if (request.size() >= 8 &&
        rpc::DecodeFixed64(request.data()) == kAbortSeq) {
      // The previous member failed: its reason becomes this one's error,
      // so the first cause travels round the ring.
      if (error_.ok()) {
        error_ = absl::FailedPreconditionError(std::string(
            absl::string_view(request).substr(8, kMaxAbortMessage)));
        aborted_ = true;
      }
      c->Reply(absl::StatusCode::kOk, "");
      return;
    }
    if (request.size() < kPieceHeader ||
        rpc::DecodeFixed64(request.data()) != next_seq_) {
      BreakLocked(c, absl::InvalidArgumentError(absl::StrCat(
                         prev_name_, " sent piece ",
                         request.size() < kPieceHeader
                             ? std::string("without a header")
                             : absl::StrCat(rpc::DecodeFixed64(request.data())),
                         " where piece ", next_seq_, " was due")));
      return;
    }
    if (bytes_ + request.size() > options_.max_inbox_bytes) {
      BreakLocked(c,
                  absl::ResourceExhaustedError(absl::StrCat(
                      prev_name_, " sent more than ", options_.max_inbox_bytes,
                      " bytes ahead of what this member consumed")));
      return;
    }
    ++next_seq_;
    bytes_ += request.size();
    pieces_.push_back(std::move(request));
    c->Reply(absl::StatusCode::kOk, "");
  }

  void OnClose(const std::shared_ptr<rpc::FramedConnection>& c) override {
    absl::MutexLock lock(&mu_);
    if (c->id() == sender_ && error_.ok()) {
      error_ = absl::UnavailableError(
          absl::StrCat(prev_name_, " closed its connection"));
    }
  }

  // The reason the previous member sent with an abort, or this member's
  // Cancel(), if either came.
  absl::Status Abort() {
    absl::MutexLock lock(&mu_);
    return aborted_ ? error_ : absl::OkStatus();
  }

  // Ends a Take() in flight and every later one with `why`.
  void Cancel(const absl::Status& why) {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    error_ = why;
    aborted_ = true;
  }

  // The next piece, or the inbox's error, or DeadlineExceeded.
  absl::StatusOr<std::string> Take(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    options_.env->AwaitWithDeadline(
        &mu_,
        absl::Condition(
            +[](Inbox* in) ABSL_EXCLUSIVE_LOCKS_REQUIRED(in->mu_) {
              return !in->pieces_.empty() || !in->error_.ok();
            },
            this),
        deadline);
    if (!pieces_.empty()) {
      std::string piece = std::move(pieces_.front());
      pieces_.pop_front();
      bytes_ -= piece.size();
      return piece;
    }
    if (!error_.ok()) return error_;
    return absl::DeadlineExceededError(
        absl::StrCat("no data from ", prev_name_));
  }

 private:
  void BreakLocked(const std::shared_ptr<rpc::FramedConnection>& c,
                   absl::Status error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error_.ok()) error_ = error;
    c->Close(std::string(error.message()));
  }

  const RingOptions& options_;
  const int prev_;
  const std::string prev_name_;

  absl::Mutex mu_;
  uint64_t sender_ ABSL_GUARDED_BY(mu_) = 0;  // connection id; 0: none yet
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::string> pieces_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;  // error_ came in an abort
};

RingCommunicator::RingCommunicator(RingOptions options)
    : options_(std::move(options)) {}

RingCommunicator::~RingCommunicator() {
  // The server goes first: its loop calls into the inbox.
  server_.reset();
  client_.reset();
}

absl::StatusOr<std::unique_ptr<RingCommunicator>> RingCommunicator::Start(
    RingOptions options, const std::string& host) {
  const int n = static_cast<int>(options.tasks.size());
  if (n < 1 || options.rank < 0 || options.rank >= n ||
      options.chunk_bytes < 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective group '", options.group, "': rank ", options.rank, " of ",
        n, " members with pieces of ", options.chunk_bytes,
        " bytes; need 0 <= rank < members and pieces of at least 1024 bytes"));
  }
  // Pieces hold whole float64 elements.
  options.chunk_bytes &= ~size_t{7};
  if (options.env == nullptr) options.env = Env::Default();
  std::unique_ptr<RingCommunicator> c(new RingCommunicator(std::move(options)));
  c->inbox_ = std::make_unique<Inbox>(c->options_, c->prev());
  rpc::FramedServerOptions server_options;
  server_options.name =
      absl::StrCat("collective endpoint of group '", c->options_.group, "'");
  server_options.host = host;
  server_options.job_token = c->options_.job_token;
  server_options.identity = c->Identity(c->options_.rank);
  server_options.max_frame_bytes = c->options_.chunk_bytes + kPieceHeader;
  // The previous member, plus room for strangers to be refused.
  server_options.max_connections = 16;
  server_options.max_unauthenticated = 8;
  COHORT_ASSIGN_OR_RETURN(
      c->server_, rpc::FramedServer::Start(server_options, c->inbox_.get()));
  return c;
}

std::string RingCommunicator::Identity(int rank) const {
  return absl::StrCat("collective group '", options_.group, "' rank ", rank,
                      " (", options_.tasks[rank], ")");
}

std::string RingCommunicator::Member(int rank) const {
  return absl::StrCat("rank ", rank, " (", options_.tasks[rank], ")");
}

absl::Status RingCommunicator::Connect(
    const std::vector<std::string>& addresses, absl::Time deadline) {
  if (addresses.size() != options_.tasks.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective group '", options_.group, "': ", addresses.size(),
        " addresses for ", options_.tasks.size(), " members"));
  }
  if (size() == 1) return absl::OkStatus();
  next_address_ = addresses[next()];
  absl::StatusOr<std::unique_ptr<rpc::FramedClient>> client =
      rpc::FramedClient::Connect(next_address_, options_.job_token, deadline,
                                 rpc::kDefaultMaxFrame, Identity(next()));
  if (!client.ok()) {
    return Fail(
        absl::Status(client.status().code(),
                     absl::StrCat("collective group '", options_.group,
                                  "': cannot connect to ", Member(next()), ": ",
                                  client.status().message())));
  }
  client_ = std::move(*client);
  std::string hello;
  rpc::PutFixed32(&hello, static_cast<uint32_t>(options_.rank));
  hello += options_.group;
  absl::StatusOr<std::string> answer = client_->Call(hello, deadline);
  if (!answer.ok()) {
    return Fail(
        absl::Status(answer.status().code(),
                     absl::StrCat("collective group '", options_.group,
                                  "': ", Member(next()), " at ", next_address_,
                                  " refused this member as its previous one: ",
                                  answer.status().message())));
  }
  return absl::OkStatus();
}

absl::Status RingCommunicator::CheckUsable() const {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("collective group '", options_.group,
                     "' is broken by an earlier error: ", broken_.message()));
  }
  if (size() > 1 && client_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("collective group '", options_.group,
                     "': Connect() must succeed before any collective"));
  }
  return absl::OkStatus();
}

void RingCommunicator::Cancel(const absl::Status& why) {
  {
    absl::MutexLock lock(&cancel_mu_);
    if (cancelled_.ok()) cancelled_ = why;
  }
  inbox_->Cancel(why);
  // Shutdown() may be called from any thread (rpc/framed_client.h): a send
  // blocked on the next member ends too.
  if (client_ != nullptr) client_->Shutdown();
}

absl::Status RingCommunicator::Cancelled() {
  absl::MutexLock lock(&cancel_mu_);
  return cancelled_;
}

absl::Status RingCommunicator::Fail(absl::Status error) {
  // Cancel() is the root cause, then a failure the previous member
  // announced: report it rather than what it broke here.
  const absl::Status cancelled = Cancelled();
  if (!cancelled.ok()) {
    error = cancelled;
  } else if (absl::Status cause = inbox_->Abort(); !cause.ok()) {
    error = cause;
  }
  if (!broken_.ok()) return error;
  broken_ = error;
  // A cancelled member hangs up without an abort: the next member sees the
  // connection close, as it would if this member were gone.
  if (client_ != nullptr && cancelled.ok()) {
    // Tell the next member why (it passes it on), then hang up, so that
    // everyone fails now, with the cause, rather than at their deadlines.
    if (!client_->broken()) {
      std::string abort;
      rpc::PutFixed64(&abort, kAbortSeq);
      const std::string why = absl::IsFailedPrecondition(error)
                                  ? std::string(error.message())
                                  : absl::StrCat(Member(options_.rank),
                                                 " failed: ", error.message());
      client_
          ->Call(abort, absl::string_view(why).substr(0, kMaxAbortMessage),
                 options_.env->Now() + absl::Milliseconds(500))
          .IgnoreError();
    }
    client_->Shutdown();
  }
  return error;
}

absl::Status RingCommunicator::SendPiece(const char* data, size_t bytes,
                                         absl::Time deadline) {
  std::string header;
  rpc::PutFixed64(&header, sent_++);
  desc_.AppendTo(&header);
  // The piece goes from the caller's buffer to the socket; the receiving
  // endpoint reads it straight into the string the inbox keeps.
  absl::StatusOr<std::string> ack =
      client_->Call(header, absl::string_view(data, bytes), deadline);
  if (!ack.ok()) {
    return Fail(absl::Status(
        ack.status().code(),
        absl::StrCat("collective group '", options_.group,
                     "': ", Member(options_.rank), " could not send to ",
                     Member(next()), " at ", next_address_, ": ",
                     ack.status().message(),
                     "; check that task's log for why it stopped")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RingCommunicator::RecvPiece(size_t bytes,
                                                        absl::Time deadline) {
  absl::StatusOr<std::string> piece = inbox_->Take(deadline);
  if (!piece.ok()) {
    return Fail(absl::Status(
        piece.status().code(),
        absl::StrCat("collective group '", options_.group,
                     "': ", Member(options_.rank),
                     " waiting: ", piece.status().message(),
                     "; check that every member is alive and makes the same "
                     "collective calls in the same order")));
  }
  const CallDesc theirs = CallDesc::Decode(absl::string_view(*piece).substr(8));
  if (theirs != desc_) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "collective group '", options_.group, "': ", Member(prev()),
        " sent data of ", theirs.ToString(), " where ", Member(options_.rank),
        " runs ", desc_.ToString(),
        "; every member must make the same calls in the same order")));
  }
  if (piece->size() != kPieceHeader + bytes) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "collective group '", options_.group, "': ", Member(prev()),
        " sent a piece of ", piece->size() - kPieceHeader, " bytes where ",
        Member(options_.rank), " expected ", bytes,
        "; every member must make the same calls with the same sizes")));
  }
  return piece;
}

absl::Status RingCommunicator::Exchange(char* data, size_t elem, size_t send_lo,
                                        size_t send_hi, size_t recv_lo,
                                        size_t recv_hi, bool accumulate,
                                        ElementType type, absl::Time deadline) {
  const size_t per_piece = options_.chunk_bytes / elem;
  const size_t send_n = send_hi - send_lo, recv_n = recv_hi - recv_lo;
  // Interleave: send piece i, then take piece i; the previous member's
  // piece i travels while this one is sent, and the inbox absorbs skew.
  for (size_t off = 0; off < std::max(send_n, recv_n); off += per_piece) {
    if (off < send_n) {
      size_t len = std::min(per_piece, send_n - off);
      COHORT_RETURN_IF_ERROR(
          SendPiece(data + (send_lo + off) * elem, len * elem, deadline));
    }
    if (off < recv_n) {
      size_t len = std::min(per_piece, recv_n - off);
      COHORT_ASSIGN_OR_RETURN(std::string piece,
                              RecvPiece(len * elem, deadline));
      char* dst = data + (recv_lo + off) * elem;
      if (accumulate) {
        AccumulateInto(dst, piece.data() + kPieceHeader, len, type);
      } else {
        std::memcpy(dst, piece.data() + kPieceHeader, len * elem);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RingCommunicator::AllReduce(void* data, size_t count,
                                         ElementType type, ReduceOp op,
                                         int64_t instance,
                                         absl::Time deadline) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  const int n = size(), r = options_.rank;
  const size_t elem = ElementSize(type);
  desc_ = CallDesc::AllReduce(type, op, count * elem, instance);
  char* bytes = static_cast<char*>(data);
  size_t slo, shi, rlo, rhi;
  for (int s = 0; s < n - 1; ++s) {  // reduce-scatter
    PartOf(Mod(r - s, n), n, count, &slo, &shi);
    PartOf(Mod(r - s - 1, n), n, count, &rlo, &rhi);
    COHORT_RETURN_IF_ERROR(
        Exchange(bytes, elem, slo, shi, rlo, rhi, true, type, deadline));
  }
  if (op == ReduceOp::kMean) {
    PartOf(Mod(r + 1, n), n, count, &slo, &shi);
    DivideInPlace(bytes + slo * elem, shi - slo, type, n);
  }
  for (int s = 0; s < n - 1; ++s) {  // all-gather of the finished parts
    PartOf(Mod(r + 1 - s, n), n, count, &slo, &shi);
    PartOf(Mod(r - s, n), n, count, &rlo, &rhi);
    COHORT_RETURN_IF_ERROR(
        Exchange(bytes, elem, slo, shi, rlo, rhi, false, type, deadline));
  }
  return absl::OkStatus();
}

absl::Status RingCommunicator::Broadcast(void* data, size_t bytes, int root,
                                         int64_t instance,
                                         absl::Time deadline) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  desc_ = CallDesc::Broadcast(root, bytes, instance);
  if (root < 0 || root >= size()) {
    // Breaks the group (and so the others' calls) as any disagreement does.
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("collective group '", options_.group, "': root ", root,
                     " is not a member (", size(), " members)")));
  }
  char* p = static_cast<char*>(data);
  const bool receives = options_.rank != root;
  const bool forwards = next() != root;
  for (size_t off = 0; off < bytes || off == 0; off += options_.chunk_bytes) {
    const size_t len = std::min(options_.chunk_bytes, bytes - off);
    if (receives) {
      COHORT_ASSIGN_OR_RETURN(std::string piece, RecvPiece(len, deadline));
      std::memcpy(p + off, piece.data() + kPieceHeader, len);
    }
    if (forwards && size() > 1) {
      COHORT_RETURN_IF_ERROR(SendPiece(p + off, len, deadline));
    }
    if (bytes == 0) break;
  }
  return absl::OkStatus();
}

absl::Status RingCommunicator::AllGather(const void* in, size_t bytes,
                                         void* out, int64_t instance,
                                         absl::Time deadline) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  desc_ = CallDesc::AllGather(bytes, instance);
  const int n = size(), r = options_.rank;
  char* dst = static_cast<char*>(out);
  std::memcpy(dst + r * bytes, in, bytes);
  // Blocks are whole members' contributions: treat them as bytes (elem 1).
  for (int s = 0; s < n - 1; ++s) {
    size_t send = Mod(r - s, n), recv = Mod(r - s - 1, n);
    COHORT_RETURN_IF_ERROR(Exchange(dst, 1, send * bytes, (send + 1) * bytes,
                                    recv * bytes, (recv + 1) * bytes, false,
                                    ElementType::kFloat32, deadline));
  }
  return absl::OkStatus();
}

}  // namespace cohort::collective
