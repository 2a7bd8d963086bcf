// FramedChannel: many concurrent calls over one authenticated framed
// connection (frame.h, "Tagged calls"). Where FramedClient holds a
// connection for one call at a time, a channel tags each request and a
// reader thread of its own hands each reply to its call, in whatever order
// the server answers. A process needs one connection per server, however
// many threads or tasks it runs, and a call parked at the server (a barrier,
// a blocking get) costs no connection and no thread.
//
//   COHORT_ASSIGN_OR_RETURN(auto channel,
//       FramedChannel::Connect("127.0.0.1:4100", token, absl::Now() + 10s));
//   absl::StatusOr<TaggedReply> reply =
//       channel->Call(head, body, absl::Now() + 30s);
//   channel->Start(head, body, deadline, [](absl::StatusOr<TaggedReply> r) {
//     ...  // on the channel's reader thread: must not block
//   });
//
// A call ends exactly once: with the server's reply (TaggedReply: its code
// and body; a server error is a reply, not a failed call), or with a
// transport error naming the address: Unavailable when the connection is
// lost (every call in flight fails with it and the channel is broken();
// connect a new one), DeadlineExceeded at the call's deadline, or the status
// passed to Abandon(). Ending a call early never breaks the channel: a late
// reply is dropped.
//
// Bounds: replies longer than `max_frame_bytes` break the channel (DataLoss);
// nothing read from the wire sizes an allocation beyond that cap. The number
// of calls in flight is the caller's to bound (the server caps it too).
//
// Deadlines: a blocking Call() returns at its deadline; an asynchronous call
// ends at most kDeadlineSlack after its deadline (the reader checks them at
// least that often).
//
// Reading: one thread at a time reads the connection. A blocking Call()
// reads it itself while nobody else does; the channel's reader thread reads
// only while calls are in flight and no blocking caller is waiting (it
// steps aside for one), so that a blocking call costs one wake-up, not two.
// A reply to an asynchronous call that arrives just after a blocking caller
// stopped reading is picked up within 10 ms.
//
// Thread safety: thread-safe. Callbacks run on the thread that reads the
// reply (the reader thread or a blocking caller), or inline in Start() when
// the channel is already broken; they must not block; they may start new
// calls and may destroy the channel.
#ifndef COHORT_RPC_FRAMED_CHANNEL_H_
#define COHORT_RPC_FRAMED_CHANNEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cohort/rpc/frame.h"

namespace cohort::rpc {

class FramedChannel {
 public:
  using Done = std::function<void(absl::StatusOr<TaggedReply>)>;

  // How late an asynchronous call's deadline may fire.
  static constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(100);

  // Connects to "host:port" and runs the handshake by `deadline`, errors as
  // FramedClient::Connect's (the server's proof is required).
  static absl::StatusOr<std::unique_ptr<FramedChannel>> Connect(
      const std::string& address, const std::string& job_token,
      absl::Time deadline, size_t max_frame_bytes = kDefaultMaxFrame,
      const std::string& server_identity = "");
  // Shuts the connection down (calls in flight end with Unavailable) and
  // ends the reader thread.
  ~FramedChannel();

  FramedChannel(const FramedChannel&) = delete;
  FramedChannel& operator=(const FramedChannel&) = delete;

  // Sends the request `head` + `body` under a fresh tag and returns the tag.
  // `done` runs once, as described above. Sending blocks only while the
  // socket is full, at most until `deadline` (which then breaks the
  // channel: a request half sent cannot be taken back).
  uint32_t Start(absl::string_view head, absl::string_view body,
                 absl::Time deadline, Done done);
  // Ends call `tag` now with `status` if it has not ended; its reply, if one
  // comes, is dropped. A tag that already ended is ignored.
  void Abandon(uint32_t tag, absl::Status status);
  // Start() and wait for the end, at most until `deadline`. `started`, if
  // given, gets the call's tag once it is sent (e.g. to Abandon() it from
  // another thread). While no other thread reads the connection, the caller
  // reads it itself (delivering other calls' replies too, and running their
  // callbacks), so that its reply wakes it directly.
  absl::StatusOr<TaggedReply> Call(
      absl::string_view head, absl::string_view body, absl::Time deadline,
      const std::function<void(uint32_t tag)>& started = nullptr);

  // Breaks the channel: calls in flight end with Unavailable. Never blocks.
  void Shutdown();
  bool broken() const;
  // Calls started and not yet ended.
  size_t in_flight() const;
  const std::string& address() const { return address_; }

 private:
  class Core;
  FramedChannel(std::shared_ptr<Core> core, std::string address);

  const std::shared_ptr<Core> core_;
  const std::string address_;
  std::thread reader_;
};

}  // namespace cohort::rpc

#endif  // COHORT_RPC_FRAMED_CHANNEL_H_
