// A hostile local user against a live `cohort launch -n 2` (issue 9): while
// the gang waits, the attacker sends the 12-byte frame that used to kill the
// launcher (a sync for a gang of 2^31-1 tasks), a frame announcing 2 GiB,
// garbage, a flood of idle connections, an unauthenticated gRPC sync, and
// `cohort kv set` without / with a wrong token. The job must then finish
// successfully, the launcher's memory must stay bounded, and no write of
// the intruder may have landed.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "cohort/barrier.grpc.pb.h"
#include "cohort/launch/process.h"
#include "cohort/rpc/coding.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/transport.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/launch/command_run.h"

namespace cohort::barrier {
namespace {

using launch::EnvironmentWith;
using launch::ExitInfo;
using launch::Subprocess;
using launch::launch_testing::BinDir;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(30);

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Resident memory of `pid` in KiB (VmRSS of /proc/PID/status).
int64_t RssKib(int pid) {
  for (absl::string_view line :
       absl::StrSplit(ReadAll(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    if (absl::ConsumePrefix(&line, "VmRSS:")) {
      int64_t kib = 0;
      std::vector<absl::string_view> parts =
          absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (!parts.empty() && absl::SimpleAtoi(parts[0], &kib)) return kib;
    }
  }
  return -1;
}

// Runs a command to completion; returns its exit code and output.
std::pair<int, std::string> RunCommand(const std::vector<std::string>& argv,
                                       const std::vector<std::string>& env) {
  launch::launch_testing::CommandRun r =
      launch::launch_testing::RunCommand(argv, env, kWait);
  return {r.exit_code, r.output};
}

// True once the server closed `fd` (EOF or reset) within the deadline.
bool ClosedByPeer(int fd) {
  const absl::Time deadline = absl::Now() + kWait;
  char buf[4096];
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

rpc::UniqueFd Connect(const std::string& address) {
  auto fd = rpc::ConnectTcp(address, absl::Now() + kWait);
  EXPECT_TRUE(fd.ok()) << fd.status();
  return fd.ok() ? std::move(fd).value() : rpc::UniqueFd();
}

void Send(int fd, const std::string& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Everything the attacker does while the gang waits, and the checks that
// it changed nothing.
void Attack(const std::string& cohort, const std::string& dir, int pid) {
  // Wait (bounded) for the gang to publish its addresses.
  const absl::Time deadline = absl::Now() + kWait;
  std::string addresses;
  while ((addresses = ReadAll(dir + "/addr.0")).empty()) {
    ASSERT_LT(absl::Now(), deadline) << "the gang never started";
    absl::SleepFor(absl::Milliseconds(20));
  }
  std::vector<std::string> addr = absl::StrSplit(
      absl::StripAsciiWhitespace(addresses), ' ', absl::SkipEmpty());
  ASSERT_EQ(addr.size(), 3u) << addresses;
  const std::string tcp = addr[0], grpc_address = addr[1], coord = addr[2];
  const int64_t rss_before = RssKib(pid);
  ASSERT_GT(rss_before, 0);

  // 1. The frame that killed the launcher: a sync for 2^31-1 tasks.
  cohort::BarrierSyncRequest huge;
  huge.set_num_tasks(2147483647);
  huge.set_method(cohort::BARRIER);
  std::string frame;
  rpc::PutFixed32(&frame, static_cast<uint32_t>(huge.ByteSizeLong()));
  frame += huge.SerializeAsString();
  rpc::UniqueFd a = Connect(tcp);
  Send(a.get(), frame);
  EXPECT_TRUE(ClosedByPeer(a.get())) << "unauthenticated sync not refused";
  // 2. A frame announcing 2 GiB, and 3. a megabyte of garbage.
  rpc::UniqueFd b = Connect(tcp);
  std::string two_gib;
  rpc::PutFixed32(&two_gib, 0x80000000u);
  Send(b.get(), two_gib);
  EXPECT_TRUE(ClosedByPeer(b.get()));
  rpc::UniqueFd c = Connect(tcp);
  send(c.get(), std::string(1 << 20, '\x7f').data(), 1 << 20, MSG_NOSIGNAL);
  EXPECT_TRUE(ClosedByPeer(c.get()));
  // 4. 300 idle connections at once (more than the handshake cap).
  std::vector<rpc::UniqueFd> flood;
  for (int i = 0; i < 300; ++i) flood.push_back(Connect(tcp));

  // 5. A gRPC barrier sync without the token (plaintext).
  auto channel =
      grpc::CreateChannel(grpc_address, grpc::InsecureChannelCredentials());
  auto stub = cohort::BarrierCoordinatorService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  cohort::BarrierSyncResponse response;
  // Job TLS: a client without the token cannot finish the handshake, so
  // the request is never sent, let alone parsed.
  EXPECT_EQ(stub->Sync(&ctx, huge, &response).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  // 6. `cohort kv set` against the coordination service, without a token
  // and with a wrong one.
  auto [no_token_code, no_token_out] = RunCommand(
      {cohort, "kv", "set", "--coordinator", coord, "intruder", "yes"},
      {rpc::kJobTokenEnvVar});
  EXPECT_NE(no_token_code, 0) << no_token_out;
  EXPECT_THAT(no_token_out, HasSubstr("token"));
  auto [wrong_code, wrong_out] = RunCommand(
      {cohort, "kv", "set", "--coordinator", coord, "intruder", "yes"},
      {absl::StrCat(rpc::kJobTokenEnvVar, "=guessed")});
  EXPECT_NE(wrong_code, 0) << wrong_out;

  // Memory stayed bounded through all of it.
  const int64_t rss_after = RssKib(pid);
  EXPECT_LT(rss_after - rss_before, 64 * 1024)
      << "launcher RSS grew from " << rss_before << " KiB to " << rss_after
      << " KiB";

  // The job's own token (in the launcher's private file) still works, and
  // shows that the intruder's write did not land.
  auto [get_code, get_out] =
      RunCommand({cohort, "kv", "get", "--coordinator", coord, "--token-file",
                  dir + "/logs/job-token", "intruder"},
                 {rpc::kJobTokenEnvVar});
  EXPECT_EQ(get_code, 2) << "expected NotFound: " << get_out;
}

TEST(HostilePeerTest, AttacksOnALiveLaunchChangeNothingAndTheJobSucceeds) {
  const std::string cohort = BinDir() + "/cohort";
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/hostile_peer_test.", getpid(), ".",
                   absl::ToUnixNanos(absl::Now()));
  ASSERT_TRUE(std::filesystem::create_directories(dir)) << dir;
  // Each task publishes its servers' addresses, waits (bounded) for the
  // attack to finish, then syncs twice and exits 0.
  const std::string script = absl::StrCat(
      "D=", dir, "; C=", cohort,
      "; echo \"$COHORT_BARRIER_TCP_ADDRESS $COHORT_BARRIER_ADDRESS "
      "$COHORT_COORDINATION_SERVICE_ADDRESS\" > "
      "$D/addr.$COHORT_PARTITION_ID.tmp"
      " && mv $D/addr.$COHORT_PARTITION_ID.tmp $D/addr.$COHORT_PARTITION_ID; "
      "i=0; while [ ! -e $D/go ]; do i=$((i+1)); "
      "[ $i -gt 1200 ] && exit 3; sleep 0.05; done; "
      "$C task barrier && $C task allgather $COHORT_PARTITION_ID");
  auto launcher = Subprocess::Spawn(
      {cohort, "launch", "--no-progress", "-n", "2", "--log-dir", dir + "/logs",
       "--", "/bin/sh", "-c", script},
      EnvironmentWith({rpc::kJobTokenEnvVar}));
  ASSERT_TRUE(launcher.ok()) << launcher.status();

  // The attack returns early on a failed assertion; the gang is released
  // either way, so the launcher always ends.
  Attack(cohort, dir, (*launcher)->pid());
  ASSERT_TRUE(std::ofstream(dir + "/go").good());
  launch::launch_testing::CommandRun r =
      launch::launch_testing::FinishCommand(**launcher, absl::Now());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(R"([worker:1] ["0","1"])"));
}

}  // namespace
}  // namespace cohort::barrier
