// A small HTTP/1.1 server for GET requests, with the caps every cohort
// socket has: the job page's (launch/job_page.h). Debian 12's cpp-httplib
// (0.11) queues accepted connections without a bound, gives a client 5 s
// per read rather than per request, and its stop() can miss a server that
// has not started; a client that trickles bytes could then hold the page,
// exhaust the launcher's file descriptors or keep `cohort launch` from
// exiting. This one:
//  - serves at most `max_connections` connections at once, each on its own
//    thread; one beyond that is closed when accepted;
//  - reads a request (request line and headers, at most
//    `max_request_bytes`; no body) within `request_deadline` from the
//    accept, else closes the connection (431 when it is too long);
//  - answers one request per connection (Connection: close), writing it
//    within `request_deadline` too;
//  - answers 405 to any method but GET, without calling the handler;
//  - on destruction, closes the listener, shuts down every open connection
//    and joins every thread.
//
//   HttpGetServer::Options o;
//   o.host = "127.0.0.1";
//   COHORT_ASSIGN_OR_RETURN(auto server, HttpGetServer::Start(o,
//       [](const HttpRequest& r) { return HttpResponse{200, "text/plain",
//       "hi"}; }));
//
// Thread safety: the handler is called from the connections' threads,
// concurrently.
#ifndef COHORT_RPC_HTTP_GET_SERVER_H_
#define COHORT_RPC_HTTP_GET_SERVER_H_

#include <atomic>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/rpc/socket.h"

namespace cohort::rpc {

struct HttpRequest {
  std::string path;  // percent-decoded, without the query
  // The query's parameters, percent-decoded (the first of each name).
  std::map<std::string, std::string> query;
  // Header names lower-cased; the first of each name.
  std::map<std::string, std::string> headers;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class HttpGetServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  struct Options {
    std::string host = "127.0.0.1";  // dotted IPv4
    int port = 0;                    // 0: the OS picks one
    int max_connections = 16;
    size_t max_request_bytes = 8192;
    absl::Duration request_deadline = absl::Seconds(3);
  };

  // Errors of ListenTcp (InvalidArgument for a host that is not dotted
  // IPv4; the bind's error naming the address).
  static absl::StatusOr<std::unique_ptr<HttpGetServer>> Start(Options options,
                                                              Handler handler);
  ~HttpGetServer();
  HttpGetServer(const HttpGetServer&) = delete;
  HttpGetServer& operator=(const HttpGetServer&) = delete;

  int port() const { return port_; }

 private:
  struct Connection {
    UniqueFd fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  HttpGetServer(Options options, Handler handler, Listener listener,
                UniqueFd wake, int port);
  void AcceptLoop();
  void Serve(Connection* c);
  // Joins and drops the connections whose thread has finished.
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Handler handler_;
  Listener listener_;
  UniqueFd wake_;  // an eventfd: written once to stop the accept loop
  const int port_;
  std::thread accept_thread_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Connection> connections_ ABSL_GUARDED_BY(mu_);
};

// Percent-decodes `text` ("%3A" -> ":", and in a query "+" -> " ") into
// `out`; false for a malformed escape or an encoded NUL.
bool PercentDecode(const std::string& text, bool query, std::string* out);

}  // namespace cohort::rpc

#endif  // COHORT_RPC_HTTP_GET_SERVER_H_
