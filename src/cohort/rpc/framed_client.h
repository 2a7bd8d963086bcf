// FramedClient: the client side of cohort's framed transport (frame.h,
// framed_server.h): one connection, one request at a time.
//
//   COHORT_ASSIGN_OR_RETURN(auto client,
//       FramedClient::Connect("127.0.0.1:4100", token, absl::Now() + 10s));
//   absl::StatusOr<std::string> answer =
//       client->Call(request, absl::Now() + 30s, wake_fd);
//
// Call() returns the server's reply: its body, or the server's error status
// (code and message as the handler gave them). When the failure is the
// connection's own (cannot write, closed, malformed or oversized reply,
// deadline, cancellation), the client is broken(): the stream may hold a
// late reply, so the caller must connect again.
//
// Thread safety: Call() and Connect() are not to be called concurrently on
// one client; Shutdown() may be called from any thread at any time.
#ifndef COHORT_RPC_FRAMED_CLIENT_H_
#define COHORT_RPC_FRAMED_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cohort/rpc/frame.h"
#include "cohort/rpc/socket.h"

namespace cohort::rpc {

class FramedClient {
 public:
  // Connects to "host:port" and proves `job_token` by `deadline`, to the
  // server named `server_identity` (FramedServerOptions::identity; both
  // proofs bind it). Unavailable when the server cannot be reached;
  // Unauthenticated when it refuses the token (or is another server than
  // `server_identity`), or cannot prove the token itself; DeadlineExceeded
  // when the handshake is not done by the deadline; InvalidArgument for a
  // malformed address or a peer that is not a cohort framed server. Every
  // message names the address.
  static absl::StatusOr<std::unique_ptr<FramedClient>> Connect(
      const std::string& address, const std::string& job_token,
      absl::Time deadline, size_t max_frame_bytes = kDefaultMaxFrame,
      const std::string& server_identity = "");

  // Sends `request` and waits for its reply until `deadline`, or until
  // `wake_fd` (if >= 0) becomes readable: Cancelled. Blocks (sending too:
  // a server that stops reading holds the call until either). Transport
  // errors: Unavailable (connection lost), DeadlineExceeded, Cancelled,
  // DataLoss (malformed or oversized reply); each leaves broken() set.
  absl::StatusOr<std::string> Call(absl::string_view request,
                                   absl::Time deadline, int wake_fd = -1);
  // As Call(), with the request made of `head` followed by `body`, sent
  // without joining them (bulk data goes from its memory to the socket).
  absl::StatusOr<std::string> Call(absl::string_view head,
                                   absl::string_view body, absl::Time deadline,
                                   int wake_fd = -1);

  // Where a payload reply's bytes go: given the reply's application header
  // and the announced payload length (already checked against
  // max_payload_bytes()), validates the header and returns memory of
  // exactly that many bytes, which stays valid until the call returns. An
  // error refuses the reply: the call returns it and the client is broken.
  using PayloadSink = std::function<absl::StatusOr<char*>(
      absl::string_view header, uint64_t payload_bytes)>;

  // Sends `request` and waits for a payload reply (frame.h): the header is
  // handed to `sink`, then the payload is received straight into the
  // memory it returned (no intermediate buffer beyond what arrived with the
  // header). Returns the header. Errors as Call()'s, plus: DataLoss naming
  // the server when the reply announces more than max_payload_bytes() or
  // is not a payload reply; Unavailable when the connection ends before the
  // whole payload arrived (truncated); the sink's error. A server error
  // (non-OK reply) is returned as is and leaves the client usable.
  absl::StatusOr<std::string> CallWithPayload(absl::string_view request,
                                              const PayloadSink& sink,
                                              absl::Time deadline,
                                              int wake_fd = -1);

  // Sends `request` and does not wait: for a protocol's one-way messages,
  // which the server answers with nothing (a reply would be taken for the
  // next call's). Errors as Call()'s sending half.
  absl::Status SendOneWay(absl::string_view request, absl::Time deadline,
                          int wake_fd = -1);

  // Cap on payloads this client accepts (default kDefaultMaxPayload).
  void set_max_payload_bytes(uint64_t max) { max_payload_bytes_ = max; }
  uint64_t max_payload_bytes() const { return max_payload_bytes_; }

  // Wakes a blocked Call() (it returns Unavailable) and breaks the client;
  // the server sees the connection end. Thread-safe, never blocks.
  void Shutdown();

  // Hands the authenticated connection to another reader (FramedChannel
  // reads it with a thread of its own); the client is broken afterwards.
  // DataLoss when the server sent something unasked after its handshake.
  absl::StatusOr<UniqueFd> TakeConnection();

  bool broken() const { return broken_.load(); }
  // For a connection with no call in flight: true when the server closed it
  // or sent something unasked (either makes it unusable). Never blocks.
  bool IdleConnectionClosed() const;
  const std::string& address() const { return address_; }

 private:
  FramedClient(UniqueFd fd, std::string address, size_t max_frame_bytes)
      : fd_(std::move(fd)),
        address_(std::move(address)),
        reader_(max_frame_bytes) {}

  // Reads until one frame is complete. Errors as Call()'s.
  absl::StatusOr<std::string> ReadFrame(absl::Time deadline, int wake_fd);
  // Fills `dst` from the stream: bytes already buffered first, then recv()
  // straight into it. Errors as ReadFrame's; Unavailable when truncated.
  absl::Status ReadExactly(char* dst, uint64_t size, absl::Time deadline,
                           int wake_fd);
  // Waits until the socket is ready for `events` (POLLIN, POLLOUT): OK, or
  // the deadline / cancellation / poll error (each breaks the client).
  absl::Status WaitFor(short events, absl::Time deadline, int wake_fd);
  // Sends all of `bytes`, waiting for room as WaitFor does.
  absl::Status WriteAll(absl::string_view bytes, absl::Time deadline,
                        int wake_fd);
  absl::Status Broken(absl::Status status);

  UniqueFd fd_;
  const std::string address_;
  FrameReader reader_;
  uint64_t max_payload_bytes_ = kDefaultMaxPayload;
  // Set by Shutdown() from any thread and by failed calls.
  std::atomic<bool> broken_{false};
};

}  // namespace cohort::rpc

#endif  // COHORT_RPC_FRAMED_CLIENT_H_
