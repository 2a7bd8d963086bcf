#include "cohort/launch/job_page.h"

#include <openssl/crypto.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cohort/base/status.h"
#include "cohort/launch/job_page_assets.h"
#include "httplib.h"

namespace cohort::launch {
namespace {

constexpr char kCookie[] = "cohort_token";
// Log tails: at most this many lines, from at most this many bytes.
constexpr size_t kLogLines = 200;

bool SameToken(absl::string_view a, const std::string& b) {
  return a.size() == b.size() &&
         CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The token a request presents: the Authorization header's bearer token,
// or the page's cookie.
std::string PresentedToken(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  absl::string_view bearer = auth;
  if (absl::ConsumePrefix(&bearer, "Bearer ")) return std::string(bearer);
  for (absl::string_view cookie :
       absl::StrSplit(req.get_header_value("Cookie"), ';')) {
    cookie = absl::StripAsciiWhitespace(cookie);
    if (absl::ConsumePrefix(&cookie, absl::StrCat(kCookie, "="))) {
      return std::string(cookie);
    }
  }
  return "";
}

void Secure(httplib::Response& res) {
  // Nothing from elsewhere, no framing, no sniffing, no caching of job data.
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; "
                 "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-store");
}

void SendJson(httplib::Response& res, const Json& j) {
  res.set_content(JsonDump(j), "application/json");
}

void SendError(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  Json j;
  j["error"] = message;
  SendJson(res, j);
}

}  // namespace

void MergeTaskProcesses(const Json& processes, Json& status) {
  if (!status.contains("tasks") || !status["tasks"].is_array()) return;
  for (Json& t : status["tasks"]) {
    const std::string name = t.value("task", "");
    t["role"] = name.substr(0, name.find(':'));
    auto it = processes.find(name);
    if (it == processes.end()) continue;
    for (auto f = it->begin(); f != it->end(); ++f) t[f.key()] = f.value();
  }
}

Json MetricsJson(const coord::MetricsHistory& history) {
  Json out;
  out["series"] = Json::object();
  for (const auto& [task, points] : history.Series()) {
    Json series = Json::array();
    for (const coord::TaskMetrics& m : points) {
      Json p;
      p["t"] = m.time_unix_ms;
      p["step"] = m.global_step;
      p["loss"] = m.loss.has_value() ? Json(*m.loss) : Json();
      p["examples_per_sec"] = m.examples_per_sec;
      series.push_back(p);
    }
    out["series"][task] = series;
  }
  const coord::JobProgress p = coord::ProgressOf(history.Latest());
  Json progress;
  progress["global_step"] = p.global_step;
  progress["last_step"] = p.last_step.has_value() ? Json(*p.last_step) : Json();
  progress["examples_per_sec"] = p.examples_per_sec;
  progress["eta_s"] =
      p.eta.has_value() ? Json(absl::ToDoubleSeconds(*p.eta)) : Json();
  progress["line"] = coord::ProgressLine(p);
  out["progress"] = progress;
  return out;
}

absl::StatusOr<std::pair<std::string, int>> ParseUiAddress(
    const std::string& text, const std::string& flag) {
  std::string host = "127.0.0.1";
  absl::string_view port_text = text;
  const size_t colon = text.rfind(':');
  if (colon != std::string::npos) {
    host = text.substr(0, colon);
    port_text = absl::string_view(text).substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
  }
  int port = -1;
  if (host.empty() || !absl::SimpleAtoi(port_text, &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": expected [HOST:]PORT with PORT in 0..65535, got \"", text,
        "\""));
  }
  return std::make_pair(host, port);
}

absl::StatusOr<std::unique_ptr<JobPage>> JobPage::Start(
    const std::string& address, std::string token, JobPageSource source) {
  if (token.empty()) {
    return absl::InvalidArgumentError(
        "the job page needs the job token: it never serves without one");
  }
  COHORT_ASSIGN_OR_RETURN(auto where, ParseUiAddress(address, "--ui"));
  std::unique_ptr<JobPage> page(
      new JobPage(where.first, std::move(token), std::move(source)));
  httplib::Server& s = *page->server_;
  // Small and bounded: a page polls once a second; nothing legitimate
  // sends a body.
  s.new_task_queue = [] { return new httplib::ThreadPool(4); };
  s.set_payload_max_length(4096);
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  s.set_keep_alive_max_count(100);
  page->Route();
  const bool bound = where.second == 0
                         ? (page->port_ = s.bind_to_any_port(where.first)) > 0
                         : s.bind_to_port(where.first, where.second);
  if (!bound) {
    return absl::UnavailableError(absl::StrCat(
        "the job page cannot listen on ", address,
        ": the address is in use or not this machine's; pick another --ui"));
  }
  if (where.second != 0) page->port_ = where.second;
  page->thread_ =
      std::thread([p = page.get()] { p->server_->listen_after_bind(); });
  return page;
}

JobPage::JobPage(std::string host, std::string token, JobPageSource source)
    : host_(std::move(host)),
      token_(std::move(token)),
      source_(std::move(source)),
      server_(std::make_unique<httplib::Server>()) {}

JobPage::~JobPage() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string JobPage::url() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return absl::StrCat("http://", v6 ? "[" : "", host_, v6 ? "]" : "", ":",
                      port_, "/?token=", token_);
}

void JobPage::Route() {
  httplib::Server& s = *server_;
  s.set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) {
        Secure(res);
        if (req.method != "GET") {
          SendError(res, 405, "the job page takes only GET");
          return httplib::Server::HandlerResponse::Handled;
        }
        if (req.path == "/" && req.has_param("token")) {
          if (!SameToken(req.get_param_value("token"), token_)) {
            SendError(res, 401, "wrong job token");
            return httplib::Server::HandlerResponse::Handled;
          }
          // The cookie carries the token from now on; the redirect takes it
          // out of the address bar and the history.
          res.set_header("Set-Cookie",
                         absl::StrCat(kCookie, "=", token_,
                                      "; Path=/; HttpOnly; SameSite=Strict"));
          res.set_redirect("/", 303);
          return httplib::Server::HandlerResponse::Handled;
        }
        if (!SameToken(PresentedToken(req), token_)) {
          SendError(res, 401,
                    "the job page needs the job token: open the URL "
                    "`cohort launch --ui` printed, or send "
                    "`Authorization: Bearer TOKEN` (the token is in the "
                    "job's log directory, file job-token)");
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kJobPageHtml, "text/html; charset=utf-8");
  });
  s.Get("/app.js", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kJobPageScript, "text/javascript; charset=utf-8");
  });
  s.Get("/app.css", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kJobPageStyle, "text/css; charset=utf-8");
  });
  auto status = [this](httplib::Response& res) -> std::optional<Json> {
    absl::StatusOr<Json> j = source_.status();
    if (!j.ok()) {
      SendError(res, 503,
                absl::StrCat("the job's coordination service did not answer: ",
                             j.status().message()));
      return std::nullopt;
    }
    return *std::move(j);
  };
  auto attempts = [this] {
    return source_.attempts ? source_.attempts() : Json::array();
  };
  auto metrics = [this] {
    return source_.metrics != nullptr ? MetricsJson(*source_.metrics)
                                      : MetricsJson(coord::MetricsHistory());
  };
  s.Get("/api/v1/job", [=](const httplib::Request&, httplib::Response& res) {
    std::optional<Json> st = status(res);
    if (!st.has_value()) return;
    Json j;
    j["job_state"] = (*st)["job_state"];
    j["tasks"] = (*st)["tasks"];
    j["barriers"] = (*st)["barriers"];
    j["attempts"] = attempts();
    j["metrics"] = metrics();
    j["now_unix_ms"] = absl::ToUnixMillis(absl::Now());
    SendJson(res, j);
  });
  s.Get("/api/v1/tasks", [=](const httplib::Request&, httplib::Response& res) {
    std::optional<Json> st = status(res);
    if (!st.has_value()) return;
    Json j;
    j["job_state"] = (*st)["job_state"];
    j["tasks"] = (*st)["tasks"];
    SendJson(res, j);
  });
  s.Get("/api/v1/barriers",
        [=](const httplib::Request&, httplib::Response& res) {
          std::optional<Json> st = status(res);
          if (!st.has_value()) return;
          Json j;
          j["barriers"] = (*st)["barriers"];
          SendJson(res, j);
        });
  s.Get("/api/v1/attempts",
        [=](const httplib::Request&, httplib::Response& res) {
          Json j;
          j["attempts"] = attempts();
          SendJson(res, j);
        });
  s.Get("/api/v1/metrics",
        [=](const httplib::Request&, httplib::Response& res) {
          SendJson(res, metrics());
        });
  s.Get(R"(/api/v1/logs/([a-z_0-9]{1,64}:[0-9]{1,6}))",
        [this](const httplib::Request& req, httplib::Response& res) {
          const std::string task = req.matches[1];
          if (!source_.log) {
            SendError(
                res, 404,
                absl::StrCat("logs are kept by the launcher that runs ", task,
                             "; open the page of that launcher "
                             "(cohort launch --ui)"));
            return;
          }
          absl::StatusOr<std::string> log = source_.log(task);
          if (!log.ok()) {
            SendError(res, 404, std::string(log.status().message()));
            return;
          }
          res.set_content(*log, "text/plain; charset=utf-8");
        });
}

MetricsSampler::MetricsSampler(Env* env, List list, absl::Duration every,
                               std::function<void(const std::string&)> progress,
                               absl::Duration progress_every)
    : env_(env),
      list_(std::move(list)),
      every_(every),
      progress_(std::move(progress)),
      progress_every_(progress_every),
      next_progress_(env->Now() + progress_every) {
  thread_ = std::thread([this] { Loop(); });
}

MetricsSampler::~MetricsSampler() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void MetricsSampler::SampleOnce() {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> entries =
      list_();
  if (!entries.ok()) return;  // the next look tries again
  for (const auto& [key, value] : *entries) {
    absl::StatusOr<coord::TaskMetrics> m = coord::DecodeTaskMetrics(value, key);
    // A value is filed under the task its key names, whatever it claims.
    if (!m.ok() || coord::MetricsKey(m->task) != key) continue;
    history_.Add(*m);
  }
}

void MetricsSampler::Loop() {
  for (;;) {
    SampleOnce();
    const absl::Time now = env_->Now();
    if (progress_ && now >= next_progress_) {
      next_progress_ = now + progress_every_;
      const std::string line =
          coord::ProgressLine(coord::ProgressOf(history_.Latest()));
      if (!line.empty() && line != last_progress_) {
        progress_(line);
        last_progress_ = line;
      }
    }
    absl::MutexLock lock(&mu_);
    if (env_->AwaitWithDeadline(&mu_, absl::Condition(&stop_),
                                env_->Now() + every_)) {
      return;
    }
  }
}

}  // namespace cohort::launch
