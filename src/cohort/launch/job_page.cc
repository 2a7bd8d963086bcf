#include "cohort/launch/job_page.h"

#include <openssl/crypto.h>

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/launch/job_page_assets.h"
#include "cohort/rpc/job_token.h"

namespace cohort::launch {
namespace {

bool SameToken(absl::string_view a, const std::string& b) {
  return a.size() == b.size() &&
         CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// What every answer carries: nothing from elsewhere, no framing, no
// sniffing, no caching of job data, no referrer.
void Secure(rpc::HttpResponse& res) {
  res.headers.emplace_back(
      "Content-Security-Policy",
      "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
      "base-uri 'none'; form-action 'none'");
  res.headers.emplace_back("X-Content-Type-Options", "nosniff");
  res.headers.emplace_back("X-Frame-Options", "DENY");
  res.headers.emplace_back("Referrer-Policy", "no-referrer");
  res.headers.emplace_back("Cache-Control", "no-store");
}

rpc::HttpResponse JsonAnswer(const Json& j, int status = 200) {
  rpc::HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = JsonDump(j);
  return r;
}

rpc::HttpResponse ErrorAnswer(int status, const std::string& message) {
  Json j;
  j["error"] = message;
  return JsonAnswer(j, status);
}

rpc::HttpResponse Asset(const char* content, const char* type) {
  rpc::HttpResponse r;
  r.content_type = type;
  r.body = content;
  return r;
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

Json MetricsJson(const coord::MetricsHistory& history, absl::Time now) {
  Json out;
  out["series"] = Json::object();
  for (const auto& [task, points] : history.Series()) {
    Json series = Json::array();
    // Every stride-th point, counted back from the newest.
    const size_t stride =
        (points.size() + kMaxChartPoints - 1) / kMaxChartPoints;
    for (size_t i = (points.size() - 1) % std::max<size_t>(stride, 1);
         i < points.size(); i += std::max<size_t>(stride, 1)) {
      const coord::TaskMetrics& m = points[i];
      Json p;
      p["t"] = m.time_unix_ms;
      p["step"] = m.global_step;
      p["loss"] = m.loss.has_value() ? Json(*m.loss) : Json();
      p["examples_per_sec"] = m.examples_per_sec;
      series.push_back(p);
    }
    out["series"][task] = series;
  }
  const coord::JobProgress p = coord::ProgressOf(history.Latest(), now);
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

std::string PageToken(const std::string& job_token) {
  return rpc::DeriveFromToken(job_token, "cohort job page v1");
}

absl::StatusOr<std::unique_ptr<JobPage>> JobPage::Start(
    const std::string& address, const std::string& job_token,
    JobPageSource source) {
  if (job_token.empty()) {
    return absl::InvalidArgumentError(
        "the job page needs the job token: it never serves without one");
  }
  COHORT_ASSIGN_OR_RETURN(auto where, ParseUiAddress(address, "--ui"));
  std::unique_ptr<JobPage> page(
      new JobPage(where.first, job_token, std::move(source)));
  rpc::HttpGetServer::Options o;
  o.host = where.first;
  o.port = where.second;
  absl::StatusOr<std::unique_ptr<rpc::HttpGetServer>> server =
      rpc::HttpGetServer::Start(o, [p = page.get()](const rpc::HttpRequest& r) {
        return p->Answer(r);
      });
  if (absl::IsInvalidArgument(server.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ui ", address, ": ", server.status().message(),
                     "; the page listens on a dotted IPv4 address"));
  }
  if (!server.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "the job page cannot listen on ", address, ": ",
        server.status().message(),
        "; pick another --ui (a dotted IPv4 address of this machine and a "
        "free port)"));
  }
  page->server_ = *std::move(server);
  page->cookie_ = absl::StrCat("cohort_page_", page->server_->port());
  page->started_.Notify();
  return page;
}

JobPage::JobPage(std::string host, const std::string& job_token,
                 JobPageSource source)
    : host_(std::move(host)),
      job_token_(job_token),
      page_token_(PageToken(job_token)),
      source_(std::move(source)) {}

// The server goes first: its threads call Answer, which reads the rest.
JobPage::~JobPage() { server_.reset(); }

int JobPage::port() const { return server_->port(); }

std::string JobPage::url() const {
  return absl::StrCat("http://", host_, ":", port(), "/?token=", page_token_);
}

bool JobPage::Authorized(const rpc::HttpRequest& req) const {
  auto auth = req.headers.find("authorization");
  if (auth != req.headers.end()) {
    absl::string_view bearer = auth->second;
    if (absl::ConsumePrefix(&bearer, "Bearer ")) {
      return SameToken(bearer, page_token_) || SameToken(bearer, job_token_);
    }
    return false;
  }
  auto cookies = req.headers.find("cookie");
  if (cookies == req.headers.end()) return false;
  for (absl::string_view cookie : absl::StrSplit(cookies->second, ';')) {
    cookie = absl::StripAsciiWhitespace(cookie);
    if (absl::ConsumePrefix(&cookie, cookie_) &&
        absl::ConsumePrefix(&cookie, "=")) {
      return SameToken(cookie, page_token_);
    }
  }
  return false;
}

rpc::HttpResponse JobPage::Answer(const rpc::HttpRequest& req) {
  // A request can arrive between the bind and the end of Start, which
  // names the cookie after the bound port.
  rpc::HttpResponse res =
      started_.WaitForNotificationWithTimeout(absl::Seconds(5))
          ? Route(req)
          : ErrorAnswer(503, "the job page is starting; try again");
  Secure(res);
  return res;
}

rpc::HttpResponse JobPage::Route(const rpc::HttpRequest& req) {
  if (req.path == "/" && req.query.count("token") > 0) {
    const std::string& token = req.query.at("token");
    if (!SameToken(token, page_token_) && !SameToken(token, job_token_)) {
      return ErrorAnswer(401, "wrong token for this job's page");
    }
    // The page itself, with a cookie that carries the page's token from now
    // on (the page's script takes the token out of the address bar). Served
    // here rather than redirected: a SameSite=Strict cookie is not sent on a
    // redirect that another site started.
    rpc::HttpResponse r = Asset(kJobPageHtml, "text/html; charset=utf-8");
    r.headers.emplace_back("Set-Cookie",
                           absl::StrCat(cookie_, "=", page_token_,
                                        "; Path=/; HttpOnly; SameSite=Strict"));
    return r;
  }
  if (!Authorized(req)) {
    return ErrorAnswer(
        401,
        "the job page needs its token: open the URL the launcher printed "
        "(`job page: ...`), or send `Authorization: Bearer TOKEN` with the "
        "job token (the file job-token in the job's log directory)");
  }
  if (req.path == "/") return Asset(kJobPageHtml, "text/html; charset=utf-8");
  if (req.path == "/app.js") {
    return Asset(kJobPageScript, "text/javascript; charset=utf-8");
  }
  if (req.path == "/app.css")
    return Asset(kJobPageStyle, "text/css; charset=utf-8");
  absl::string_view path = req.path;
  if (!absl::ConsumePrefix(&path, "/api/v1/")) {
    return ErrorAnswer(404, absl::StrCat("no page at ", req.path));
  }
  if (absl::ConsumePrefix(&path, "logs/")) return Log(std::string(path));
  if (path == "attempts") {
    Json j;
    j["attempts"] = Attempts();
    return JsonAnswer(j);
  }
  if (path == "metrics") return JsonAnswer(Metrics());
  if (path != "job" && path != "tasks" && path != "barriers") {
    return ErrorAnswer(404, absl::StrCat("no API at ", req.path));
  }
  absl::StatusOr<Json> st = source_.status();
  if (!st.ok()) {
    return ErrorAnswer(
        503, absl::StrCat("the job's coordination service did not answer: ",
                          st.status().message()));
  }
  Json j;
  if (path != "barriers") {
    j["job_state"] = st->value("job_state", "");
    j["tasks"] = st->value("tasks", Json::array());
  }
  if (path != "tasks") j["barriers"] = st->value("barriers", Json::array());
  if (path == "job") {
    j["attempts"] = Attempts();
    j["metrics"] = Metrics();
    j["now_unix_ms"] = absl::ToUnixMillis(absl::Now());
  }
  return JsonAnswer(j);
}

Json JobPage::Attempts() const {
  return source_.attempts ? source_.attempts() : Json::array();
}

Json JobPage::Metrics() const {
  return source_.metrics != nullptr
             ? MetricsJson(*source_.metrics, absl::Now())
             : MetricsJson(coord::MetricsHistory(), absl::Now());
}

rpc::HttpResponse JobPage::Log(const std::string& task) const {
  if (!coord::TaskId::Parse(task).ok()) {
    return ErrorAnswer(
        404, absl::StrCat("\"", task, "\" is not a task name (JOB:INDEX)"));
  }
  if (!source_.log) {
    return ErrorAnswer(
        404,
        absl::StrCat("this page reads only the coordination service; ", task,
                     "'s log is in the --log-dir of the launcher "
                     "that runs it"));
  }
  absl::StatusOr<std::string> log = source_.log(task);
  if (!log.ok()) return ErrorAnswer(404, std::string(log.status().message()));
  rpc::HttpResponse r;
  r.body = *std::move(log);
  return r;
}

MetricsSampler::MetricsSampler(
    Env* env, List list, absl::Duration every,
    std::function<void(const std::string&)> progress,
    absl::Duration progress_every,
    std::function<bool(const std::string&)> known_task)
    : env_(env),
      list_(std::move(list)),
      every_(every),
      progress_(std::move(progress)),
      progress_every_(progress_every),
      known_task_(std::move(known_task)) {
  {
    absl::MutexLock lock(&progress_mu_);
    next_progress_ = env->Now() + progress_every;
  }
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
  const int64_t now_ms = absl::ToUnixMillis(env_->Now());
  for (const auto& [key, value] : *entries) {
    absl::StatusOr<coord::TaskMetrics> m = coord::DecodeTaskMetrics(value, key);
    // A value is filed under the task its key names, whatever it claims,
    // and only the job's tasks have a series.
    if (!m.ok() || coord::MetricsKey(m->task) != key) continue;
    if (known_task_ && !known_task_(m->task)) continue;
    m->received_unix_ms = now_ms;
    history_.Add(*m);
  }
}

void MetricsSampler::Progress() {
  if (!progress_) return;
  const std::string line =
      coord::ProgressLine(coord::ProgressOf(history_.Latest(), env_->Now()));
  if (!line.empty() && line != last_progress_) {
    progress_(line);
    last_progress_ = line;
  }
}

void MetricsSampler::StartProgress() {
  history_.Clear();
  absl::MutexLock lock(&progress_mu_);
  progress_on_ = true;
  last_progress_.clear();
  next_progress_ = env_->Now() + progress_every_;
}

void MetricsSampler::EndProgress() {
  absl::MutexLock lock(&progress_mu_);
  if (!progress_on_) return;
  SampleOnce();
  Progress();
  progress_on_ = false;
}

void MetricsSampler::Loop() {
  for (;;) {
    SampleOnce();
    {
      absl::MutexLock lock(&progress_mu_);
      const absl::Time now = env_->Now();
      if (progress_on_ && now >= next_progress_) {
        next_progress_ = now + progress_every_;
        Progress();
      }
    }
    absl::MutexLock lock(&mu_);
    if (env_->AwaitWithDeadline(&mu_, absl::Condition(&stop_),
                                env_->Now() + every_)) {
      return;
    }
  }
}

std::unique_ptr<MetricsSampler> SampleServiceMetrics(
    Env* env, coord::CoordinationService* service,
    const std::vector<TaskSpec>& tasks,
    std::function<void(const std::string&)> progress,
    absl::Duration progress_every) {
  std::set<std::string> names;
  for (const TaskSpec& t : tasks) names.insert(t.Name());
  return std::make_unique<MetricsSampler>(
      env, [service] { return service->ListKeyValueDir(coord::kMetricsDir); },
      absl::Seconds(1), std::move(progress), progress_every,
      [names = std::move(names)](const std::string& task) {
        return names.count(task) > 0;
      });
}

}  // namespace cohort::launch
