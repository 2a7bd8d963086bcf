#include "cohort/cluster/resolvers/http_client.h"

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cohort/base/fake_env.h"
#include "cohort/cluster/resolvers/gce_metadata.h"
#include "cohort/cluster/resolvers/testing/fake_http_server.h"
#include "cohort/cluster/resolvers/testing/fake_metadata_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

TEST(HttpClientTest, GetAndPostJson) {
  testing::FakeHttpServer server;
  server.server().Get(
      "/hello", [](const httplib::Request& req, httplib::Response& res) {
        testing::FakeHttpServer::Reply(
            res, 200, Json{{"auth", req.get_header_value("Authorization")}});
      });
  server.server().Post("/echo",
                       [](const httplib::Request& req, httplib::Response& res) {
                         res.set_content(req.body, "application/json");
                       });
  ASSERT_TRUE(server.Start().ok());
  HttpClient http;
  auto got = http.GetJson(server.base_url() + "/hello",
                          {{"Authorization", "Bearer t"}}, "");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["auth"], "Bearer t");
  auto echoed =
      http.PostJson(server.base_url() + "/echo", {}, Json{{"a", 1}}, "");
  ASSERT_TRUE(echoed.ok()) << echoed.status();
  EXPECT_EQ(*echoed, (Json{{"a", 1}}));
}

TEST(HttpClientTest, HttpErrorsNameUrlStatusBodyAndHint) {
  testing::FakeHttpServer server;
  server.server().Get("/missing",
                      [](const httplib::Request&, httplib::Response& res) {
                        res.status = 404;
                        res.set_content("no such thing here", "text/plain");
                      });
  server.server().Get("/down",
                      [](const httplib::Request&, httplib::Response& res) {
                        res.status = 503;
                        res.set_content("overloaded", "text/plain");
                      });
  server.server().Get("/notjson",
                      [](const httplib::Request&, httplib::Response& res) {
                        res.set_content("<html>", "text/html");
                      });
  ASSERT_TRUE(server.Start().ok());
  HttpClient http;
  std::string url = server.base_url() + "/missing";
  auto r = http.GetJson(url, {}, "the thing");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(url));
  EXPECT_THAT(r.status().message(), HasSubstr("HTTP 404"));
  EXPECT_THAT(r.status().message(), HasSubstr("no such thing here"));
  EXPECT_THAT(r.status().message(), HasSubstr("check the thing"));
  EXPECT_EQ(http.GetJson(server.base_url() + "/down", {}, "").status().code(),
            absl::StatusCode::kUnavailable);
  auto bad = http.GetJson(server.base_url() + "/notjson", {}, "");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(bad.status().message(), HasSubstr("<html>"));
}

TEST(HttpClientTest, UnreachableServerIsUnavailableNamingTheUrl) {
  std::string url;
  {
    testing::FakeHttpServer server;
    ASSERT_TRUE(server.Start().ok());
    url = server.base_url() + "/api";
  }  // stopped: nothing listens on that port any more
  HttpClient http;
  auto r = http.GetText(url, {}, "that the API server runs");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr(url));
  EXPECT_THAT(r.status().message(),
              HasSubstr("check that the API server runs"));
}

TEST(HttpClientTest, ReadTimeoutBoundsAHangingServer) {
  absl::Notification release;
  testing::FakeHttpServer server;
  server.server().Get(
      "/hang", [&](const httplib::Request&, httplib::Response& res) {
        release.WaitForNotificationWithTimeout(absl::Seconds(10));
        res.set_content("late", "text/plain");
      });
  ASSERT_TRUE(server.Start().ok());
  HttpClient::Options options;
  options.read_timeout = absl::Milliseconds(200);
  HttpClient http(options);
  absl::Time start = absl::Now();
  auto r = http.GetText(server.base_url() + "/hang", {}, "");
  absl::Duration took = absl::Now() - start;
  release.Notify();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("read timeout 200ms"));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(HttpClientTest, MalformedUrls) {
  HttpClient http;
  EXPECT_EQ(http.GetText("no-scheme/x", {}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(http.GetText("ftp://h/x", {}, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UrlEncode("job-name=a b/c"), "job-name%3Da%20b%2Fc");
}

TEST(GceMetadataClientTest, SendsFlavorHeaderAndParses) {
  testing::FakeMetadataServer md("tok-1");
  md.Set("project/project-id", "test-project");
  md.Set("instance/zone", "projects/123/zones/us-central1-c");
  md.Set("instance/network-interfaces/0/ip", "10.128.1.2");
  ASSERT_TRUE(md.Start().ok());
  FakeEnv env;
  GceMetadataClient::Options o;
  o.base_url = md.base_url();
  GceMetadataClient client(&env, o);
  EXPECT_EQ(*client.ProjectId(), "test-project");
  EXPECT_EQ(*client.Zone(), "us-central1-c");
  EXPECT_EQ(*client.LocalIp(), "10.128.1.2");
  EXPECT_EQ(*client.AccessToken(), "tok-1");
  EXPECT_EQ(md.rejected_without_flavor(), 0);
  // The fake enforces the header like the real server.
  HttpClient http;
  auto raw = http.GetText(
      md.base_url() + "/computeMetadata/v1/project/project-id", {}, "");
  EXPECT_EQ(raw.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(md.rejected_without_flavor(), 1);
  auto missing = client.Get("instance/nothing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("GCE metadata server"));
}

TEST(GceMetadataClientTest, BaseUrlFromEnvironment) {
  FakeEnv env;
  EXPECT_EQ(GceMetadataClient(&env, {}).base_url(),
            "http://metadata.google.internal");
  env.SetVar("GCE_METADATA_IP", "169.254.169.254");
  EXPECT_EQ(GceMetadataClient(&env, {}).base_url(), "http://169.254.169.254");
  env.SetVar("GCE_METADATA_HOST", "127.0.0.1:99");
  EXPECT_EQ(GceMetadataClient(&env, {}).base_url(), "http://127.0.0.1:99");
}

}  // namespace
}  // namespace cohort
