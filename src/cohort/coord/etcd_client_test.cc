// EtcdClient against real etcd 3.4 members (LocalEtcd: a 3-member cluster
// per test on loopback), and ParseEtcdUrl.
#include "cohort/coord/etcd_client.h"

#include <atomic>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "cohort/coord/etcd_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseEtcdUrlTest, EndpointsAndPrefix) {
  absl::StatusOr<EtcdTarget> t =
      ParseEtcdUrl("etcd://10.0.0.1:2379,etcd-1.svc:2380/jobs/resnet");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->endpoints, ElementsAre("10.0.0.1:2379", "etcd-1.svc:2380"));
  EXPECT_EQ(t->prefix, "/jobs/resnet/");
  EXPECT_EQ(t->ToString(), "etcd://10.0.0.1:2379,etcd-1.svc:2380/jobs/resnet");

  t = ParseEtcdUrl("etcd://127.0.0.1:2379");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prefix, "/cohort/");
  t = ParseEtcdUrl("etcd://127.0.0.1:2379/a/");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prefix, "/a/");
}

TEST(ParseEtcdUrlTest, BadInputNamesThePart) {
  struct Case {
    const char* url;
    const char* says;
  } cases[] = {
      {"http://127.0.0.1:2379", "is not an etcd URL"},
      {"etcd://", "'' in 'etcd://' is not HOST:PORT"},
      {"etcd://host", "'host'"},
      {"etcd://host:0", "port in 1..65535"},
      {"etcd://host:70000", "port in 1..65535"},
      {"etcd://a:1,,b:2", "'' in"},
      {"etcd://a:1/x//y", "empty, '.' or '..' segment"},
      {"etcd://a:1/x/../y", "empty, '.' or '..' segment"},
      {"etcd://a:1/x\ny", "control character"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<EtcdTarget> t = ParseEtcdUrl(c.url);
    ASSERT_FALSE(t.ok()) << c.url;
    EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
    EXPECT_THAT(t.status().message(), HasSubstr(c.says)) << c.url;
  }
}

TEST(ReadEtcdCredentialsTest, UserAndPasswordFromAFile) {
  const std::string path = ::testing::TempDir() + "/etcd_credentials";
  std::ofstream(path) << "trainer:s3:cret\n";
  EtcdClientOptions o;
  ASSERT_TRUE(ReadEtcdCredentials(path, o).ok());
  EXPECT_EQ(o.user, "trainer");
  EXPECT_EQ(o.password, "s3:cret");

  std::ofstream(path) << "no-colon\n";
  absl::Status s = ReadEtcdCredentials(path, o);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(path));
  s = ReadEtcdCredentials(path + ".missing", o);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
}

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override { COHORT_START_ETCD_OR_SKIP(etcd_); }
  std::unique_ptr<EtcdClient> Client(
      const std::string& prefix, absl::Duration timeout = absl::Seconds(10)) {
    EtcdClientOptions o;
    o.target = *ParseEtcdUrl(etcd_.Url(prefix));
    o.call_timeout = timeout;
    absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  LocalEtcd etcd_;
};

TEST_F(EtcdClientTest, PutGetListDeleteStayUnderThePrefix) {
  std::unique_ptr<EtcdClient> a = Client("/jobs/a");
  std::unique_ptr<EtcdClient> b = Client("/jobs/b");
  ASSERT_TRUE(a->Put("launch/0/address/0", "h0:1").ok());
  ASSERT_TRUE(a->Put("launch/0/address/1", "h1:2").ok());
  ASSERT_TRUE(a->Put("other", "x").ok());
  ASSERT_TRUE(b->Put("launch/0/address/0", "b0:9").ok());

  absl::StatusOr<std::optional<EtcdKeyValue>> got =
      a->Get("launch/0/address/1");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->key, "launch/0/address/1");
  EXPECT_EQ((*got)->value, "h1:2");

  absl::StatusOr<std::vector<EtcdKeyValue>> dir = a->List("launch/0/address/");
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_EQ(dir->size(), 2u);
  EXPECT_EQ((*dir)[0].key, "launch/0/address/0");
  EXPECT_EQ((*dir)[0].value, "h0:1");
  EXPECT_EQ((*dir)[1].value, "h1:2");

  // b sees only its own key.
  dir = b->List("");
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_EQ(dir->size(), 1u);
  EXPECT_EQ((*dir)[0].value, "b0:9");
  got = b->Get("other");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());

  // Nothing was written outside the two prefixes (read with etcdctl).
  absl::StatusOr<std::string> all =
      etcd_.Ctl({"get", "", "--prefix", "--keys-only"});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all,
            "/jobs/a/launch/0/address/0\n\n/jobs/a/launch/0/address/1\n\n"
            "/jobs/a/other\n\n/jobs/b/launch/0/address/0\n\n");

  absl::StatusOr<int64_t> gone = a->DeleteDir("launch/");
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(*gone, 2);
  gone = a->Delete("other");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, 1);
  dir = a->List("");
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(dir->empty());
  dir = b->List("");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->size(), 1u);  // a's deletes left b's key alone
}

TEST_F(EtcdClientTest, ExactlyOneOfConcurrentCreatesWins) {
  std::unique_ptr<EtcdClient> c = Client("/job");
  constexpr int kWriters = 8;
  std::atomic<int> ready{0};
  std::vector<int> won(kWriters, -1);
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i) {
    writers.emplace_back([&, i] {
      // All start together: the transactions reach etcd concurrently.
      ready.fetch_add(1);
      while (ready.load() < kWriters) std::this_thread::yield();
      absl::StatusOr<bool> created =
          c->Create("verdict", absl::StrCat("worker:", i));
      EXPECT_TRUE(created.ok()) << created.status();
      won[i] = created.ok() && *created ? 1 : 0;
    });
  }
  for (std::thread& t : writers) t.join();
  int winners = 0, winner = -1;
  for (int i = 0; i < kWriters; ++i) {
    winners += won[i];
    if (won[i] == 1) winner = i;
  }
  ASSERT_EQ(winners, 1);
  absl::StatusOr<std::optional<EtcdKeyValue>> v = c->Get("verdict");
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_EQ((*v)->value, absl::StrCat("worker:", winner));
}

TEST_F(EtcdClientTest, CompareAndSwapReturnsWhatTheKeyHeld) {
  std::unique_ptr<EtcdClient> c = Client("/job");
  absl::StatusOr<std::optional<std::string>> held =
      c->CompareAndSwap("generation", std::nullopt, "1");
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(*held, std::nullopt);  // was absent: swapped
  held = c->CompareAndSwap("generation", std::string("0"), "2");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, "1");  // not swapped
  held = c->CompareAndSwap("generation", std::nullopt, "3");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, "1");  // present: not swapped
  held = c->CompareAndSwap("generation", std::string("1"), "2");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, "1");  // swapped
  absl::StatusOr<std::optional<EtcdKeyValue>> v = c->Get("generation");
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_EQ((*v)->value, "2");
}

TEST_F(EtcdClientTest, KeysDieWithTheirLease) {
  std::unique_ptr<EtcdClient> c = Client("/job");
  absl::StatusOr<int64_t> revoked = c->GrantLease(absl::Seconds(30));
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  ASSERT_TRUE(c->Put("alive/launcher:0", "h0", *revoked).ok());
  ASSERT_TRUE(c->KeepAlive(*revoked).ok());
  ASSERT_TRUE(c->RevokeLease(*revoked).ok());
  absl::StatusOr<std::optional<EtcdKeyValue>> v = c->Get("alive/launcher:0");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  absl::Status s = c->KeepAlive(*revoked);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("has expired"));

  // A lease not kept alive expires on its own: the watch sees the delete.
  absl::StatusOr<int64_t> lapsing = c->GrantLease(absl::Seconds(2));
  ASSERT_TRUE(lapsing.ok());
  int64_t revision = 0;
  absl::StatusOr<int64_t> put = c->Put("alive/launcher:1", "h1", *lapsing);
  ASSERT_TRUE(put.ok());
  revision = *put;
  absl::StatusOr<std::vector<EtcdEvent>> events =
      c->Watch("alive/", revision, absl::Seconds(30), nullptr);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_TRUE((*events)[0].deleted);
  EXPECT_EQ((*events)[0].kv.key, "alive/launcher:1");
}

TEST_F(EtcdClientTest, WatchReportsChangesAfterARevision) {
  std::unique_ptr<EtcdClient> c = Client("/job");
  int64_t revision = 0;
  absl::StatusOr<std::optional<EtcdKeyValue>> v = c->Get("done/0", &revision);
  ASSERT_TRUE(v.ok());
  ASSERT_FALSE(v->has_value());
  // A write made before the watch starts, after the read, is not missed.
  ASSERT_TRUE(c->Put("done/0", "exited").ok());
  absl::StatusOr<std::vector<EtcdEvent>> events =
      c->Watch("done/", revision, absl::Seconds(30), nullptr);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_FALSE((*events)[0].deleted);
  EXPECT_EQ((*events)[0].kv.key, "done/0");
  EXPECT_EQ((*events)[0].kv.value, "exited");

  // One that starts while the watch waits wakes it.
  absl::Notification watching;
  std::thread writer([&] {
    watching.WaitForNotification();
    EXPECT_TRUE(c->Put("done/1", "exited").ok());
  });
  const int64_t after = (*events)[0].kv.mod_revision;
  watching.Notify();
  events = c->Watch("done/", after, absl::Seconds(30), nullptr);
  writer.join();
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kv.key, "done/1");
}

TEST_F(EtcdClientTest, WatchEndsAtItsDeadlineOrWhenCancelled) {
  std::unique_ptr<EtcdClient> c = Client("/job");
  int64_t revision = 0;
  ASSERT_TRUE(c->Get("verdict", &revision).ok());
  absl::StatusOr<std::vector<EtcdEvent>> events =
      c->Watch("verdict", revision, absl::Milliseconds(300), nullptr);
  EXPECT_TRUE(absl::IsDeadlineExceeded(events.status())) << events.status();
  EXPECT_THAT(events.status().message(),
              HasSubstr("no change to /job/verdict in etcd at"));

  CallCancellation cancellation;
  std::thread canceller([&] { cancellation.Cancel(); });
  events = c->Watch("verdict", revision, absl::Seconds(60), &cancellation);
  canceller.join();
  EXPECT_TRUE(absl::IsCancelled(events.status())) << events.status();
}

TEST_F(EtcdClientTest, LeaderKilledCallsGoOnSecondLossFailsNamingEtcd) {
  std::unique_ptr<EtcdClient> c = Client("/job", absl::Seconds(8));
  ASSERT_TRUE(c->Put("step", "1").ok());
  const std::string leader = etcd_.Leader();
  ASSERT_FALSE(leader.empty());
  etcd_.Kill(leader);
  // The two left elect a leader; calls find a member that answers.
  ASSERT_TRUE(c->Put("step", "2").ok());
  absl::StatusOr<std::optional<EtcdKeyValue>> v = c->Get("step");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->value, "2");
  absl::StatusOr<bool> created = c->Create("verdict", "succeeded");
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*created);

  // One member left: no majority, no answer.
  etcd_.Kill(etcd_.Leader());
  absl::StatusOr<int64_t> put = c->Put("step", "3");
  ASSERT_FALSE(put.ok());
  EXPECT_TRUE(absl::IsUnavailable(put.status())) << put.status();
  EXPECT_THAT(put.status().message(), HasSubstr("etcd at 127.0.0.1:"));
  EXPECT_THAT(put.status().message(),
              HasSubstr("did not answer put /job/step"));
  EXPECT_THAT(put.status().message(),
              HasSubstr("a majority of the etcd members are up"));
}

TEST(EtcdClientUnreachableTest, NamesTheEndpoints) {
  absl::StatusOr<int> port = rpc::PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  EtcdClientOptions o;
  o.target = *ParseEtcdUrl(absl::StrCat("etcd://127.0.0.1:", *port, "/job"));
  o.call_timeout = absl::Milliseconds(500);
  absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::optional<EtcdKeyValue>> v = (*c)->Get("k");
  EXPECT_TRUE(absl::IsUnavailable(v.status())) << v.status();
  EXPECT_THAT(v.status().message(),
              HasSubstr(absl::StrCat("etcd at 127.0.0.1:", *port,
                                     " did not answer get /job/k within")));
}

TEST(EtcdClientTlsTest, ClientCertificateRequired) {
  LocalEtcd etcd;
  COHORT_START_ETCD_OR_SKIP(etcd, /*tls=*/true);
  EtcdClientOptions o;
  o.target = *ParseEtcdUrl(etcd.Url("/job"));
  o.ca_file = etcd.Tls("ca.pem");
  o.cert_file = etcd.Tls("client.pem");
  o.key_file = etcd.Tls("client-key.pem");
  absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->Put("k", "v").ok());

  // No client certificate: refused, and the error says what to check.
  o.cert_file.clear();
  o.key_file.clear();
  o.call_timeout = absl::Seconds(2);
  c = EtcdClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::optional<EtcdKeyValue>> v = (*c)->Get("k");
  EXPECT_TRUE(absl::IsUnavailable(v.status())) << v.status();
  EXPECT_THAT(v.status().message(),
              HasSubstr("accept a client without a certificate"));

  // A certificate file that is not there: named at once.
  o.cert_file = etcd.Tls("nope.pem");
  o.key_file = etcd.Tls("client-key.pem");
  c = EtcdClient::Connect(o);
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("nope.pem"));
}

TEST_F(EtcdClientTest, UserAndPassword) {
  ASSERT_TRUE(etcd_.Ctl({"user", "add", "root:rootpw"}).ok());
  ASSERT_TRUE(etcd_.Ctl({"auth", "enable"}).ok());
  EtcdClientOptions o;
  o.target = *ParseEtcdUrl(etcd_.Url("/job"));
  o.user = "root";
  o.password = "rootpw";
  absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Put("k", "v").ok());

  o.password = "wrong";
  c = EtcdClient::Connect(o);
  EXPECT_TRUE(absl::IsUnauthenticated(c.status())) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("refused user 'root'"));
  EXPECT_THAT(c.status().message(), ::testing::Not(HasSubstr("wrong")));

  // Without a user, auth-enabled etcd refuses the call, naming the key.
  o.user.clear();
  c = EtcdClient::Connect(o);
  ASSERT_TRUE(c.ok());
  absl::StatusOr<int64_t> put = (*c)->Put("k", "v");
  EXPECT_FALSE(put.ok());
  EXPECT_THAT(put.status().message(), HasSubstr("refused put /job/k"));
}

}  // namespace
}  // namespace cohort::coord
