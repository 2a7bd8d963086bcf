// The collective graph ops (graph/kernels/collective_ops.h) on real groups:
// two "tasks" as threads, each with its own session and group.
#include "cohort/collective/graph_groups.h"

#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/collective/local_exchange.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/device.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/collective_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/local_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::collective {
namespace {

using ::testing::HasSubstr;

constexpr int kGroupKey = 1;

// Builds each rank's graph with `build`, registers that rank's group
// (transport `t`) under kGroupKey, runs `fetch` with feed x = `feeds[r]`,
// and returns each rank's fetched tensor or error.
std::vector<absl::StatusOr<Tensor>> RunOnTwo(
    Transport t, const std::function<void(const Scope&, int rank)>& build,
    const std::vector<Tensor>& feeds) {
  LocalExchange exchange(2);
  std::vector<absl::StatusOr<Tensor>> results(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Scope root = Scope::NewRootScope();
      build(root, r);
      GraphDef g;
      if (absl::Status s = root.ToGraphDef(&g); !s.ok()) {
        results[r] = s;
        return;
      }
      auto session = LocalSession::Create(g, SessionOptions());
      if (!session.ok()) {
        results[r] = session.status();
        return;
      }
      GroupOptions o;
      o.rank = r;
      o.size = 2;
      o.task = absl::StrCat("worker:", r);
      o.transport = t;
      auto group = CollectiveGroup::Create(o, exchange.For(r));
      if (!group.ok()) {
        results[r] = group.status();
        return;
      }
      absl::Status s =
          RegisterGroupForGraphs((*session)->device()->resource_manager(),
                                 kGroupKey, std::move(*group));
      std::vector<Tensor> out;
      if (s.ok()) s = (*session)->Run({{"x", feeds[r]}}, {"y:0"}, {}, &out);
      results[r] =
          s.ok() ? absl::StatusOr<Tensor>(out[0]) : absl::StatusOr<Tensor>(s);
    });
  }
  for (auto& th : threads) th.join();
  return results;
}

class CollectiveOpsTest : public ::testing::TestWithParam<Transport> {};

TEST_P(CollectiveOpsTest, CollectiveReduceSumsAndAverages) {
  for (const char* final_op : {"Id", "Div"}) {
    auto results = RunOnTwo(
        GetParam(),
        [&](const Scope& s, int) {
          auto x = ops::Placeholder(s.WithOpName("x"), DT_FLOAT, {3});
          ops::CollectiveReduce(s.WithOpName("y"), x, 2, kGroupKey, 100,
                                final_op);
        },
        {Tensor::Vec<float>({1, 2, 3}), Tensor::Vec<float>({3, 6, 9})});
    const bool mean = std::string(final_op) == "Div";
    Tensor want =
        mean ? Tensor::Vec<float>({2, 4, 6}) : Tensor::Vec<float>({4, 8, 12});
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r].status();
      EXPECT_TRUE(results[r]->Equals(want))
          << final_op << " rank " << r << ": " << results[r]->DebugString();
    }
  }
}

// The reduce works in place on an input only it holds (a computed d), and on
// a copy when another node also reads that input: d must reach the Add
// unreduced.
TEST_P(CollectiveOpsTest, AnInputOthersReadIsNotReducedInPlace) {
  for (bool shared : {false, true}) {
    auto results = RunOnTwo(
        GetParam(),
        [&](const Scope& s, int) {
          auto x = ops::Placeholder(s.WithOpName("x"), DT_FLOAT, {3});
          auto d = ops::Add(s, x, x);
          auto sum = ops::CollectiveReduce(s, d, 2, kGroupKey, 100, "Id");
          if (shared) {
            ops::Add(s.WithOpName("y"), sum, d);
          } else {
            ops::Identity(s.WithOpName("y"), sum);
          }
        },
        {Tensor::Vec<float>({1, 2, 3}), Tensor::Vec<float>({3, 6, 9})});
    const std::vector<Tensor> want =
        shared ? std::vector<Tensor>{Tensor::Vec<float>({10, 20, 30}),
                                     Tensor::Vec<float>({14, 28, 42})}
               : std::vector<Tensor>{Tensor::Vec<float>({8, 16, 24}),
                                     Tensor::Vec<float>({8, 16, 24})};
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(results[r].ok()) << results[r].status();
      EXPECT_TRUE(results[r]->Equals(want[r]))
          << "shared " << shared << " rank " << r << ": "
          << results[r]->DebugString();
    }
  }
}

TEST_P(CollectiveOpsTest, BroadcastFromTheSenderAndGatherByRank) {
  auto bcast =
      RunOnTwo(GetParam(),
               [](const Scope& s, int r) {
                 auto x = ops::Placeholder(s.WithOpName("x"), DT_INT64, {2});
                 if (r == 1) {
                   ops::CollectiveBcastSend(s.WithOpName("y"), x, 2, kGroupKey,
                                            5, TensorShape({2}));
                 } else {
                   ops::Identity(s.WithOpName("unused"), x);
                   ops::CollectiveBcastRecv(s.WithOpName("y"), DT_INT64, 2,
                                            kGroupKey, 5, TensorShape({2}));
                 }
               },
               {Tensor::Vec<int64_t>({0, 0}), Tensor::Vec<int64_t>({7, 8})});
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(bcast[r].ok()) << bcast[r].status();
    EXPECT_TRUE(bcast[r]->Equals(Tensor::Vec<int64_t>({7, 8}))) << r;
  }
  auto gather =
      RunOnTwo(GetParam(),
               [](const Scope& s, int) {
                 auto x = ops::Placeholder(s.WithOpName("x"), DT_FLOAT, {2});
                 ops::CollectiveGather(s.WithOpName("y"), x, 2, kGroupKey, 6,
                                       TensorShape({2}));
               },
               {Tensor::Vec<float>({1, 2}), Tensor::Vec<float>({3, 4})});
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(gather[r].ok()) << gather[r].status();
    EXPECT_TRUE(gather[r]->Equals(Tensor::Vec<float>({1, 2, 3, 4}))) << r;
  }
}

TEST_P(CollectiveOpsTest, WrongGroupKeyOrSizeIsNamed) {
  auto results =
      RunOnTwo(GetParam(),
               [](const Scope& s, int r) {
                 auto x = ops::Placeholder(s.WithOpName("x"), DT_FLOAT, {1});
                 // Rank 0 names a group that does not exist; rank 1 a wrong
                 // size.
                 ops::CollectiveReduce(s.WithOpName("y"), x, r == 0 ? 2 : 3,
                                       r == 0 ? 9 : kGroupKey, 1, "Id");
               },
               {Tensor::Vec<float>({1}), Tensor::Vec<float>({1})});
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(results[0].status().message(),
              HasSubstr("no collective group with group_key 9"));
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(results[1].status().message(), HasSubstr("has 2 members"));
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectiveOpsTest,
                         ::testing::Values(Transport::kSharedMemory,
                                           Transport::kTcp),
                         [](const auto& info) {
                           return info.param == Transport::kTcp ? "Tcp" : "Shm";
                         });

}  // namespace
}  // namespace cohort::collective
