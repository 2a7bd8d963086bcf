// The job's page: a web page and a JSON API that show a running job live
// (docs/ui.md). `cohort launch --ui [HOST:]PORT` serves it from the
// launcher; `cohort ui --coordinator ADDR` from any machine that can reach
// the job's coordination service.
//
//   JobPageSource source;
//   source.status = [&] { ... };                 // tasks and barriers
//   COHORT_ASSIGN_OR_RETURN(auto page,
//       JobPage::Start("127.0.0.1:8265", token, std::move(source)));
//   std::cout << page->url();   // http://127.0.0.1:8265/?token=...
//
// Every request needs a token (task logs can hold secrets), on loopback
// too: `Authorization: Bearer TOKEN` (the job token or the page's), the
// page's cookie (cohort_page_<port>, HttpOnly, SameSite=Strict), or
// `/?token=PAGE_TOKEN` (the URL the launcher prints; it answers with the
// page and that cookie, and the page's script takes the token out of the
// address bar). Without it: 401 and no data. The page's token is derived
// from the job token (PageToken): a leaked link shows the page, nothing
// more. The server (rpc/http_get_server.h) takes only GET, caps
// connections, request sizes and times, and answers with a
// Content-Security-Policy that allows nothing from elsewhere (every script
// and style ships in the binary).
//
//   GET /                   the page (polls /api/v1/job every second)
//   GET /api/v1/job         everything below in one object
//   GET /api/v1/tasks       {"job_state", "tasks": [...]}
//   GET /api/v1/barriers    {"barriers": [...]}
//   GET /api/v1/attempts    {"attempts": [...]}
//   GET /api/v1/metrics     {"series": {task: [points]}, "progress": {...}}
//   GET /api/v1/logs/TASK   the task's last 200 log lines (text/plain)
//
// Thread safety: JobPage is thread-safe; the source's functions are called
// from the server's threads, concurrently.
#ifndef COHORT_LAUNCH_JOB_PAGE_H_
#define COHORT_LAUNCH_JOB_PAGE_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/coord/task_metrics.h"
#include "cohort/launch/job_plan.h"
#include "cohort/rpc/http_get_server.h"

namespace cohort::coord {
class CoordinationService;
}

namespace cohort::launch {

struct JobPageSource {
  // The job's status in coord::JobStatusJson's shape; each task may carry
  // its process's fields too (JobBoard::TasksJson, merged by
  // MergeTaskProcesses).
  std::function<absl::StatusOr<Json>()> status;
  // JobBoard::AttemptsJson's shape; null: no attempts known here.
  std::function<Json()> attempts;
  // The training metrics (may be null).
  const coord::MetricsHistory* metrics = nullptr;
  // A task's log tail; null: logs are not kept here (NotFound).
  std::function<absl::StatusOr<std::string>(const std::string& task)> log;
};

// Adds the fields of `processes` ({task: {...}}, JobBoard::TasksJson) to
// the task of the same name in status["tasks"], and "role" (the job name)
// to every task.
void MergeTaskProcesses(const Json& processes, Json& status);

// {"series": {task: [{"t" (unix ms), "step", "loss", "examples_per_sec"}]},
// "progress": {"global_step", "last_step", "examples_per_sec", "eta_s",
// "line"}}, as of `now`. At most kMaxChartPoints points per task (evenly
// spread, the newest kept).
inline constexpr size_t kMaxChartPoints = 120;
Json MetricsJson(const coord::MetricsHistory& history, absl::Time now);

// "[HOST:]PORT" (HOST defaults to 127.0.0.1; PORT 0 picks a free one).
// InvalidArgument naming the flag on anything else.
absl::StatusOr<std::pair<std::string, int>> ParseUiAddress(
    const std::string& text, const std::string& flag);

// The credential the page's URL and cookie carry: HMAC-SHA256 of the job
// token, so a leaked page link shows the page but cannot act as the job's
// token anywhere else.
std::string PageToken(const std::string& job_token);

class JobPage {
 public:
  // Binds `address` ("[HOST:]PORT", HOST a dotted IPv4 address) and
  // serves. InvalidArgument for a bad address or an empty token;
  // Unavailable naming the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<JobPage>> Start(
      const std::string& address, const std::string& job_token,
      JobPageSource source);
  ~JobPage();  // stops serving; no handler runs after it
  JobPage(const JobPage&) = delete;
  JobPage& operator=(const JobPage&) = delete;

  int port() const;
  // The address to open, with the page's token:
  // "http://HOST:PORT/?token=PAGE_TOKEN".
  std::string url() const;

 private:
  JobPage(std::string host, const std::string& job_token, JobPageSource source);
  rpc::HttpResponse Answer(const rpc::HttpRequest& req);
  rpc::HttpResponse Route(const rpc::HttpRequest& req);
  bool Authorized(const rpc::HttpRequest& req) const;
  Json Attempts() const;
  Json Metrics() const;
  rpc::HttpResponse Log(const std::string& task) const;

  const std::string host_;
  const std::string job_token_;
  const std::string page_token_;
  const JobPageSource source_;
  // Per port: two jobs' pages on one host keep their own cookies. Written
  // once by Start before started_ is notified; read by handlers after.
  std::string cookie_;
  absl::Notification started_;
  std::unique_ptr<rpc::HttpGetServer> server_;
};

// Reads the job's metrics directory every `every` into a MetricsHistory
// and, every `progress_every` (when it changed), hands the progress line
// (coord::ProgressLine) to `progress`. Its own thread; the Env's clock.
class MetricsSampler {
 public:
  using List = std::function<
      absl::StatusOr<std::vector<std::pair<std::string, std::string>>>()>;
  // `known_task` (may be null: any task) says which task names are the
  // job's; values under other names are skipped.
  MetricsSampler(Env* env, List list, absl::Duration every,
                 std::function<void(const std::string&)> progress,
                 absl::Duration progress_every,
                 std::function<bool(const std::string&)> known_task = nullptr);
  ~MetricsSampler();  // stops the thread
  MetricsSampler(const MetricsSampler&) = delete;
  MetricsSampler& operator=(const MetricsSampler&) = delete;

  const coord::MetricsHistory& history() const { return history_; }
  // One read of the directory (what the thread does each time). Values a
  // task could not have written (too long, not metrics, under another
  // task's key or a name not the job's) are skipped.
  void SampleOnce();
  // Starts (a new attempt: the history starts afresh) or ends the progress
  // lines. Ending reads the directory once more and hands over the last
  // line when it differs from the one printed; no line comes after.
  void StartProgress();
  void EndProgress();

 private:
  void Loop();
  // Hands the progress line over when it changed.
  void Progress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_mu_);

  Env* const env_;
  const List list_;
  const absl::Duration every_;
  const std::function<void(const std::string&)> progress_;
  const absl::Duration progress_every_;
  const std::function<bool(const std::string&)> known_task_;
  coord::MetricsHistory history_;
  absl::Mutex progress_mu_;
  bool progress_on_ ABSL_GUARDED_BY(progress_mu_) = true;
  absl::Time next_progress_ ABSL_GUARDED_BY(progress_mu_);
  std::string last_progress_ ABSL_GUARDED_BY(progress_mu_);
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The sampler of a launcher that hosts the programs' coordination service
// (`cohort launch -n N`'s, or engine task 0's): reads `service`'s metrics
// directory once a second and keeps only the names of `tasks`. `service`
// must outlive the sampler.
std::unique_ptr<MetricsSampler> SampleServiceMetrics(
    Env* env, coord::CoordinationService* service,
    const std::vector<TaskSpec>& tasks,
    std::function<void(const std::string&)> progress,
    absl::Duration progress_every);

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_JOB_PAGE_H_
