#include "cohort/collective/collective_group.h"

#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/collective/ring_communicator.h"
#include "cohort/collective/shm_communicator.h"
#include "cohort/coord/coordination_agent.h"

namespace cohort::collective {
namespace {

std::string StatIdentity(const char* path) {
  struct stat st;
  if (stat(path, &st) != 0) return "none";
  return absl::StrCat(st.st_dev, ":", st.st_ino);
}

// Member info of the first exchange: "<task>\n<host key>".
struct MemberInfo {
  std::string task;
  std::string host_key;
};

absl::StatusOr<std::vector<MemberInfo>> ParseInfos(
    const std::vector<std::string>& all, const GroupOptions& o) {
  if (all.size() != static_cast<size_t>(o.size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective group '", o.name, "': the exchange returned ",
                     all.size(), " members for a group of ", o.size));
  }
  std::vector<MemberInfo> infos;
  for (size_t q = 0; q < all.size(); ++q) {
    std::vector<std::string> parts = absl::StrSplit(all[q], '\n');
    if (parts.size() != 2 || parts[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("collective group '", o.name, "': rank ", q,
                       " sent a malformed member record; is it a cohort "
                       "collective group of the same version?"));
    }
    infos.push_back({parts[0], parts[1]});
  }
  return infos;
}

// Rank 0 publishes the segment's name, or "!" and why it could not make
// one; then every member either maps it, or (with `fall_back`) returns
// nullptr so that the group goes over TCP instead.
absl::StatusOr<std::unique_ptr<Communicator>> StartShm(
    const GroupOptions& o, const std::vector<std::string>& tasks,
    const Exchange& exchange, absl::Time deadline, bool fall_back) {
  ShmOptions shm;
  shm.group = o.name;
  shm.rank = o.rank;
  shm.tasks = tasks;
  shm.slot_bytes = o.shm_slot_bytes;
  shm.env = o.env;
  std::unique_ptr<ShmCommunicator> c;
  std::string name;
  if (o.rank == 0) {
    absl::StatusOr<std::unique_ptr<ShmCommunicator>> made =
        ShmCommunicator::Create(shm);
    if (made.ok()) {
      c = *std::move(made);
      name = c->segment_name();
    } else {
      name = absl::StrCat("!", made.status().message());
    }
  }
  COHORT_ASSIGN_OR_RETURN(std::vector<std::string> names,
                          exchange(name, deadline));
  if (names.at(0).empty() || names[0][0] == '!') {
    if (fall_back) {
      COHORT_LOG(WARNING) << "collective group '" << o.name
                          << "': no shared memory ("
                          << absl::string_view(names[0]).substr(1)
                          << "); using TCP";
      return std::unique_ptr<Communicator>();
    }
    return absl::FailedPreconditionError(
        absl::StrCat("collective group '", o.name, "': rank 0 (", tasks[0],
                     ") could not create the shared memory: ",
                     absl::string_view(names[0]).substr(1)));
  }
  if (o.rank != 0) {
    COHORT_ASSIGN_OR_RETURN(c, ShmCommunicator::Attach(shm, names[0]));
  }
  COHORT_RETURN_IF_ERROR(c->WaitAllAttached(deadline));
  return std::unique_ptr<Communicator>(std::move(c));
}

absl::StatusOr<std::unique_ptr<Communicator>> StartTcp(
    const GroupOptions& o, const std::vector<std::string>& tasks,
    const Exchange& exchange, absl::Time deadline) {
  RingOptions ring;
  ring.group = o.name;
  ring.rank = o.rank;
  ring.tasks = tasks;
  ring.job_token = o.job_token;
  ring.chunk_bytes = o.tcp_chunk_bytes;
  ring.env = o.env;
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<RingCommunicator> c,
                          RingCommunicator::Start(ring, o.host));
  COHORT_ASSIGN_OR_RETURN(std::vector<std::string> addresses,
                          exchange(c->address(), deadline));
  COHORT_RETURN_IF_ERROR(c->Connect(addresses, deadline));
  // Nobody leaves setup before everyone is connected: a member whose first
  // calls move no data could otherwise finish, and close its endpoint,
  // while its previous member is still saying hello.
  COHORT_RETURN_IF_ERROR(exchange("connected", deadline).status());
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace

std::string SharedMemoryHostKey() {
  std::string boot = "unknown";
  if (FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {0};
    if (fgets(buf, sizeof(buf), f) != nullptr) {
      boot = std::string(absl::StripAsciiWhitespace(buf));
    }
    fclose(f);
  }
  // The network namespace too: tasks in different ones are different hosts
  // for every decision (a network-namespace lab host, a pod), though they
  // could share /dev/shm here; their data must cross the link.
  return absl::StrCat(boot, "/pid:", StatIdentity("/proc/self/ns/pid"),
                      "/net:", StatIdentity("/proc/self/ns/net"),
                      "/shm:", StatIdentity("/dev/shm"));
}

absl::StatusOr<std::unique_ptr<CollectiveGroup>> CollectiveGroup::Create(
    GroupOptions o, const Exchange& exchange) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size ||
      o.size > kMaxShmMembers * 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective group '", o.name, "': rank ", o.rank, " of ",
                     o.size, " members; need 0 <= rank < size"));
  }
  if (o.task.empty()) o.task = absl::StrCat("rank ", o.rank);
  if (o.env == nullptr) o.env = Env::Default();
  const absl::Time deadline = o.env->Now() + o.setup_timeout;
  const std::string key = SharedMemoryHostKey();
  COHORT_ASSIGN_OR_RETURN(std::vector<std::string> all,
                          exchange(absl::StrCat(o.task, "\n", key), deadline));
  COHORT_ASSIGN_OR_RETURN(std::vector<MemberInfo> infos, ParseInfos(all, o));
  std::vector<std::string> tasks;
  bool one_host = o.size <= kMaxShmMembers;
  for (const MemberInfo& m : infos) {
    tasks.push_back(m.task);
    one_host = one_host && m.host_key == key;
  }
  if (o.transport == Transport::kSharedMemory && !one_host) {
    return absl::FailedPreconditionError(absl::StrCat(
        "collective group '", o.name,
        "': shared memory was asked for, but its members are not all on "
        "this host (or more than ",
        kMaxShmMembers, "); use the TCP transport"));
  }
  const bool shm = o.transport == Transport::kSharedMemory ||
                   (o.transport == Transport::kAuto && one_host);
  std::unique_ptr<Communicator> c;
  if (shm) {
    COHORT_ASSIGN_OR_RETURN(
        c, StartShm(o, tasks, exchange, deadline,
                    /*fall_back=*/o.transport == Transport::kAuto));
  }
  if (c == nullptr) {
    COHORT_ASSIGN_OR_RETURN(c, StartTcp(o, tasks, exchange, deadline));
  }
  return std::unique_ptr<CollectiveGroup>(
      new CollectiveGroup(std::move(o), std::move(tasks), std::move(c)));
}

absl::Status CollectiveGroup::AllReduce(float* data, size_t count, ReduceOp op,
                                        absl::Time deadline, int64_t instance) {
  return AllReduce(data, count, ElementType::kFloat32, op, deadline, instance);
}

absl::Status CollectiveGroup::AllReduce(double* data, size_t count, ReduceOp op,
                                        absl::Time deadline, int64_t instance) {
  return AllReduce(data, count, ElementType::kFloat64, op, deadline, instance);
}

absl::Status CollectiveGroup::AllReduce(void* data, size_t count,
                                        ElementType type, ReduceOp op,
                                        absl::Time deadline, int64_t instance) {
  instance = Instance(instance);
  // A group of one reduces to its own data (x / 1 == x): no copies.
  if (options_.size == 1) return absl::OkStatus();
  return communicator_->AllReduce(data, count, type, op, instance, deadline);
}

absl::Status CollectiveGroup::Broadcast(void* data, size_t bytes, int root,
                                        absl::Time deadline, int64_t instance) {
  return communicator_->Broadcast(data, bytes, root, Instance(instance),
                                  deadline);
}

absl::Status CollectiveGroup::AllGather(const void* in, size_t bytes, void* out,
                                        absl::Time deadline, int64_t instance) {
  return communicator_->AllGather(in, bytes, out, Instance(instance), deadline);
}

Exchange ExchangeThroughCoordination(coord::CoordinationAgent* agent,
                                     std::string prefix, int rank, int size) {
  auto round = std::make_shared<int>(0);
  return [agent, prefix = std::move(prefix), rank, size, round](
             const std::string& mine,
             absl::Time deadline) -> absl::StatusOr<std::vector<std::string>> {
    const std::string dir = absl::StrCat(prefix, "/", (*round)++, "/");
    COHORT_RETURN_IF_ERROR(
        agent->InsertKeyValue(absl::StrCat(dir, rank), mine));
    std::vector<std::string> all(size);
    for (int q = 0; q < size; ++q) {
      if (q == rank) {
        all[q] = mine;
        continue;
      }
      absl::Duration left = deadline - absl::Now();
      absl::StatusOr<std::string> v = agent->GetKeyValue(
          absl::StrCat(dir, q), std::max(left, absl::Milliseconds(1)));
      if (!v.ok()) {
        return absl::Status(
            v.status().code(),
            absl::StrCat("collective group at '", prefix, "': rank ", q,
                         " did not publish ", dir, q, ": ",
                         v.status().message(),
                         "; check that every member creates the group"));
      }
      all[q] = *std::move(v);
    }
    return all;
  };
}

}  // namespace cohort::collective
