#include "cohort/rpc/framed_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/base/status.h"
#include "cohort/rpc/coding.h"

namespace cohort::rpc {

absl::StatusOr<std::unique_ptr<FramedClient>> FramedClient::Connect(
    const std::string& address, const std::string& job_token,
    absl::Time deadline, size_t max_frame_bytes,
    const std::string& server_identity) {
  COHORT_ASSIGN_OR_RETURN(UniqueFd fd, ConnectTcp(address, deadline));
  std::unique_ptr<FramedClient> client(
      new FramedClient(std::move(fd), address, max_frame_bytes));
  // The greeting is tiny: refuse anything larger before buffering it.
  client->reader_.set_max_frame(kMaxHandshakeReply);
  COHORT_ASSIGN_OR_RETURN(std::string greeting,
                          client->ReadFrame(deadline, -1));
  absl::StatusOr<std::string> nonce = ParseGreeting(greeting);
  if (!nonce.ok()) {
    return Annotate(nonce.status(), absl::StrCat("connecting to ", address));
  }
  // Our own nonce: the server must prove it knows the token too.
  const std::string client_nonce = RandomNonce();
  std::string hello;
  AppendFrame(&hello,
              HelloPayload(job_token, *nonce, client_nonce, server_identity));
  COHORT_RETURN_IF_ERROR(client->WriteAll(hello, deadline, -1));
  COHORT_ASSIGN_OR_RETURN(std::string reply, client->ReadFrame(deadline, -1));
  absl::StatusOr<std::string> accepted = ParseReply(std::move(reply));
  if (!accepted.ok()) {
    return Annotate(accepted.status(), absl::StrCat("server ", address));
  }
  if (!VerifyServerProof(job_token, *nonce, client_nonce, *accepted,
                         server_identity)) {
    return absl::UnauthenticatedError(absl::StrCat(
        "server ", address,
        " did not prove it knows the job token: another process may have "
        "bound its port, or it runs with another token; nothing was sent "
        "to it"));
  }
  client->reader_.set_max_frame(max_frame_bytes);
  return client;
}

absl::Status FramedClient::Broken(absl::Status status) {
  broken_.store(true);
  return status;
}

absl::StatusOr<UniqueFd> FramedClient::TakeConnection() {
  if (reader_.buffered() != 0) {
    return Broken(absl::DataLossError(
        absl::StrCat("the server at ", address_,
                     " sent data nobody asked for after its handshake")));
  }
  broken_.store(true);
  return std::move(fd_);
}

bool FramedClient::IdleConnectionClosed() const {
  if (broken_.load()) return true;
  pollfd p{fd_.get(), POLLIN | POLLRDHUP, 0};
  // Between calls nothing may arrive: readable means EOF, a reset, or a
  // stray frame.
  return poll(&p, 1, 0) != 0;
}

void FramedClient::Shutdown() {
  broken_.store(true);
  shutdown(fd_.get(), SHUT_RDWR);
}

absl::Status FramedClient::WriteAll(absl::string_view bytes,
                                    absl::Time deadline, int wake_fd) {
  size_t done = 0;
  while (done < bytes.size()) {
    // Non-blocking, waiting for room with the call's deadline and
    // cancellation: a peer that stopped reading (hung, stopped) must not
    // hold a large request's caller in send().
    const ssize_t n = send(fd_.get(), bytes.data() + done, bytes.size() - done,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      COHORT_RETURN_IF_ERROR(WaitFor(POLLOUT, deadline, wake_fd));
    } else {
      return Broken(SocketError("lost the connection to", errno, address_));
    }
  }
  return absl::OkStatus();
}

absl::Status FramedClient::WaitFor(short events, absl::Time deadline,
                                   int wake_fd) {
  while (true) {
    if (deadline - absl::Now() <= absl::ZeroDuration()) {
      return Broken(absl::DeadlineExceededError(
          absl::StrCat("no answer from ", address_, " before the deadline")));
    }
    pollfd p[2] = {{fd_.get(), events, 0}, {wake_fd, POLLIN, 0}};
    const int r = poll(p, wake_fd >= 0 ? 2 : 1, PollTimeoutMs(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Broken(SocketError("poll() on", errno, address_));
    if (wake_fd >= 0 && (p[1].revents & POLLIN)) {
      return Broken(absl::CancelledError(
          absl::StrCat("call to ", address_, " cancelled")));
    }
    if (r > 0) return absl::OkStatus();
  }
}

absl::StatusOr<std::string> FramedClient::ReadFrame(absl::Time deadline,
                                                    int wake_fd) {
  std::string payload;
  char buf[65536];
  while (true) {
    uint64_t announced = 0;
    switch (reader_.Next(&payload, &announced)) {
      case FrameReader::Result::kFrame:
        return payload;
      case FrameReader::Result::kTooLarge:
        return Broken(absl::DataLossError(absl::StrCat(
            "the server at ", address_, " sent a frame of ", announced,
            " bytes, over this client's cap; closing the connection")));
      case FrameReader::Result::kNeedMore:
        break;
    }
    COHORT_RETURN_IF_ERROR(WaitFor(POLLIN, deadline, wake_fd));
    const ssize_t n = read(fd_.get(), buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0)
      return Broken(SocketError("lost the connection to", errno, address_));
    if (n == 0) {
      return Broken(absl::UnavailableError(
          absl::StrCat("the server at ", address_, " closed the connection")));
    }
    reader_.Append(buf, static_cast<size_t>(n));
  }
}

absl::Status FramedClient::ReadExactly(char* dst, uint64_t size,
                                       absl::Time deadline, int wake_fd) {
  // Whatever arrived together with the reply frame is copied once; the rest
  // (nearly all of a large payload) lands in `dst` directly.
  uint64_t done = reader_.TakeBuffered(dst, size);
  while (done < size) {
    // MSG_DONTWAIT: a blocking recv could not be woken by the deadline or
    // the cancel fd; poll only when the socket is drained.
    const ssize_t n = recv(fd_.get(), dst + done, size - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      COHORT_RETURN_IF_ERROR(WaitFor(POLLIN, deadline, wake_fd));
      continue;
    }
    if (n < 0)
      return Broken(SocketError("lost the connection to", errno, address_));
    return Broken(absl::UnavailableError(absl::StrCat(
        "the server at ", address_, " closed the connection after ", done,
        " of the ", size, " payload bytes it announced (truncated reply)")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FramedClient::CallWithPayload(
    absl::string_view request, const PayloadSink& sink, absl::Time deadline,
    int wake_fd) {
  // The request goes out as a one-way frame would; then the reply is read.
  COHORT_RETURN_IF_ERROR(SendOneWay(request, deadline, wake_fd));
  COHORT_ASSIGN_OR_RETURN(std::string reply, ReadFrame(deadline, wake_fd));
  absl::StatusOr<std::string> body = ParseReply(std::move(reply));
  if (!body.ok()) {
    // A server error carries no payload: the stream is still in step.
    if (absl::IsDataLoss(body.status())) {
      return Broken(Annotate(body.status(), absl::StrCat("server ", address_)));
    }
    return body.status();
  }
  // The announced length is checked before anything is sized by it; any
  // refusal breaks the client, since the payload cannot be skipped.
  absl::StatusOr<PayloadReply> parsed =
      ParsePayloadReply(*body, max_payload_bytes_);
  if (!parsed.ok()) {
    return Broken(Annotate(parsed.status(), absl::StrCat("server ", address_)));
  }
  absl::StatusOr<char*> dst = sink(parsed->header, parsed->payload_bytes);
  if (!dst.ok()) return Broken(dst.status());
  COHORT_RETURN_IF_ERROR(
      ReadExactly(*dst, parsed->payload_bytes, deadline, wake_fd));
  return std::move(parsed->header);
}

absl::Status FramedClient::SendOneWay(absl::string_view request,
                                      absl::Time deadline, int wake_fd) {
  if (broken_.load()) {
    return absl::UnavailableError(absl::StrCat("the connection to ", address_,
                                               " is broken; connect again"));
  }
  std::string frame;
  frame.reserve(request.size() + 4);
  AppendFrame(&frame, request);
  return WriteAll(frame, deadline, wake_fd);
}

absl::StatusOr<std::string> FramedClient::Call(absl::string_view request,
                                               absl::Time deadline,
                                               int wake_fd) {
  return Call(request, absl::string_view(), deadline, wake_fd);
}

absl::StatusOr<std::string> FramedClient::Call(absl::string_view head,
                                               absl::string_view body,
                                               absl::Time deadline,
                                               int wake_fd) {
  if (broken_.load()) {
    return absl::UnavailableError(absl::StrCat("the connection to ", address_,
                                               " is broken; connect again"));
  }
  // A small body rides in the same write as the head; a large one is sent
  // from its own memory.
  const bool join = body.size() < 4096;
  std::string frame;
  frame.reserve(4 + head.size() + (join ? body.size() : 0));
  PutFixed32(&frame, static_cast<uint32_t>(head.size() + body.size()));
  frame.append(head.data(), head.size());
  if (join) frame.append(body.data(), body.size());
  COHORT_RETURN_IF_ERROR(WriteAll(frame, deadline, wake_fd));
  if (!join) COHORT_RETURN_IF_ERROR(WriteAll(body, deadline, wake_fd));
  COHORT_ASSIGN_OR_RETURN(std::string reply, ReadFrame(deadline, wake_fd));
  absl::StatusOr<std::string> parsed = ParseReply(std::move(reply));
  if (!parsed.ok() && absl::IsDataLoss(parsed.status())) {
    return Broken(Annotate(parsed.status(), absl::StrCat("server ", address_)));
  }
  return parsed;
}

}  // namespace cohort::rpc
