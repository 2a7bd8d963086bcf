// The tensor data plane (tensor_wire.h, tensor_data_service.h,
// tensor_data_client.h): the header checks on their own, then RecvTensor
// over real loopback sockets against an in-process Worker, compared with
// the Worker's own (gRPC) RecvTensor answers.
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cohort/graph/rendezvous.h"
#include "cohort/rpc/coding.h"
#include "cohort/rpc/framed_client.h"
#include "cohort/rpc/framed_server.h"
#include "cohort/runtime/tensor_data_client.h"
#include "cohort/runtime/tensor_data_service.h"
#include "cohort/runtime/tensor_wire.h"
#include "cohort/runtime/worker.h"
#include "cohort/runtime/worker_errors.h"
#include "cohort/runtime/worker_tensor_coding.h"
#include "cohort/runtime/worker_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace testing;  // NOLINT: the test helpers

constexpr char kToken[] = "data-plane-token";

// --- tensor_wire.h ----------------------------------------------------------

std::string RawHeader(uint32_t dtype, const std::vector<int64_t>& dims,
                      uint8_t encoding = 0) {
  std::string h;
  h.push_back(static_cast<char>(encoding));
  rpc::PutFixed32(&h, dtype);
  h.push_back(0);
  rpc::PutFixed64(&h, 77);
  rpc::PutFixed32(&h, static_cast<uint32_t>(dims.size()));
  for (int64_t d : dims) rpc::PutFixed64(&h, static_cast<uint64_t>(d));
  return h;
}

TEST(TensorWireTest, HeaderRoundTrips) {
  Tensor t(DT_INT64, TensorShape({3, 4}));
  TensorEncoding encoding;
  const std::string h = EncodeTensorHeader(t, false, 1234, &encoding);
  EXPECT_EQ(encoding, TensorEncoding::kRawBytes);
  auto decoded = DecodeTensorHeader(h, 96, kMaxWireTensorBytes, "peer");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->dtype, DT_INT64);
  EXPECT_EQ(decoded->shape, TensorShape({3, 4}));
  EXPECT_EQ(decoded->send_start_micros, 1234);
  Tensor s(std::string("x"));
  EncodeTensorHeader(s, false, 0, &encoding);
  EXPECT_EQ(encoding, TensorEncoding::kTensorProto);
  // Every rank TensorFlow allows crosses tasks (it was capped at 64).
  Tensor deep(DT_FLOAT, TensorShape(std::vector<int64_t>(254, 1)));
  auto deep_decoded =
      DecodeTensorHeader(EncodeTensorHeader(deep, false, 0, &encoding), 4,
                         kMaxWireTensorBytes, "peer");
  ASSERT_TRUE(deep_decoded.ok()) << deep_decoded.status();
  EXPECT_EQ(deep_decoded->shape.dims(), 254);
}

TEST(TensorWireTest, HostileHeadersAreRefusedNamingThePeer) {
  const std::string peer = "/job:ps/replica:0/task:0 (127.0.0.1:9)";
  struct Case {
    std::string header;
    uint64_t payload;
    absl::StatusCode code;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"short", 0, absl::StatusCode::kDataLoss, "only 5 bytes"},
      {RawHeader(DT_FLOAT, {2}) + "x", 8, absl::StatusCode::kDataLoss,
       "expected"},
      {RawHeader(DT_FLOAT, {2}, 7), 8, absl::StatusCode::kDataLoss,
       "unknown encoding"},
      {RawHeader(999, {2}), 8, absl::StatusCode::kDataLoss, "dtype 999"},
      {RawHeader(DT_STRING, {2}), 8, absl::StatusCode::kDataLoss,
       "not raw bytes"},
      {RawHeader(DT_INVALID, {}), 0, absl::StatusCode::kDataLoss, "dtype 0"},
      {RawHeader(DT_FLOAT, {-1}), 0, absl::StatusCode::kDataLoss, "negative"},
      {RawHeader(DT_FLOAT, {int64_t{1} << 40, int64_t{1} << 40}), 0,
       absl::StatusCode::kDataLoss, "overflows"},
      {RawHeader(DT_FLOAT, {int64_t{1} << 62}), 0, absl::StatusCode::kDataLoss,
       "more than 2^63"},
      {RawHeader(DT_FLOAT, {3}), 8, absl::StatusCode::kDataLoss,
       "payload has 8 bytes"},
      {RawHeader(DT_FLOAT, {int64_t{1} << 30}), uint64_t{1} << 32,
       absl::StatusCode::kResourceExhausted, "over the limit"},
      {RawHeader(DT_FLOAT, std::vector<int64_t>(255, 1)), 4,
       absl::StatusCode::kDataLoss, "rank 255"},
  };
  for (const Case& c : cases) {
    absl::Status s =
        DecodeTensorHeader(c.header, c.payload, kMaxWireTensorBytes, peer)
            .status();
    EXPECT_EQ(s.code(), c.code) << c.why << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.why));
    EXPECT_THAT(s.message(), HasSubstr(peer));
  }
}

TEST(TensorWireTest, SameHostReferencesAreCheckedBeforeAnyAllocation) {
  const std::string peer = "/job:ps/replica:0/task:0 (127.0.0.1:9)";
  const uint8_t ref = static_cast<uint8_t>(TensorEncoding::kSameHostRef);
  // A reference's header: the shape says what to allocate, the payload is
  // the 20-byte reference.
  auto ok = DecodeTensorHeader(RawHeader(DT_FLOAT, {1024, 4}, ref),
                               kSameHostRefBytes, kMaxWireTensorBytes, peer);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->encoding, TensorEncoding::kSameHostRef);
  EXPECT_EQ(ok->shape, TensorShape({1024, 4}));
  // The shape is capped like a payload (it sizes the consumer's buffer).
  absl::Status big = DecodeTensorHeader(RawHeader(DT_FLOAT, {1 << 20}, ref),
                                        kSameHostRefBytes, 1 << 20, peer)
                         .status();
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << big;
  EXPECT_THAT(big.message(), HasSubstr(peer));
  // A reference of another length is malformed.
  absl::Status len =
      DecodeTensorHeader(RawHeader(DT_FLOAT, {4}, ref), 16, 1 << 20, peer)
          .status();
  EXPECT_EQ(len.code(), absl::StatusCode::kDataLoss) << len;

  SameHostRef r;
  r.pid = 42;
  r.address = 0x7f0012345678;
  r.bytes = 4096;
  auto back = DecodeSameHostRef(EncodeSameHostRef(r), 4096, peer);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pid, 42);
  EXPECT_EQ(back->address, r.address);
  // A reference to more (or fewer) bytes than the shape: never read.
  absl::Status more =
      DecodeSameHostRef(EncodeSameHostRef(r), 1024, peer).status();
  EXPECT_EQ(more.code(), absl::StatusCode::kDataLoss) << more;
  EXPECT_THAT(more.message(), HasSubstr(peer));
  r.pid = 0;
  EXPECT_EQ(DecodeSameHostRef(EncodeSameHostRef(r), 4096, peer).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeSameHostRef("short", 4096, peer).status().code(),
            absl::StatusCode::kDataLoss);

  uint64_t key = 0;
  absl::string_view request;  // Points into `body`, which must outlive it.
  const std::string body = EncodeSameHostRecvRequest(7, "req");
  ASSERT_TRUE(DecodeSameHostRecvRequest(body, &key, &request).ok());
  EXPECT_EQ(key, 7u);
  EXPECT_EQ(request, "req");
  EXPECT_EQ(DecodeSameHostRecvRequest("1234567", &key, &request).code(),
            absl::StatusCode::kInvalidArgument);
  // This test runs where /proc exists: the key is known and stable.
  EXPECT_NE(SameHostKey(), 0u);
  EXPECT_EQ(SameHostKey(), SameHostKey());
}

TEST(TensorWireTest, ErrorBodyKeepsMessageAndPayloads) {
  absl::Status s = CleanupError(42);
  absl::Status back = DecodeErrorBody(s.code(), EncodeErrorBody(s));
  EXPECT_EQ(back, s);
  EXPECT_TRUE(IsDerivedError(back));
  // Garbage stays readable as a message.
  EXPECT_EQ(DecodeErrorBody(absl::StatusCode::kInternal, "ab").message(), "ab");
}

// --- RecvTensor over the data plane ----------------------------------------

class TensorDataPlaneTest : public WorkerFixture {
 protected:
  void SetUp() override {
    ASSERT_TRUE(CreateSession("s").ok());
    rpc::FramedServerOptions options;
    options.job_token = kToken;
    auto service = TensorDataService::Start(worker_.get(), options);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    client_ =
        std::make_unique<TensorDataClient>(kTask, service_->address(), kToken);
  }
  void TearDown() override {
    client_.reset();
    service_.reset();
  }

  // Sends `value` as tensor "t" to the ps task.
  std::string SendGraph(const Tensor& value) {
    GraphDef g;
    AddConst(&g, "c", value, kDev);
    AddSend(&g, "send", "c", "t", kDev, Dev(Task("ps", 0)), kIncarnation);
    g.mutable_node(1)->mutable_attr()->at("T").set_type(value.dtype());
    auto h = Register("s", g, {}, {});
    EXPECT_TRUE(h.ok()) << h.status();
    return h.value_or("");
  }
  RecvTensorRequest RecvRequest(int64_t step, uint64_t incarnation = 0,
                                int64_t request_id = 0) {
    RecvTensorRequest r;
    r.set_step_id(step);
    r.set_rendezvous_key(Rendezvous::CreateKey(
        kDev, incarnation == 0 ? kIncarnation : incarnation, Dev(Task("ps", 0)),
        "t"));
    r.set_request_id(request_id);
    return r;
  }

  struct Fast {
    RecvTensorRequest request;
    RecvTensorValue value;
    CallOptions opts;
    absl::Notification finished;
    absl::Status status;
  };
  std::shared_ptr<Fast> StartFast(
      TensorDataClient* client, RecvTensorRequest request,
      absl::Time deadline = absl::InfiniteFuture()) {
    auto call = std::make_shared<Fast>();
    call->request = std::move(request);
    call->opts.set_deadline(deadline);
    client->RecvAsync(&call->opts, &call->request, &call->value,
                      [call](const absl::Status& s) {
                        call->status = s;
                        call->finished.Notify();
                      });
    return call;
  }
  absl::Status Wait(const std::shared_ptr<Fast>& call) {
    if (!call->finished.WaitForNotificationWithTimeout(absl::Seconds(30))) {
      return absl::InternalError("test: no answer");
    }
    return call->status;
  }

  std::unique_ptr<TensorDataService> service_;
  std::unique_ptr<TensorDataClient> client_;
};

TEST_F(TensorDataPlaneTest, SameTensorsAsGrpcRecvTensorBeforeAndAfterTheSend) {
  Tensor big(DT_FLOAT, TensorShape({1024, 1024}));
  for (int64_t i = 0; i < big.NumElements(); ++i) big.flat<float>()(i) = i;
  const std::vector<Tensor> values = {Tensor(4.5f), big,
                                      Tensor(DT_INT32, TensorShape({0, 3})),
                                      Tensor(true), Tensor(std::string("str"))};
  int64_t step = 100;
  for (const Tensor& value : values) {
    const std::string g = SendGraph(value);
    // Before the send: waits in the rendezvous.
    auto early = StartFast(client_.get(), RecvRequest(step));
    EXPECT_FALSE(
        early->finished.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
    ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, step)).ok());
    ASSERT_TRUE(Wait(early).ok()) << early->status;
    EXPECT_TRUE(early->value.tensor.Equals(value)) << value.DebugString();
    EXPECT_GT(early->value.send_start_micros, 0);
    // The gRPC answer for the same tensor of another step is identical.
    ++step;
    ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, step)).ok());
    RecvTensorResponse resp;
    ASSERT_TRUE(DoRecvTensor(worker_.get(), RecvRequest(step), &resp).ok());
    EXPECT_TRUE(Tensor::FromProto(resp.tensor())->Equals(early->value.tensor));
    ++step;
  }
  EXPECT_EQ(service_->num_tensors_sent(), values.size());
  // Calls ran one at a time: one pooled connection served them all.
  EXPECT_EQ(client_->num_idle_connections(), 1);
}

TEST_F(TensorDataPlaneTest, LargeTensorsOnTheSameHostAreCopiedByReference) {
  // One process is one host: the producer answers by reference, the
  // consumer copies out of its memory.
  Tensor big(DT_FLOAT, TensorShape({256, 1024}));
  for (int64_t i = 0; i < big.NumElements(); ++i) big.flat<float>()(i) = i;
  Tensor small(DT_FLOAT, TensorShape({16}));
  for (int64_t i = 0; i < small.NumElements(); ++i) small.flat<float>()(i) = i;
  int64_t step = 300;
  for (const Tensor& value : {big, small, big}) {
    const std::string g = SendGraph(value);
    ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, step)).ok());
    auto call = StartFast(client_.get(), RecvRequest(step));
    ASSERT_TRUE(Wait(call).ok()) << call->status;
    EXPECT_TRUE(call->value.tensor.Equals(value));
    ++step;
  }
  // Only the two large ones went by reference (the small one is cheaper
  // through the socket), all on one connection. The consumer released each
  // as soon as it had copied it (one-way, so the producer sees the last
  // release shortly after the call's answer).
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (service_->num_held() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(service_->num_held(), 0u);
  EXPECT_EQ(service_->num_tensors_sent(), 3u);
  EXPECT_EQ(service_->num_tensors_by_reference(), 2u);
  EXPECT_EQ(service_->num_held_fetched(), 0u);
  EXPECT_TRUE(client_->same_host_enabled());
  EXPECT_EQ(client_->num_idle_connections(), 1);
}

TEST_F(TensorDataPlaneTest, RefusedSameHostCopyFetchesTheHeldBytesInstead) {
  // As in a sandbox without process_vm_readv.
  int reads = 0;
  client_->set_same_host_reader_for_testing(
      [&reads](const SameHostRef&, char*) {
        ++reads;
        return EPERM;
      });
  Tensor big(DT_INT32, TensorShape({128, 1024}));
  for (int64_t i = 0; i < big.NumElements(); ++i) big.flat<int32_t>()(i) = i;
  const std::string g = SendGraph(big);
  for (int64_t step : {400, 401}) {
    ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, step)).ok());
    auto call = StartFast(client_.get(), RecvRequest(step));
    ASSERT_TRUE(Wait(call).ok()) << call->status;
    EXPECT_TRUE(call->value.tensor.Equals(big));
  }
  // The first call was answered by reference, the copy refused, the bytes
  // fetched on the same connection; the second asked for bytes at once.
  EXPECT_EQ(reads, 1);
  // The fetch took the held tensor (before answering): nothing stays lent.
  EXPECT_EQ(service_->num_held(), 0u);
  EXPECT_FALSE(client_->same_host_enabled());
  EXPECT_EQ(service_->num_tensors_by_reference(), 1u);
  EXPECT_EQ(service_->num_held_fetched(), 1u);
  EXPECT_EQ(service_->num_tensors_sent(), 2u);
}

TEST_F(TensorDataPlaneTest, ProducerGoneBeforeTheCopyEndsFailsTheCall) {
  // The producer closes the connection (and so drops the hold) while the
  // consumer copies: the bytes may be a freed or reused buffer's, so the
  // call fails instead of returning them.
  client_->set_same_host_reader_for_testing([this](const SameHostRef&, char*) {
    service_.reset();  // Closes every connection, then drops the holds.
    return 0;
  });
  Tensor big(DT_FLOAT, TensorShape({256, 1024}));
  const std::string g = SendGraph(big);
  ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, 500)).ok());
  auto call = StartFast(client_.get(), RecvRequest(500));
  const absl::Status s = Wait(call);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("closed the connection while its tensor was being "
                        "copied"));
}

// A hostile producer: answers every request with a same-host reference to
// `target` (memory of this process, which the consumer must not copy
// unless it asked for a reference).
class ReferringProducer : public rpc::FramedServer::Handler {
 public:
  explicit ReferringProducer(const Tensor* target) : target_(target) {}
  void OnRequest(const std::shared_ptr<rpc::FramedConnection>& c,
                 std::string) override {
    TensorEncoding encoding;
    std::string header = EncodeTensorHeader(*target_, false, 0, &encoding);
    MarkSameHostRef(&header);
    SameHostRef ref;
    ref.pid = getpid();
    ref.address = reinterpret_cast<uint64_t>(target_->raw_data());
    ref.bytes = target_->TotalBytes();
    auto payload = std::make_shared<std::string>(EncodeSameHostRef(ref));
    c->ReplyWithPayload(header, {payload->data(), payload->size(), payload});
  }
  void OnClose(const std::shared_ptr<rpc::FramedConnection>&) override {}

 private:
  const Tensor* target_;
};

TEST_F(TensorDataPlaneTest, ReferenceToARequestForBytesIsRefused) {
  Tensor secret(DT_FLOAT, TensorShape({256, 1024}));
  for (int64_t i = 0; i < secret.NumElements(); ++i)
    secret.flat<float>()(i) = i;
  ReferringProducer producer(&secret);
  rpc::FramedServerOptions options;
  options.job_token = kToken;
  options.identity = TensorDataIdentity(kTask);
  auto server = rpc::FramedServer::Start(options, &producer);
  ASSERT_TRUE(server.ok()) << server.status();
  // With the same-host path off, the consumer asks for the bytes; a
  // reference in answer is refused before anything is copied.
  setenv("COHORT_TENSOR_SAME_HOST", "0", 1);
  TensorDataClient plain(kTask, (*server)->address(), kToken);
  unsetenv("COHORT_TENSOR_SAME_HOST");
  int reads = 0;
  plain.set_same_host_reader_for_testing([&reads](const SameHostRef&, char*) {
    ++reads;
    return 0;
  });
  auto call = StartFast(&plain, RecvRequest(600));
  const absl::Status s = Wait(call);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("asked for the bytes"));
  EXPECT_EQ(reads, 0);
  // A peer not reached over loopback is never asked for references either.
  TensorDataClient remote(kTask, "192.0.2.1:4711", kToken);
  EXPECT_FALSE(remote.same_host_enabled());
  EXPECT_TRUE(client_->same_host_enabled());
}

TEST_F(TensorDataPlaneTest, HeldTensorGoesWithItsConnection) {
  // A consumer that asks by reference and then neither releases nor asks
  // again: the producer holds the tensor until the connection ends.
  Tensor big(DT_FLOAT, TensorShape({64, 1024}));
  const std::string g = SendGraph(big);
  ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, 500)).ok());
  auto conn = rpc::FramedClient::Connect(
      service_->address(), kToken, absl::Now() + absl::Seconds(10),
      TensorDataService::kMaxReplyFrameBytes, TensorDataIdentity(kTask));
  ASSERT_TRUE(conn.ok()) << conn.status();
  std::string ref(kSameHostRefBytes, '\0');
  TensorHeader header;
  auto r = (*conn)->CallWithPayload(
      EncodeDataPlaneRequest(
          DataPlaneMethod::kRecvTensorSameHost,
          EncodeSameHostRecvRequest(SameHostKey(),
                                    RecvRequest(500).SerializeAsString())),
      [&](absl::string_view h, uint64_t n) -> absl::StatusOr<char*> {
        auto decoded = DecodeTensorHeader(h, n, kMaxWireTensorBytes, "test");
        if (!decoded.ok()) return decoded.status();
        header = *decoded;
        return ref.data();
      },
      absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(header.encoding, TensorEncoding::kSameHostRef);
  EXPECT_EQ(service_->num_held(), 1u);
  conn->reset();  // Closes the connection.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (service_->num_held() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(service_->num_held(), 0u);
}

TEST_F(TensorDataPlaneTest, FetchHeldWithNothingHeldIsFailedPrecondition) {
  auto conn = rpc::FramedClient::Connect(
      service_->address(), kToken, absl::Now() + absl::Seconds(10),
      TensorDataService::kMaxReplyFrameBytes, TensorDataIdentity(kTask));
  ASSERT_TRUE(conn.ok()) << conn.status();
  auto r =
      (*conn)->Call(EncodeDataPlaneRequest(DataPlaneMethod::kFetchHeld, ""),
                    absl::Now() + absl::Seconds(10));
  ASSERT_FALSE(r.ok());
  absl::Status s = DecodeErrorBody(r.status().code(), r.status().message());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("holds no tensor"));
}

TEST_F(TensorDataPlaneTest, WorkerErrorsKeepCodesMessagesAndPayloads) {
  absl::Status stale = Wait(StartFast(client_.get(), RecvRequest(5, 0x99)));
  EXPECT_EQ(stale, DoRecvTensor(worker_.get(), RecvRequest(5, 0x99)));
  EXPECT_THAT(stale.message(),
              StartsWith("RecvTensor expects a different device incarnation"));
  CleanupGraphRequest cleanup;
  cleanup.set_step_id(12);
  ASSERT_TRUE(DoCleanupGraph(worker_.get(), cleanup).ok());
  absl::Status cleaned = Wait(StartFast(client_.get(), RecvRequest(12)));
  EXPECT_EQ(cleaned.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(cleaned.message(), "Cleanup 12");
  EXPECT_TRUE(IsDerivedError(cleaned));
  // A waiter when the cleanup comes gets the same.
  auto waiting = StartFast(client_.get(), RecvRequest(13));
  EXPECT_FALSE(
      waiting->finished.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  cleanup.set_step_id(13);
  ASSERT_TRUE(DoCleanupGraph(worker_.get(), cleanup).ok());
  EXPECT_EQ(Wait(waiting).message(), "Cleanup 13");
  // Request-id de-duplication is the worker's window.
  ASSERT_TRUE(
      DoRunGraph(worker_.get(), RunRequest("s", SendGraph(Tensor(1.0f)), 4))
          .ok());
  ASSERT_TRUE(Wait(StartFast(client_.get(), RecvRequest(4, 0, 555))).ok());
  absl::Status again = Wait(StartFast(client_.get(), RecvRequest(4, 0, 555)));
  EXPECT_EQ(again.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(again.message(),
              StartsWith("The same RecvTensor (GrpcWorker) request was "
                         "received twice. "));
}

TEST_F(TensorDataPlaneTest, CancelDropsOnlyThisWaiterAndDeadlinesApply) {
  auto first = StartFast(client_.get(), RecvRequest(8, 0, 1001));
  EXPECT_FALSE(
      first->finished.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  first->opts.StartCancel();
  absl::Status s = Wait(first);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_THAT(s.message(), HasSubstr("RecvTensor to " + kTask));
  // The producer drops its waiter when the closed connection reaches it,
  // after the client already answered Cancelled; that the drop touches
  // only that waiter is tested in process (worker_steps_test.cc). So the
  // next exchange uses step 9: a Send in step 8 could race the drop.
  ASSERT_TRUE(
      DoRunGraph(worker_.get(), RunRequest("s", SendGraph(Tensor(4.5f)), 9))
          .ok());
  auto retry = StartFast(client_.get(), RecvRequest(9, 0, 1002));
  ASSERT_TRUE(Wait(retry).ok()) << retry->status;
  EXPECT_TRUE(retry->value.tensor.Equals(Tensor(4.5f)));
  auto late = StartFast(client_.get(), RecvRequest(40),
                        absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(Wait(late).code(), absl::StatusCode::kDeadlineExceeded);
}

absl::Status RunOver(TensorDataClient* client, RunGraphRequest request,
                     RunGraphResponse* response) {
  CallOptions opts;
  absl::Notification finished;
  absl::Status status;
  client->RunGraphAsync(&opts, &request, response, [&](const absl::Status& s) {
    status = s;
    finished.Notify();
  });
  if (!finished.WaitForNotificationWithTimeout(absl::Seconds(30))) {
    return absl::InternalError("test: no answer");
  }
  return status;
}

TEST_F(TensorDataPlaneTest, RunGraphAnswersAsTheWorkerDoes) {
  GraphDef g;
  AddConst(&g, "c", Tensor::Vec<float>({1.5f, 2.5f}), kDev);
  auto handle = Register("s", g, {}, {"c:0"});
  ASSERT_TRUE(handle.ok()) << handle.status();
  RunGraphResponse fast;
  RunGraphRequest run = RunRequest("s", *handle, 70);
  run.set_request_id(9001);
  ASSERT_TRUE(RunOver(client_.get(), run, &fast).ok());
  RunGraphResponse direct;
  ASSERT_TRUE(
      DoRunGraph(worker_.get(), RunRequest("s", *handle, 71), &direct).ok());
  EXPECT_EQ(fast.SerializeAsString(), direct.SerializeAsString());
  // The worker's errors, codes, messages and payloads as they are.
  RunGraphResponse ignored;
  absl::Status twice = RunOver(client_.get(), run, &ignored);
  EXPECT_EQ(twice.code(), absl::StatusCode::kAborted) << twice;
  EXPECT_THAT(twice.message(),
              StartsWith("The same RunGraph (Worker) request was received "
                         "twice. "));
  RunGraphRequest unknown = RunRequest("s", "no-such-graph", 72);
  absl::Status gone = RunOver(client_.get(), unknown, &ignored);
  EXPECT_EQ(gone,
            DoRunGraph(worker_.get(), RunRequest("s", "no-such-graph", 73)));
  EXPECT_EQ(gone.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(service_->num_run_graphs(), 3u);
  // Too large for the data plane: refused before anything is sent, so the
  // caller may use gRPC (GrpcRemoteWorker does).
  Tensor big(DT_FLOAT, TensorShape({int64_t{2} << 20}));
  absl::Status large = RunOver(
      client_.get(), RunRequest("s", *handle, 74, {{"x", big}}), &ignored);
  EXPECT_EQ(large.code(), absl::StatusCode::kResourceExhausted) << large;
  EXPECT_TRUE(TensorDataClient::IsNotConnected(large));
  EXPECT_EQ(service_->num_run_graphs(), 3u);
}

TEST_F(TensorDataPlaneTest, RunGraphCancelledByTheCallerEndsTheStep) {
  auto handle = Register("s", BlockedGraph(), {}, {"r:0"});
  ASSERT_TRUE(handle.ok()) << handle.status();
  RunGraphRequest run = RunRequest("s", *handle, 80);
  RunGraphResponse response;
  CallOptions opts;
  absl::Notification finished;
  absl::Status status;
  client_->RunGraphAsync(&opts, &run, &response, [&](const absl::Status& s) {
    status = s;
    finished.Notify();
  });
  // Cancel once the step runs on the worker (polling a condition).
  const absl::Time limit = absl::Now() + absl::Seconds(30);
  while (worker_->NumRunningSteps() < 1 && !finished.HasBeenNotified() &&
         absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(worker_->NumRunningSteps(), 1u) << status;
  opts.StartCancel();
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_THAT(status.message(), HasSubstr("RunGraph to " + kTask));
  // The closed connection cancels the step on the worker.
  while (worker_->NumRunningSteps() > 0 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(worker_->NumRunningSteps(), 0u);
}

TEST_F(TensorDataPlaneTest, WrongTokenIsUnauthenticated) {
  TensorDataClient wrong(kTask, service_->address(), "not-the-token");
  absl::Status s = Wait(StartFast(&wrong, RecvRequest(3)));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_EQ(service_->num_tensors_sent(), 0u);
}

TEST_F(TensorDataPlaneTest, ConcurrentCallsUseSeveralConnections) {
  std::vector<std::shared_ptr<Fast>> calls;
  for (int step = 60; step < 64; ++step) {
    calls.push_back(StartFast(client_.get(), RecvRequest(step)));
  }
  // All four wait in the worker (one rendezvous per step) before any is
  // answered, so none could have reused another's connection.
  const absl::Time limit = absl::Now() + absl::Seconds(30);
  while (worker_->NumStepRendezvous() < 4 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(2));  // polling a condition
  }
  ASSERT_EQ(worker_->NumStepRendezvous(), 4u);
  const std::string g = SendGraph(Tensor(2.0f));
  for (int step = 60; step < 64; ++step) {
    ASSERT_TRUE(DoRunGraph(worker_.get(), RunRequest("s", g, step)).ok());
  }
  for (auto& c : calls) {
    ASSERT_TRUE(Wait(c).ok()) << c->status;
    EXPECT_TRUE(c->value.tensor.Equals(Tensor(2.0f)));
  }
  EXPECT_EQ(client_->num_idle_connections(), 4);
}

}  // namespace
}  // namespace cohort::runtime
