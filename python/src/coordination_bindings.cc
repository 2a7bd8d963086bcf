// cohort.CoordinationClient: the job's key-value store and named barriers
// (the coordination service of `cohort launch` or of a `cohort server`).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/base/env.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/rpc/transport.h"
#include "python/src/bindings.h"
#include "python/src/status.h"

namespace py = pybind11;

namespace cohort::python {
namespace {

using coord::CoordinationAgent;
using coord::TaskId;

// Seconds from Python (None: `fallback`) as a Duration; negative is an error.
absl::Duration Seconds(std::optional<double> seconds, absl::Duration fallback,
                       const char* what) {
  if (!seconds.has_value()) return fallback;
  if (!(*seconds >= 0)) {
    ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
        what, ": expected a number of seconds >= 0, got ", *seconds)));
  }
  return absl::Seconds(*seconds);
}

constexpr absl::Duration kDefaultWait = absl::Seconds(300);

// The Python object: an agent that is not registered unless connect() is
// called (the key-value store and barriers need no registration). Shared
// with calls that Ctrl-C left running.
class Client {
 public:
  Client(const std::string& address, const std::string& token,
         std::optional<std::string> task, double rpc_timeout) {
    if (address.empty()) {
      ThrowStatus(absl::InvalidArgumentError(
          "CoordinationClient: address is empty; expected host:port of the "
          "coordination service"));
    }
    has_task_ = task.has_value();
    coord::CoordinationAgentOptions options;
    options.task =
        has_task_ ? ValueOrThrow(TaskId::Parse(*task)) : TaskId{"client", 0};
    options.rpc_timeout =
        Seconds(rpc_timeout, absl::Seconds(30), "rpc_timeout");
    rpc::TransportSecurity security;
    security.job_token = token;
    auto client = ValueOrThrow(coord::NewCoordinationClient(address, security));
    agent_ = std::shared_ptr<CoordinationAgent>(ValueOrThrow(
        CoordinationAgent::Create(std::move(options), std::move(client))));
    address_ = address;
  }

  std::shared_ptr<CoordinationAgent> agent() { return agent_; }
  const std::string& address() const { return address_; }
  std::optional<std::string> task() const {
    if (!has_task_) return std::nullopt;
    return agent_->task().ToString();
  }
  void RequireTask(const char* what) const {
    if (has_task_) return;
    ThrowStatus(absl::FailedPreconditionError(absl::StrCat(
        what,
        " needs this client's task: create it with task=\"JOB:INDEX\" "
        "(cohort.coordination_client() inside `cohort launch` knows "
        "it)")));
  }

 private:
  std::shared_ptr<CoordinationAgent> agent_;
  std::string address_;
  bool has_task_ = false;
};

std::string Bytes(py::handle value) {
  if (py::isinstance<py::bytes>(value)) return value.cast<std::string>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  throw py::type_error(
      "value: expected str or bytes, got " +
      py::str(py::type::of(value).attr("__name__")).cast<std::string>());
}

std::shared_ptr<Client> FromLaunchEnvironment(std::optional<double> timeout) {
  Env* env = Env::Default();
  std::optional<std::string> address =
      env->GetVar(coord::kEnvCoordinationAddress);
  std::optional<std::string> task = env->GetVar(barrier::kEnvTaskName);
  if (!address.has_value() || address->empty() || !task.has_value()) {
    ThrowStatus(absl::FailedPreconditionError(absl::StrCat(
        "no coordination service in this environment: ",
        coord::kEnvCoordinationAddress, " and ", barrier::kEnvTaskName,
        " are set by `cohort launch`; outside it use "
        "cohort.CoordinationClient(address, token)")));
  }
  return std::make_shared<Client>(
      *address, env->GetVar(rpc::kJobTokenEnvVar).value_or(""), *task,
      timeout.value_or(30));
}

}  // namespace

void DefineCoordination(py::module_& m) {
  using coord::KeyValueWatchResult;
  py::class_<KeyValueWatchResult>(m, "WatchResult",
                                  "What CoordinationClient.watch() saw.")
      .def_readonly("present", &KeyValueWatchResult::present,
                    "False when the key was deleted.")
      .def_property_readonly(
          "value",
          [](const KeyValueWatchResult& r) { return py::bytes(r.value); })
      .def_readonly("version", &KeyValueWatchResult::version,
                    "Pass it as after_version to wait for the next change.");

  py::class_<Client, std::shared_ptr<Client>>(m, "CoordinationClient", R"doc(
A client of a job's coordination service: key-value store and barriers.

    client = cohort.CoordinationClient("127.0.0.1:5000", token)
    client.set("config/lr", "0.1")
    client.get("config/lr", timeout=30)      # b'0.1', waits for the key
    client.add("counter", 1)                 # 1

Inside `cohort launch` use cohort.coordination_client(): the address, job
token and task come from the environment. Values are bytes (str is
encoded as UTF-8). Every blocking call has a timeout in seconds (default
300) and raises DeadlineExceededError naming the key or barrier; blocking
calls release the GIL and Ctrl-C interrupts them.)doc")
      .def(
          py::init([](const std::string& address,
                      std::optional<std::string> token,
                      std::optional<std::string> task, double rpc_timeout) {
            std::string t =
                token.has_value()
                    ? *token
                    : Env::Default()->GetVar(rpc::kJobTokenEnvVar).value_or("");
            return std::make_shared<Client>(address, t, task, rpc_timeout);
          }),
          py::arg("address"), py::arg("token") = py::none(),
          py::arg("task") = py::none(), py::arg("rpc_timeout") = 30.0,
          "address: host:port of the service. token: the job token "
          "(default: COHORT_JOB_TOKEN). task: \"JOB:INDEX\", needed for "
          "barriers. rpc_timeout: seconds for calls that do not wait.")
      .def_property_readonly("address", &Client::address)
      .def_property_readonly("task", &Client::task)
      .def(
          "set",
          [](Client& c, const std::string& key, py::handle value,
             bool overwrite) {
            std::string v = Bytes(value);
            auto agent = c.agent();
            CallInterruptible([agent, key, v, overwrite] {
              return agent->InsertKeyValue(key, v, overwrite);
            });
          },
          py::arg("key"), py::arg("value"), py::arg("overwrite") = false,
          "Stores value under key; AlreadyExistsError when the key exists "
          "and overwrite is False.")
      .def(
          "get",
          [](Client& c, const std::string& key, std::optional<double> timeout) {
            auto agent = c.agent();
            const absl::Duration wait =
                Seconds(timeout, kDefaultWait, "timeout");
            return py::bytes(CallInterruptible<std::string>(
                [agent, key, wait] { return agent->GetKeyValue(key, wait); }));
          },
          py::arg("key"), py::arg("timeout") = py::none(),
          "The value of key, waiting up to timeout seconds (default 300) "
          "for it to be set.")
      .def(
          "try_get",
          [](Client& c, const std::string& key) {
            auto agent = c.agent();
            return py::bytes(CallInterruptible<std::string>(
                [agent, key] { return agent->TryGetKeyValue(key); }));
          },
          py::arg("key"), "The value of key now; NotFoundError if unset.")
      .def(
          "add",
          [](Client& c, const std::string& key, int64_t delta) {
            auto agent = c.agent();
            return CallInterruptible<int64_t>([agent, key, delta] {
              return agent->IncrementKeyValue(key, delta);
            });
          },
          py::arg("key"), py::arg("delta") = 1,
          "Atomically adds delta to the integer at key (0 when unset) and "
          "returns the result.")
      .def(
          "compare_and_swap",
          [](Client& c, const std::string& key, py::handle expected,
             py::handle desired) {
            std::optional<std::string> e;
            if (!expected.is_none()) e = Bytes(expected);
            std::string d = Bytes(desired);
            auto agent = c.agent();
            coord::CompareAndSwapResult r =
                CallInterruptible<coord::CompareAndSwapResult>(
                    [agent, key, e, d] {
                      return agent->CompareAndSwapKeyValue(key, e, d);
                    });
            py::object stored = py::none();
            if (r.stored.has_value()) stored = py::bytes(*r.stored);
            return py::make_tuple(r.swapped, stored);
          },
          py::arg("key"), py::arg("expected"), py::arg("desired"),
          "Sets key to desired if its value is expected (None: the key is "
          "absent). Returns (swapped, value stored now).")
      .def(
          "list",
          [](Client& c, const std::string& directory) {
            auto agent = c.agent();
            auto entries = CallInterruptible<
                std::vector<std::pair<std::string, std::string>>>(
                [agent, directory] {
                  return agent->GetKeyValueDir(directory);
                });
            py::dict out;
            for (const auto& [k, v] : entries) out[py::str(k)] = py::bytes(v);
            return out;
          },
          py::arg("directory"),
          "Every key under directory/ with its value, as a dict.")
      .def(
          "delete",
          [](Client& c, const std::string& key) {
            if (key.empty()) {
              // The service reads "" as the root: every key of the job.
              ThrowStatus(absl::InvalidArgumentError(
                  "delete: empty key (it would delete every key of the "
                  "job); name a key or directory"));
            }
            auto agent = c.agent();
            CallInterruptible(
                [agent, key] { return agent->DeleteKeyValue(key); });
          },
          py::arg("key"), "Deletes key and every key under key/.")
      .def(
          "watch",
          [](Client& c, const std::string& key, int64_t after_version,
             std::optional<double> timeout) {
            auto agent = c.agent();
            const absl::Duration wait =
                Seconds(timeout, kDefaultWait, "timeout");
            return CallInterruptible<KeyValueWatchResult>(
                [agent, key, after_version, wait] {
                  return agent->WatchKeyValue(key, after_version, wait);
                });
          },
          py::arg("key"), py::arg("after_version") = 0,
          py::arg("timeout") = py::none(),
          "Waits until key's version exceeds after_version (a set or a "
          "delete) and returns what it holds then.")
      .def(
          "barrier",
          [](Client& c, const std::string& name, std::optional<double> timeout,
             std::optional<std::vector<std::string>> tasks) {
            c.RequireTask("barrier");
            std::vector<TaskId> ids;
            for (const std::string& t :
                 tasks.value_or(std::vector<std::string>{})) {
              ids.push_back(ValueOrThrow(TaskId::Parse(t)));
            }
            auto agent = c.agent();
            const absl::Duration wait =
                Seconds(timeout, kDefaultWait, "timeout");
            CallInterruptible(
                [agent, name, wait, ids] {
                  return agent->WaitAtBarrier(name, wait, ids);
                },
                [agent, name] { agent->CancelBarrier(name).IgnoreError(); });
          },
          py::arg("name"), py::arg("timeout") = py::none(),
          py::arg("tasks") = py::none(),
          "Waits until every task (or the given \"JOB:INDEX\" tasks) reaches "
          "the barrier `name`. Reusable: each call is the next instance.")
      .def(
          "connect",
          [](Client& c) {
            c.RequireTask("connect");
            auto agent = c.agent();
            CallInterruptible([agent] { return agent->Connect(); });
          },
          "Registers this task with the service and starts heartbeats; the "
          "service then notices if this process dies.")
      .def(
          "shutdown",
          [](Client& c) {
            auto agent = c.agent();
            CallInterruptible([agent] { return agent->Shutdown(); });
          },
          "Unregisters a connected task (waits at the service's shutdown "
          "barrier, if it has one).");

  m.def("coordination_client", &FromLaunchEnvironment,
        py::arg("rpc_timeout") = py::none(), R"doc(
The coordination client of this task of `cohort launch`.

Address, job token and task ("worker:1") come from the environment that
`cohort launch` sets; FailedPreconditionError outside it.)doc");
}

}  // namespace cohort::python
