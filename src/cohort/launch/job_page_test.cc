#include "cohort/launch/job_page.h"

#include <fstream>
#include <string>

#include "cohort/base/fake_env.h"
#include "cohort/launch/job_board.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace cohort::launch {
namespace {

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

class JobPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobPageSource source;
    source.status = [] {
      Json j;
      j["job_state"] = "running";
      j["tasks"] =
          Json::array({Json{{"task", "worker:0"}, {"state", "connected"}}});
      j["barriers"] = Json::array();
      return absl::StatusOr<Json>(j);
    };
    source.attempts = [] { return Json::array({Json{{"attempt", 0}}}); };
    source.metrics = &history_;
    source.log = [](const std::string& task) -> absl::StatusOr<std::string> {
      if (task != "worker:0") return absl::NotFoundError("no task " + task);
      return std::string("line 1\nsecret line 2\n");
    };
    auto page = JobPage::Start("127.0.0.1:0", kToken, std::move(source));
    ASSERT_TRUE(page.ok()) << page.status();
    page_ = *std::move(page);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", page_->port());
  }
  httplib::Headers Bearer(const std::string& token = kToken) {
    return {{"Authorization", "Bearer " + token}};
  }

  coord::MetricsHistory history_;
  std::unique_ptr<JobPage> page_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(JobPageTest, EveryPathNeedsTheToken) {
  for (const char* path :
       {"/", "/app.js", "/api/v1/job", "/api/v1/tasks", "/api/v1/barriers",
        "/api/v1/attempts", "/api/v1/metrics", "/api/v1/logs/worker:0"}) {
    auto none = client_->Get(path);
    ASSERT_TRUE(none) << path;
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_EQ(none->body.find("secret"), std::string::npos);
    EXPECT_EQ(none->body.find("worker:0"), std::string::npos) << path;
    auto wrong = client_->Get(path, Bearer("f123456789abcdef0123456789abcdef"));
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 401) << path;
    auto right = client_->Get(path, Bearer());
    ASSERT_TRUE(right);
    EXPECT_EQ(right->status, 200) << path;
    auto page_token = client_->Get(path, Bearer(PageToken(kToken)));
    ASSERT_TRUE(page_token);
    EXPECT_EQ(page_token->status, 200) << path;
  }
  auto log = client_->Get("/api/v1/logs/worker:0", Bearer());
  EXPECT_EQ(log->body, "line 1\nsecret line 2\n");
  auto tasks = client_->Get("/api/v1/tasks", Bearer());
  EXPECT_EQ(
      tasks->body,
      R"({"job_state":"running","tasks":[{"state":"connected","task":"worker:0"}]})");
  // Every answer forbids content from elsewhere and framing.
  EXPECT_EQ(tasks->get_header_value("X-Frame-Options"), "DENY");
  EXPECT_NE(tasks->get_header_value("Content-Security-Policy")
                .find("default-src 'self'"),
            std::string::npos);
}

TEST_F(JobPageTest, TheUrlCarriesAPageTokenThatBecomesACookie) {
  const std::string page_token = PageToken(kToken);
  ASSERT_NE(page_token, kToken);
  EXPECT_EQ(page_->url(), absl::StrCat("http://127.0.0.1:", page_->port(),
                                       "/?token=", page_token));
  auto wrong = client_->Get("/?token=nope");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_FALSE(wrong->has_header("Set-Cookie"));
  // The page itself, not a redirect: a SameSite=Strict cookie would not be
  // sent on a redirect another site started.
  auto right = client_->Get(absl::StrCat("/?token=", page_token));
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200);
  EXPECT_NE(right->body.find("<script src=\"/app.js\""), std::string::npos);
  const std::string cookie_name = absl::StrCat("cohort_page_", page_->port());
  EXPECT_EQ(right->get_header_value("Set-Cookie"),
            absl::StrCat(cookie_name, "=", page_token,
                         "; Path=/; HttpOnly; SameSite=Strict"));
  auto with_cookie = client_->Get(
      "/api/v1/job",
      {{"Cookie", absl::StrCat("a=b; ", cookie_name, "=", page_token)}});
  ASSERT_TRUE(with_cookie);
  EXPECT_EQ(with_cookie->status, 200);
  auto job = ParseJson(with_cookie->body, "job");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["attempts"][0]["attempt"], 0);
  // Another port's cookie, or the job token in a cookie, is no key here.
  for (const std::string& cookie : {absl::StrCat("cohort_page_1=", page_token),
                                    absl::StrCat(cookie_name, "=", kToken)}) {
    auto other = client_->Get("/api/v1/job", {{"Cookie", cookie}});
    ASSERT_TRUE(other);
    EXPECT_EQ(other->status, 401) << cookie;
  }
}

TEST_F(JobPageTest, OnlyGetAndOnlyTaskNamesInLogPaths) {
  auto post = client_->Post("/api/v1/tasks", Bearer(), "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  auto traversal =
      client_->Get("/api/v1/logs/..%2f..%2fetc%2fpasswd", Bearer());
  ASSERT_TRUE(traversal);
  EXPECT_EQ(traversal->status, 404);
  auto unknown = client_->Get("/api/v1/logs/worker:7", Bearer());
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_NE(unknown->body.find("no task worker:7"), std::string::npos);
  EXPECT_NE(traversal->body.find("is not a task name"), std::string::npos)
      << traversal->body;
}

TEST(JobPageStartTest, BadAddressesAndNoTokenAreRefused) {
  EXPECT_EQ(JobPage::Start("127.0.0.1:0", "", {}).status().message(),
            "the job page needs the job token: it never serves without one");
  EXPECT_EQ(ParseUiAddress("host:x", "--ui").status().message(),
            "--ui: expected [HOST:]PORT with PORT in 0..65535, got \"host:x\"");
  EXPECT_FALSE(ParseUiAddress("70000", "--ui").ok());
  auto a = ParseUiAddress("8265", "--ui");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(a->second, 8265);
  EXPECT_TRUE(absl::IsInvalidArgument(
      JobPage::Start("localhost:0", kToken, {}).status()));
}

TEST(JobPageStartTest, MergeAddsProcessesAndRoles) {
  Json status;
  status["tasks"] =
      Json::array({Json{{"task", "ps:0"}}, Json{{"task", "worker:1"}}});
  Json processes;
  processes["worker:1"] = Json{{"pid", 42}, {"restarts", 1}};
  MergeTaskProcesses(processes, status);
  EXPECT_EQ(
      JsonDump(status),
      R"({"tasks":[{"role":"ps","task":"ps:0"},{"pid":42,"restarts":1,"role":"worker","task":"worker:1"}]})");
}

TEST(MetricsSamplerTest, KeepsOnlyValuesFiledUnderTheirOwnTask) {
  FakeEnv env;
  coord::TaskMetrics good;
  good.task = "worker:0";
  good.global_step = 5;
  good.time_unix_ms = 1;
  coord::TaskMetrics liar = good;
  liar.task = "worker:1";
  std::vector<std::pair<std::string, std::string>> entries = {
      {coord::MetricsKey("worker:0"), coord::EncodeTaskMetrics(good)},
      // Claims to be worker:1 but sits under worker:2's key.
      {coord::MetricsKey("worker:2"), coord::EncodeTaskMetrics(liar)},
      {coord::MetricsKey("worker:3"), "not json"},
  };
  MetricsSampler sampler(
      &env, [&] { return absl::StatusOr<decltype(entries)>(entries); },
      absl::Hours(1), nullptr, absl::Hours(1));
  sampler.SampleOnce();
  auto latest = sampler.history().Latest();
  ASSERT_EQ(latest.size(), 1u);
  EXPECT_EQ(latest[0].task, "worker:0");
}

TEST(MetricsJsonTest, ChartsGetEvenlySpreadPointsEndingWithTheNewest) {
  coord::MetricsHistory history(1000);
  for (int i = 0; i < 250; ++i) {
    coord::TaskMetrics m;
    m.task = "worker:0";
    m.global_step = i;
    m.time_unix_ms = 1000 + i;
    history.Add(m);
  }
  Json j = MetricsJson(history, absl::FromUnixMillis(2000));
  const Json& series = j["series"]["worker:0"];
  // 250 points, every 3rd counted back from the newest: 249, 246, ..., 0.
  ASSERT_EQ(series.size(), 84u);
  EXPECT_EQ(series.front()["step"], 0);
  EXPECT_EQ(series.back()["step"], 249);
  EXPECT_EQ(series[1]["step"], 3);
  EXPECT_LE(series.size(), kMaxChartPoints);
  EXPECT_EQ(j["progress"]["global_step"], 249);
}

TEST(TailOfFileTest, LastLinesFromTheLastBytes) {
  const std::string path = ::testing::TempDir() + "/tail_of_file.log";
  {
    std::ofstream f(path);
    for (int i = 0; i < 1000; ++i) f << "line " << i << "\n";
  }
  auto tail = TailOfFile(path, 3, 1 << 20);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(*tail, "line 997\nline 998\nline 999\n");
  // 20 bytes hold "line 998\nline 999\n" and part of 997, which is dropped.
  tail = TailOfFile(path, 10, 20);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(*tail, "line 998\nline 999\n");
  EXPECT_TRUE(absl::IsNotFound(TailOfFile(path + ".missing", 3, 100).status()));
}

}  // namespace
}  // namespace cohort::launch
