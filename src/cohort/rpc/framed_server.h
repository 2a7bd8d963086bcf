// FramedServer: cohort's one non-gRPC server transport, for the hot paths
// where a gRPC unary call costs too much (barrier syncs today; tensors and
// fast control paths next). Frames, handshake and replies are in frame.h.
//
//   class Echo : public FramedServer::Handler {
//     void OnRequest(const std::shared_ptr<FramedConnection>& c,
//                    std::string request) override {
//       c->Reply(absl::StatusCode::kOk, request);
//     }
//     void OnClose(const std::shared_ptr<FramedConnection>&) override {}
//   };
//   FramedServerOptions options;
//   options.job_token = token;
//   COHORT_ASSIGN_OR_RETURN(auto server, FramedServer::Start(options, &echo));
//
// Security and bounds, all enforced before anything is allocated for a peer:
//   - every connection must prove the job token (HMAC over a fresh nonce)
//     within `handshake_timeout`, sending at most kMaxHandshakeFrame bytes;
//     a wrong proof is answered Unauthenticated and closed; no request of an
//     unauthenticated peer ever reaches the handler;
//   - frames longer than `max_frame_bytes` close the connection, and so
//     does sending part of a frame and then nothing for
//     `frame_idle_timeout` (an idle connection between frames stays);
//   - at most `max_connections` connections, of which at most
//     `max_unauthenticated` may still be in their handshake (the oldest such
//     is dropped for a new one);
//   - replies are queued and written without blocking; a connection whose
//     unsent replies (payloads included) exceed `max_queued_reply_bytes`,
//     or whose socket fails, is closed, so one slow or dead reader never
//     stalls the others (a reply queued behind nothing always passes, so
//     one payload larger than the cap is still delivered);
//   - accepted sockets have TCP keepalive on, so a silently partitioned peer
//     is dropped by the kernel.
// Every connection that is dropped for misbehaving is logged with its peer
// address; nothing a peer sends affects other connections.
//
// Several services, one port: Start() may be given routes, each an identity
// with its own handler. A connection is served by the handler whose identity
// its hello proves (the server's own identity first, then the routes in
// order); a hello that proves none is refused as a wrong token is. So the
// services of a job (the coordination service, the barrier coordinator)
// share one listener, one token and one set of bounds, and a client still
// reaches only the service it named. Without a job token every hello is
// accepted (as above): the route is then the one whose identity the hello's
// proof was made for, else the server's own handler.
//
// Threads: one loop thread accepts, reads, runs the handshake and calls the
// handler (OnRequest, OnClose). Handlers must not block; they reply later
// from any thread through FramedConnection::Reply. A reply made on another
// thread is written at once; one made on the loop thread (the handler
// answering inline, or answering calls that another connection's request
// released) is written when the loop has handled the events at hand, so
// that the replies one event causes for a connection leave in one write.
//
// Thread safety: thread-safe. The handler must outlive the server.
#ifndef COHORT_RPC_FRAMED_SERVER_H_
#define COHORT_RPC_FRAMED_SERVER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/rpc/frame.h"
#include "cohort/rpc/socket.h"

namespace cohort::rpc {

struct FramedServerOptions {
  // Used in log lines and errors ("coordination service (framed)").
  std::string name = "framed server";
  // IPv4 address to listen on, and the port (0: the OS chooses).
  std::string host = "127.0.0.1";
  int port = 0;
  // The secret every client must prove. Empty accepts any client, which
  // Start() refuses beyond loopback unless `insecure` is set.
  std::string job_token;
  // Who this server is, as its clients name it when they connect
  // (FramedClient::Connect's `server_identity`), bound into both handshake
  // proofs (frame.h): a client that meant another server of the job is
  // refused, so a handshake relayed from a dead server's port gets nowhere.
  std::string identity;
  bool insecure = false;
  size_t max_frame_bytes = kDefaultMaxFrame;
  int max_connections = 1024;
  int max_unauthenticated = 64;
  absl::Duration handshake_timeout = absl::Seconds(10);
  // A connection that sent part of a frame and then nothing for this long
  // is closed (a peer that stalls mid-frame holds its buffer and a slot).
  absl::Duration frame_idle_timeout = absl::Seconds(60);
  // A frame must also be finished within frame_idle_timeout of its first
  // byte plus its length at this rate, so that a peer sending one byte
  // just inside every frame_idle_timeout cannot hold a frame open for ever.
  size_t min_frame_bytes_per_second = 64 << 10;
  size_t max_queued_reply_bytes = size_t{256} << 20;
};

// One client connection, as the handler sees it.
class FramedConnection {
 public:
  uint64_t id() const { return id_; }
  // "a.b.c.d:port" of the client.
  const std::string& peer() const { return peer_; }

  // Queues one reply frame and writes what the socket takes now; the loop
  // writes the rest. Never blocks. A reply to a closed connection is
  // dropped (the handler's OnClose has run or is about to run). If the
  // queue would exceed the cap or the socket fails, the connection is
  // closed. Thread-safe.
  void Reply(absl::StatusCode code, absl::string_view body);

  // Queues the reply to tagged request `tag` (frame.h, "Tagged calls"):
  // the body follows the tag. Otherwise as Reply().
  void ReplyTagged(uint32_t tag, absl::StatusCode code, absl::string_view body);

  // Bulk data sent without copying: `data` points at `size` bytes that
  // `keepalive` keeps valid (e.g. a tensor's buffer) until the loop wrote
  // them or the connection closed; the reference is dropped on whichever
  // thread finishes the write or the close.
  struct Payload {
    const char* data = nullptr;
    size_t size = 0;
    std::shared_ptr<const void> keepalive;
  };
  // Queues a payload reply (frame.h): an OK frame carrying `header` and the
  // payload's length, then the payload's bytes straight from its memory
  // (writev; no copy). Never blocks. The queue cap counts the payload, but
  // a reply queued while nothing else is waiting always passes, so one
  // payload up to the handler's own limit is never refused; a second one
  // queued behind an unread first is. Otherwise as Reply(). Thread-safe.
  void ReplyWithPayload(absl::string_view header, Payload payload);

  // Drops the connection (a peer that broke the handler's protocol); the
  // loop logs `reason` with the peer's address and calls OnClose. Replies
  // not yet written are discarded. Thread-safe, never blocks.
  void Close(std::string reason);

 private:
  friend class FramedServer;
  FramedConnection(class FramedServer* server, int fd, uint64_t id,
                   std::string peer, size_t max_handshake_frame);

  // One queued piece of output: owned bytes (frames), or borrowed payload
  // bytes kept alive by `keepalive`.
  struct Segment {
    std::string owned;
    const char* data = nullptr;
    size_t size = 0;
    std::shared_ptr<const void> keepalive;
  };

  // Appends `frames` (and `payload`, if any) to the queue and writes what
  // the socket takes. On overflow or a socket error, marks the connection
  // broken and asks the loop to close it.
  void Send(std::string frames, Payload payload);
  // Writes queued bytes; arms or disarms EPOLLOUT. Returns false (with
  // broken_reason_ set) when the connection must close.
  bool FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `written` bytes from the front of the queue.
  void ConsumeLocked(size_t written) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkBrokenLocked(std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  FramedServer* const server_;
  // Valid until the loop closes it (under mu_, setting closed_); only the
  // loop thread reads from it.
  const int fd_;
  const uint64_t id_;
  const std::string peer_;

  // Loop thread only.
  FrameReader reader_;
  bool authenticated_ = false;
  // The service the handshake chose (FramedServer::services_); set with
  // authenticated_.
  size_t service_ = 0;
  // When bytes last arrived, and whether the connection is queued as being
  // mid-frame (FramedServer::midframe_).
  absl::Time last_read_;
  bool midframe_queued_ = false;
  // Frames read so far, and since when the partial frame at the front of
  // reader_ (frame number partial_frame_) has been arriving: a frame must
  // be finished by a deadline from its start, however it trickles in.
  uint64_t frames_read_ = 0;
  uint64_t partial_frame_ = ~uint64_t{0};
  absl::Time partial_since_;
  absl::Time handshake_deadline_;
  std::string nonce_;

  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Output not yet written, oldest first; the first `out_offset_` bytes of
  // the front segment are written. `out_bytes_` is the unwritten total.
  std::deque<Segment> out_ ABSL_GUARDED_BY(mu_);
  size_t out_offset_ ABSL_GUARDED_BY(mu_) = 0;
  size_t out_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool want_write_ ABSL_GUARDED_BY(mu_) = false;
  // Output queued by the loop thread and not yet flushed: the loop writes
  // it once the events at hand are handled, so that the replies one event
  // causes (a barrier releasing every task of a process) leave in one
  // write.
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  // Set once the connection must go; the loop closes it.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  std::string broken_reason_ ABSL_GUARDED_BY(mu_);
};

class FramedServer {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // A request from an authenticated connection. Loop thread; must not
    // block. Reply (now or later, from any thread) with c->Reply().
    virtual void OnRequest(const std::shared_ptr<FramedConnection>& c,
                           std::string request) = 0;
    // The connection is gone (peer closed, error, misbehaviour, server
    // stop); replies to it are dropped from now on. Called once per
    // authenticated connection, on the loop thread or in ~FramedServer.
    virtual void OnClose(const std::shared_ptr<FramedConnection>& c) = 0;
  };

  // Another service on the same listener (see "Several services, one port"
  // above). The handler must outlive the server.
  struct Route {
    std::string identity;
    Handler* handler = nullptr;
  };

  // Listens on options.host:0. InvalidArgument for bad options (or an empty
  // token beyond loopback without `insecure`), a route without a handler, or
  // two services with one identity; Unavailable when it cannot listen. Never
  // blocks beyond the bind.
  static absl::StatusOr<std::unique_ptr<FramedServer>> Start(
      FramedServerOptions options, Handler* handler,
      std::vector<Route> routes = {});
  // Stops the loop and closes every connection (OnClose for each).
  ~FramedServer();

  FramedServer(const FramedServer&) = delete;
  FramedServer& operator=(const FramedServer&) = delete;

  // "host:port" with the bound port.
  const std::string& address() const { return address_; }
  // Open connections, authenticated or not (for tests and status).
  int num_connections() const { return num_connections_.load(); }

 private:
  friend class FramedConnection;
  FramedServer(FramedServerOptions options, Handler* handler,
               std::vector<Route> routes);

  // The service whose identity `hello` proves, or nullptr (refuse).
  const Route* MatchHello(const FramedConnection& c,
                          absl::string_view hello) const;

  void Loop();
  void Accept();
  void OnEvent(const std::shared_ptr<FramedConnection>& c, uint32_t events);
  // Reads what is there and handles complete frames; false: close.
  bool ReadFrames(FramedConnection& c, std::string* why);
  bool HandleFrame(const std::shared_ptr<FramedConnection>& c,
                   std::string payload, std::string* why);
  void CloseConnection(const std::shared_ptr<FramedConnection>& c,
                       const std::string& why);
  // Closes handshakes past their deadline; returns the next deadline.
  absl::Time CloseExpiredHandshakes(absl::Time now);
  // When the partial frame of `c` must be finished: frame_idle_timeout
  // after its first byte plus its announced length at
  // min_frame_bytes_per_second.
  absl::Time FrameDeadline(const FramedConnection& c) const;
  // Closes connections stalled mid-frame past frame_idle_timeout; returns
  // the next such deadline.
  absl::Time CloseStalledFrames(absl::Time now);
  // Asks the loop to close connection `id` (from any thread).
  void ReportBroken(uint64_t id);
  void Wake();
  // Writes the output the loop thread queued (FramedConnection::dirty_).
  void FlushDirty();
  bool InLoopThread() const {
    return loop_thread_.load(std::memory_order_relaxed) ==
           std::this_thread::get_id();
  }

  const FramedServerOptions options_;
  // The server's own service first (options_.identity, the handler given to
  // Start), then the routes.
  const std::vector<Route> services_;
  std::string address_;
  UniqueFd listen_fd_;
  UniqueFd epoll_fd_;
  UniqueFd wake_fd_;
  std::thread loop_;
  // Publishes connections_.size() to other threads (relaxed is enough: it is
  // a statistic).
  std::atomic<int> num_connections_{0};
  std::atomic<bool> stopping_{false};
  // The loop thread's id, set when it starts.
  std::atomic<std::thread::id> loop_thread_{};

  // Loop thread only (and the destructor after the loop ended).
  absl::flat_hash_map<uint64_t, std::shared_ptr<FramedConnection>> connections_;
  uint64_t next_id_ = 2;  // 0 and 1 tag the listener and the wake fd
  // Ids of connections in their handshake, oldest first (entries of
  // connections that finished it or closed are skipped lazily).
  std::deque<uint64_t> handshaking_;
  int unauthenticated_ = 0;
  // Connections with output the loop thread queued (FlushDirty).
  std::vector<uint64_t> dirty_;
  // Connections holding part of a frame, with when their bytes last arrived
  // as of queueing, oldest first (re-queued when they progressed, dropped
  // lazily when they closed or finished the frame).
  std::deque<std::pair<uint64_t, absl::Time>> midframe_;
  // Held open so that accept() can shed a connection when fds run out.
  UniqueFd spare_fd_;

  // Connections that other threads found broken; the loop closes them.
  absl::Mutex broken_mu_;
  std::vector<uint64_t> broken_ ABSL_GUARDED_BY(broken_mu_);
};

}  // namespace cohort::rpc

#endif  // COHORT_RPC_FRAMED_SERVER_H_
